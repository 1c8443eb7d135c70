"""Fairness groups through the real core (issue 18, parts 1 and 2): ``group`` on
jobs, round robin and weighted shares in the claim, the ring after a restart."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.errors import Refused
from tests.unit.harness import call, claim_jobs, enqueue_job, running_core

OTHERS = "BCDEFGHIJK"


async def _enqueue(core: Any, group: str | None, n: int, queue: str = "q", **extra: Any) -> None:
    for start in range(0, n, 1000):
        jobs = [{"queue": queue, "type": "t", **({"group": group} if group else {}), **extra}
                for _ in range(min(1000, n - start))]  # fmt: skip
        await call(core, "enqueue_many", jobs=jobs)


async def _claimed_groups(core: Any, n: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(n):
        out += [job["group"] for job in await claim_jobs(core)]
    return out


def _with_core(body: Any) -> Any:
    """Run ``body(core)`` on a fresh core on MockClock (for hypothesis tests)."""
    with tempfile.TemporaryDirectory() as tmp:

        async def main() -> Any:
            async with running_core(Path(tmp)) as core:
                return await body(core)

        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- part 1: the group field ----------------------------------------------------------


async def test_a_job_carries_its_group_and_shows_null_without_one(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            gold = await enqueue_job(core, group="gold")
            plain = await enqueue_job(core)
            wide = await enqueue_job(core, group="é" * 64)  # 128 bytes of UTF-8
            many = await call(core, "enqueue_many", jobs=[
                {"queue": "q", "type": "t", "group": "customer 42/ü"},
                {"queue": "q", "type": "t"}])  # fmt: skip
            assert (gold["group"], plain["group"], wide["group"]) == ("gold", None, "é" * 64)
            assert [r["job"]["group"] for r in many["results"]] == ["customer 42/ü", None]
            assert (await call(core, "get", job_id=gold["id"]))["job"]["group"] == "gold"
            listed = (await call(core, "list", queue="q"))["jobs"]
            assert [j["group"] for j in listed] == ["gold", None, "é" * 64, "customer 42/ü", None]
            stored = core.conn.execute("SELECT id, grp FROM jobs ORDER BY id").fetchall()
            assert stored[0] == (gold["id"], "gold") and stored[1] == (plain["id"], None)


@pytest.mark.parametrize(
    "group", ["", "x" * 129, "é" * 65, 5, ["a"], "a\nb", "tab\there", "\x7f"]
)  # fmt: skip
@pytest.mark.parametrize("verb", ["enqueue", "enqueue_many"])
async def test_a_bad_group_is_refused_and_nothing_written(tmp_path, autojump_clock, group, verb):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = {"queue": "q", "type": "t", "group": group}
            with pytest.raises(Refused) as info:
                if verb == "enqueue":
                    await call(core, "enqueue", **job)
                else:
                    await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t"}, job])
            assert info.value.code == "invalid_argument"
            assert info.value.details["field"].endswith("group")
            assert core.conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"fairness": "lifo"}, "fairness"), ({"fairness": 1}, "fairness"),
     ({"fairness": "round_robin", "weights": {"a": 0}}, "weights.a"),
     ({"fairness": "round_robin", "weights": ["a"]}, "weights"),
     ({"fairness": "round_robin", "weights": {"a\n": 2}}, "weights"),
     ({"fairness": "round_robin", "weights": {"a": 10_001}}, "weights.a"),
     ({"fairness": "round_robin", "default_weight": 0}, "default_weight"),
     ({"fairness": "round_robin", "default_weight": 1.5}, "default_weight"),
     ({"max_in_flight_per_group": -1}, "max_in_flight_per_group"),
     ({"max_in_flight_per_group": "5"}, "max_in_flight_per_group"),
     ({"group_limits": {"gold": -2}}, "group_limits.gold"),
     ({"group_limits": {"gold": True}}, "group_limits.gold"),
     ({"min_in_flight": {"gold": 2}}, "min_in_flight"),
     ({"max_in_flight": 5, "min_in_flight": {"gold": -1}}, "min_in_flight.gold"),
     ({"max_in_flight": 5, "min_in_flight": {"gold": 3, "silver": 3}}, "min_in_flight"),
     ({"fairness": "round_robin", "weight": {"a": 2}}, "weight")],
)  # fmt: skip
async def test_a_malformed_group_policy_is_refused_naming_the_field(tmp_path, autojump_clock,
                                                                   fields, field):  # fmt: skip
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            with pytest.raises(Refused) as info:
                await call(core, "policy_set", queue="q", **fields)
            assert (info.value.code, info.value.details["field"]) == ("invalid_argument", field)
            assert (await call(core, "policy_list"))["policies"] == []


async def test_reservations_over_max_in_flight_name_both_numbers(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            with pytest.raises(Refused) as info:
                await call(core, "policy_set", queue="q", max_in_flight=10,
                           min_in_flight={"gold": 6, "silver": 5})  # fmt: skip
            assert info.value.details["field"] == "min_in_flight"
            assert "11" in info.value.message and "10" in info.value.message


async def test_the_group_fields_read_back_and_are_audited(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            fields = {"fairness": "round_robin", "weights": {"gold": 3}, "default_weight": 2,
                      "max_in_flight_per_group": 5, "group_limits": {"gold": 8},
                      "min_in_flight": {"gold": 2}}  # fmt: skip
            await call(core, "policy_set", queue="q", max_in_flight=10, **fields)
            policy = (await call(core, "policy_get", queue="q"))["policy"]
            assert {k: policy[k] for k in fields} == fields
            record = (await call(core, "audit_list", target="q"))["records"][0]
            assert {k: record["after"][k] for k in fields} == fields
            plain = await call(core, "policy_set", queue="p", max_in_flight=3)
            assert "fairness" not in plain["policy"]  # absent: today's shape


# -- part 1: round robin and weights ---------------------------------------------------


@pytest.mark.parametrize(("fairness", "served"), [("round_robin", 100), ("fifo", 0)])
async def test_oban_burst_one_accounts_10000_jobs_others_still_served(
    tmp_path, autojump_clock, fairness, served
):
    """elixirforum 53388 (Oban): account A enqueues 10,000 jobs, then B-K ten
    each; with round robin all of B-K's 100 jobs are claimed within the first
    110 claims; with FIFO none are."""
    with trio.fail_after(200):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", fairness=fairness, max_in_flight=10_000)
            await _enqueue(core, "A", 10_000)
            for group in OTHERS:
                await _enqueue(core, group, 10)
            got = await _claimed_groups(core, 110)
            assert sum(g != "A" for g in got) == served
            if fairness == "round_robin":
                assert Counter(got) == {"A": 10, **{g: 10 for g in OTHERS}}


async def test_within_a_group_claims_follow_priority_then_ready_at(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", fairness="round_robin")
            late = await enqueue_job(core, group="a", priority=5)
            await trio.sleep(1)  # virtual time (autojump_clock): a later ready_at
            later = await enqueue_job(core, group="a", priority=5)
            urgent = await enqueue_job(core, group="a", priority=1)
            other = await enqueue_job(core, group="b", priority=9)
            ids = [j["id"] for j in await claim_jobs(core, max=4)]
            assert ids == [urgent["id"], other["id"], late["id"], later["id"]]


async def test_jobs_without_a_group_take_turns_as_the_default_group(tmp_path, autojump_clock):
    """Jobs enqueued before the policy, and after it without a group, are the
    default group "" (shown null)."""
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await _enqueue(core, None, 3)
            await call(core, "policy_set", queue="q", fairness="round_robin")
            await _enqueue(core, "a", 3)
            await _enqueue(core, None, 1)
            assert await _claimed_groups(core, 7) == [None, "a", None, "a", None, "a", None]


async def test_the_ring_is_rebuilt_at_a_restart(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", fairness="round_robin",
                       max_in_flight=100, max_in_flight_per_group=2)  # fmt: skip
            await _enqueue(core, "a", 5)
            await _enqueue(core, "b", 1)
            await _enqueue(core, "c", 2)
            assert await _claimed_groups(core, 2) == ["a", "b"]
            counts = (core.policies.groups.rings[("default", "q")].pending,
                      core.policies.groups.rings[("default", "q")].in_flight)  # fmt: skip
        async with running_core(tmp_path) as core:
            ring = core.policies.groups.rings[("default", "q")]
            assert (ring.pending, ring.in_flight) == counts == ({"a": 4, "c": 2}, {"a": 1, "b": 1})
            assert await _claimed_groups(core, 4) == ["a", "c", "c"]  # a at its cap of 2


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(
    others=st.integers(1, 10),
    weights=st.lists(st.integers(1, 12), min_size=10, max_size=10),
    backlog=st.lists(st.integers(0, 40), min_size=11, max_size=11),
    arrivals=st.lists(st.tuples(st.integers(0, 10), st.integers(1, 20)), max_size=12),
)
def test_weighted_shares_stay_within_one_over_any_40_claims(others, weights, backlog, arrivals):
    """Weights A=3 and random others: any 40 consecutive claims while every
    group has work give each group its weighted share, +-1 (actors/turn_window.py).
    Claims are counted from the core's answers, work from what was enqueued."""
    groups = ["A", *OTHERS[:others]]
    weight = {"A": 3, **{g: weights[i] for i, g in enumerate(OTHERS[:others])}}
    total = sum(weight.values())
    busy: list[bool] = []  # per claim: did every group have work before it?

    async def body(core: Any) -> list[str]:
        await call(core, "policy_set", queue="q", fairness="round_robin", weights=weight)
        left = {g: 100 * weight[g] // total + 1 + backlog[i] for i, g in enumerate(groups)}
        for group, n in left.items():
            await _enqueue(core, group, n)
        got: list[str] = []
        for step in range(120):
            if step % 10 == 0 and arrivals:
                index, n = arrivals[step // 10 % len(arrivals)]
                await _enqueue(core, groups[index % len(groups)], n)
                left[groups[index % len(groups)]] += n
            every = all(left.values())
            claimed = [j["group"] for j in await claim_jobs(core)]
            assert len(claimed) == (1 if any(left.values()) else 0)  # work: a claim
            busy.extend([every] * len(claimed))
            for group in claimed:
                left[group] -= 1
            got += claimed
        return got

    got = _with_core(body)
    windows = [s for s in range(len(got) - 39) if all(busy[s : s + 40])]
    for start in windows:
        window = Counter(got[start : start + 40])
        for group in groups:
            assert abs(window[group] - 40 * weight[group] / total) <= 1, (start, window)


async def test_groups_another_daemon_gave_work_are_found_and_served(tmp_path, autojump_clock):
    """Several daemons on one store (daemon.admission.cluster): after another
    daemon's write, the groups with claimable jobs in the store take turns here
    too, until a claim finds them empty. Simulated by rows this core never saw."""
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", fairness="round_robin")
            await _enqueue(core, "a", 4)
            with core.conn:
                core.conn.executemany(
                    "INSERT INTO jobs (id, namespace, queue, type, payload, priority, state, "
                    "attempts, max_attempts, lease_ms, ready_at, created_at, updated_at, grp) "
                    "VALUES (?, 'default', 'q', 't', '{}', 32768, 'pending', 0, 25, 60000, 0, "
                    "0, 0, 'z')", [("00other1",), ("00other2",)])  # fmt: skip
            assert await _claimed_groups(core, 1) == ["a"]  # this daemon's view: a only
            ring = core.policies.groups.rings[("default", "q")]
            core.policies.groups.discover(core.store)
            assert ring.unknown == {"a", "z"}
            assert await _claimed_groups(core, 5) == ["a", "z", "a", "z", "a"]
            assert await _claimed_groups(core, 1) == []
            assert ring.unknown == set() and len(ring.turns) == 0
