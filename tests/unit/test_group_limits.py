"""Per-group caps and guaranteed minimums with lending, through the real core
(issue 18, parts 2, 3 and 6)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.errors import Refused
from tests.unit.harness import call, claim_jobs, running_core
from tests.unit.test_fairness import _enqueue, _with_core


async def _claim_all(core: Any) -> list[dict]:
    """What eager workers take: claims until one comes back empty."""
    out: list[dict] = []
    while jobs := await claim_jobs(core, max=100):
        out += jobs
    return out


async def _complete(core: Any, job: dict) -> None:
    await call(core, "complete", job_id=job["id"], lease=job["lease"])


def _groups(jobs: list[dict]) -> Counter:
    return Counter(j["group"] for j in jobs)


# -- part 2: caps per group -------------------------------------------------------------


@pytest.mark.parametrize("fairness", ["round_robin", "fifo"])
async def test_group_caps_hold_each_group_and_say_why(tmp_path, autojump_clock, fairness):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", fairness=fairness,
                       max_in_flight_per_group=2, group_limits={"gold": 5})  # fmt: skip
            for group in ("gold", "a", "b"):
                await _enqueue(core, group, 10)
            running = await _claim_all(core)
            assert _groups(running) == {"gold": 5, "a": 2, "b": 2}
            empty = await call(core, "claim_next", queues=["q"])
            (held,) = empty["deferred"]
            assert (held["reason"], held["exact"], held["pending"]) == (
                "group_in_flight_cap",
                False,
                21,
            )
            waiting = (await call(core, "list", queue="q", status="pending"))["jobs"]
            an_a = next(j for j in waiting if j["group"] == "a")
            admission = (await call(core, "get", job_id=an_a["id"]))["job"]["admission"]
            assert (admission["state"], admission["reason"]) == ("deferred", "group_in_flight_cap")
            with pytest.raises(Refused) as info:
                await call(core, "claim", job_id=an_a["id"])
            assert (info.value.code, info.value.details["reason"]) == (
                "deferred",
                "group_in_flight_cap",
            )
            await _complete(core, next(j for j in running if j["group"] == "a"))
            assert _groups(await _claim_all(core)) == {"a": 1}
            status = (await call(core, "admission_status", queue="q"))["queues"][0]
            assert status["status"]["reason"] == "group_in_flight_cap"
            by_group = {g["group"]: g for g in status["groups"]}
            assert {g: (v["pending"], v["in_flight"]) for g, v in by_group.items()} == {
                "gold": (5, 5),
                "a": (7, 2),
                "b": (8, 2),
            }


async def test_a_fifo_queue_with_caps_keeps_claim_order_past_held_groups(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", max_in_flight_per_group=1)
            order = ["a", "a", "b", "a", "c", "b"]
            for group in order:
                await _enqueue(core, group, 1)
            assert [j["group"] for j in await claim_jobs(core, max=10)] == ["a", "b", "c"]


# -- part 3: guaranteed minimums that lend -------------------------------------------------


async def test_lending_gold_reserves_four_of_ten(tmp_path, autojump_clock):
    """max_in_flight 10, min_in_flight {gold: 4}: idle, gold's slots are lent; when
    gold gets work, freed slots go to gold first up to 4; nothing is revoked;
    while gold is busy the others hold at most 6."""
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", fairness="round_robin", max_in_flight=10,
                       min_in_flight={"gold": 4})  # fmt: skip
            await _enqueue(core, "a", 20)
            await _enqueue(core, "b", 20)
            others = await _claim_all(core)
            assert len(others) == 10  # gold idle: its reservation is lent
            status = (await call(core, "admission_status", queue="q"))["queues"][0]
            gold_row = next(g for g in status["groups"] if g["group"] == "gold")
            assert (gold_row["in_flight"], gold_row["reserved"], gold_row["lent"]) == (0, 4, 4)
            await _enqueue(core, "gold", 6)
            assert await _claim_all(core) == []
            waiting = (await call(core, "list", queue="q", status="pending"))["jobs"]
            an_a = next(j for j in waiting if j["group"] == "a")
            gold = []
            for _ in range(2):
                await _complete(core, others.pop())
                await _complete(core, others.pop())
                # Two slots free, both owed to gold: another group's job says so.
                admission = (await call(core, "get", job_id=an_a["id"]))["job"]["admission"]
                assert (admission["reason"], admission["exact"]) == (
                    "reserved_for_other_groups",
                    False,
                )
                got = await _claim_all(core)
                assert _groups(got) == {"gold": 2}  # the freed slots went to gold
                gold += got
            statuses = [(await call(core, "get", job_id=j["id"]))["job"]["status"] for j in others]
            assert statuses == ["running"] * 6  # nothing revoked
            for _ in range(6):  # gold busy: the others never pass 6
                await _complete(core, others.pop(0))
                got = await _claim_all(core)
                others += [j for j in got if j["group"] != "gold"]
                gold += [j for j in got if j["group"] == "gold"]
                assert len(others) <= 6 and len(others) + len(gold) == 10
            status = (await call(core, "admission_status", queue="q"))["queues"][0]
            by_group = {g["group"]: g for g in status["groups"]}
            assert by_group["gold"]["reserved"] == 4 and by_group["a"]["reserved"] == 0
            assert by_group["gold"]["lent"] == 0  # gold holds its 4: nothing lent


def _drive(seed: int, steps: int, caps: dict[str, int], reserve: int,
           setup: Any = None, enqueue: Any = _enqueue) -> list[dict[str, Any]]:  # fmt: skip
    """Random arrivals and completions on a queue of 10 slots with eager workers;
    after every step, the groups' numbers and the claim of that step. ``setup``
    and ``enqueue`` put the 10 elsewhere (a budget: test_budget_reserve.py)."""
    rng = random.Random(seed)
    groups = ["gold", "a", "b", "c"]

    async def body(core: Any) -> list[dict[str, Any]]:
        if setup is not None:
            await setup(core)
        else:
            await call(core, "policy_set", queue="q", fairness="round_robin", max_in_flight=10,
                       min_in_flight={"gold": reserve}, group_limits=caps)  # fmt: skip
        running: list[dict] = []
        pending: Counter = Counter()
        log = []
        for _ in range(steps):
            before = Counter(j["group"] for j in running)
            gold_short = before["gold"] < min(reserve, before["gold"] + pending["gold"])
            event = rng.random()
            if event < 0.45 or not running:
                group, n = rng.choice(groups), rng.randint(1, 6)
                await enqueue(core, group, n)
                pending[group] += n
            else:
                await _complete(core, running.pop(rng.randrange(len(running))))
            await trio.sleep(0.01)  # virtual time: a budget's released jobs are back
            got = await _claim_all(core)
            running += got
            for job in got:
                pending[job["group"]] -= 1
            log.append({"running": Counter(j["group"] for j in running),
                        "pending": +pending, "claimed": Counter(j["group"] for j in got),
                        "gold_was_short": gold_short, "event": event})  # fmt: skip
        return log

    return _with_core(body)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), reserve=st.integers(1, 6))
def test_lending_property_gold_short_only_while_every_slot_is_busy(seed, reserve):
    """Over random arrivals and completions: in flight never exceeds 10; gold is
    below min(reserve, its demand) only while all 10 slots are busy, and a claim
    gives another group a slot only when gold is not short."""
    for step in _drive(seed, 40, {}, reserve):
        check_lending(step, reserve)


def check_lending(step: dict[str, Any], reserve: int) -> tuple[int, Any]:
    """The lending property at one step of :func:`_drive` (10 slots or tokens, gold
    reserving ``reserve``); returns (in flight, pending per group)."""
    running, pending = step["running"], step["pending"]
    total = sum(running.values())
    assert total <= 10
    demand = running["gold"] + pending["gold"]
    if running["gold"] < min(reserve, demand):
        assert total == 10
    if step["gold_was_short"] and step["claimed"]["gold"] < sum(step["claimed"].values()):
        # another group got a slot: gold is served up to its reservation first
        assert running["gold"] >= min(reserve, demand)
    return total, pending


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), cap=st.integers(1, 5), reserve=st.integers(0, 4))
def test_inngest_4345_no_slot_idle_while_work_is_queued_under_its_limits(seed, cap, reserve):
    """Inngest #4345: 400 runs queued while 200 of 550 slots sat idle. Here,
    after eager workers claim, either every slot is busy or every group with
    work queued is at its own cap."""
    caps = {"a": cap, "b": cap + 1, "c": 2 * cap}
    for step in _drive(seed, 40, caps, reserve):
        running, pending = step["running"], step["pending"]
        if sum(running.values()) < 10:
            for group, n in pending.items():
                if n > 0:
                    assert group in caps and running[group] >= caps[group], step
