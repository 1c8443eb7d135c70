"""``explain`` in a real Core on MockClock: for a job held by each kind of limit in
turn, the first holding entry names that limit with its reopening, and agrees
with the job's derived ``admission`` (or, for a dead job, with the refusal of
its replay); a running job lists what it holds; position; bad input and scope.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
import trio
import trio.testing

from actors.errors import Refused
from daemon.admission import explain as explain_module
from daemon.cli import explain as cli_explain
from daemon.config import Config, DaemonConfig
from daemon.core import Core
from daemon.dispatch import dispatch
from daemon.session import Session
from tests.unit.harness import WALL0, call, claim_jobs, enqueue_job, running_core

LEASE = 60_000


def _ms(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=dt.UTC).timestamp()) * 1000


async def explain(core: Core, job_id: str) -> dict[str, Any]:
    return await call(core, "explain", job_id=job_id)


def holding(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [h for h in answer["holds"] if h["holding"]]


async def agrees(core: Core, job_id: str) -> dict[str, Any]:
    """The first holding entry, checked against the job's derived ``admission``."""
    answer = await explain(core, job_id)
    first = holding(answer)[0]
    admission = (await call(core, "get", job_id=job_id))["job"]["admission"]
    assert admission["state"] == "deferred"
    assert REASON_OF_KIND.get(first["limit"], REASON_OF_KIND[first["kind"]]) == admission["reason"]
    assert (first["next_eligible_at"], first["exact"]) == (
        admission["next_eligible_at"], admission["exact"])  # fmt: skip
    return first


REASON_OF_KIND = {
    "quota": "running_full", "policy_window": "window_exhausted",
    "policy_in_flight": "in_flight_full", "group": "group_in_flight_cap",
    "budget": "budget_exhausted", "budget_paused": "budget_paused",
    "min_in_flight": "reserved_for_other_groups",
}  # fmt: skip


async def two_jobs_one_running(core: Core, **enqueue: Any) -> str:
    """Two jobs of queue ``q``; the first claimed. The second's id."""
    await enqueue_job(core, lease_ms=LEASE, **enqueue)
    second = await enqueue_job(core, lease_ms=LEASE, **enqueue)
    assert len(await claim_jobs(core)) == 1
    return second["id"]


async def test_max_running_holds_a_pending_job_until_a_lease_lapses(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "quota_set", quota={"max_running": 1})
        job_id = await two_jobs_one_running(core)
        first = await agrees(core, job_id)
        assert first == {
            "limit": "max_running", "kind": "quota", "scope": {"namespace": "default"},
            "used": 1, "max": 1, "holding": True, "next_eligible_at": WALL0 + LEASE,
            "exact": False,
        }  # fmt: skip


async def test_a_window_holds_a_job_until_its_next_boundary_exactly(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        window = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}
        await call(core, "policy_set", queue="q", max_claims_per_window=1, window=window)
        job_id = await two_jobs_one_running(core)
        first = await agrees(core, job_id)
        midnight = _ms(2023, 11, 15, 8)  # 00:00 PST after 2023-11-14 14:13 PST
        assert first == {
            "limit": "day", "kind": "policy_window", "scope": {"queue": "q"}, "used": 1,
            "max": 1, "holding": True, "next_eligible_at": midnight, "exact": True,
        }  # fmt: skip


async def test_shadowed_limits_are_listed_over_but_hold_nothing(tmp_path, autojump_clock):
    """Shadow mode (``enforce: false``): a policy window and a drip budget that are
    over are listed with their usage, ``holding`` false, and the job is admitted."""
    async with running_core(tmp_path) as core:
        window = {"period": "day", "tz": "UTC", "start": "00:00"}
        await call(core, "policy_set", queue="q", max_claims_per_window=1, window=window,
                   enforce=False)  # fmt: skip
        hourly = {"type": "time_based", "duration_ms": 3_600_000, "burst": 1}
        await call(core, "budget_create", key="drip", allocation=1, enforce=False, strategy=hourly)
        job_id = await two_jobs_one_running(core, budgets=[{"key": "drip", "cost": 1}])
        answer = await explain(core, job_id)
        assert holding(answer) == []
        by_limit = {h["limit"]: h for h in answer["holds"]}
        assert (by_limit["day"]["used"], by_limit["day"]["max"]) == (1, 1)
        assert by_limit["drip"]["next_eligible_at"] is None
        admission = (await call(core, "get", job_id=job_id))["job"]["admission"]
        assert admission is None or admission["state"] == "admitted"


async def test_the_in_flight_cap_holds_a_job_and_hints_the_lease(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_in_flight=1)
        job_id = await two_jobs_one_running(core)
        first = await agrees(core, job_id)
        assert (first["limit"], first["kind"], first["used"], first["max"]) == (
            "max_in_flight", "policy_in_flight", 1, 1)  # fmt: skip
        assert first["next_eligible_at"] == WALL0 + LEASE


async def test_a_group_cap_holds_its_group_only(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_in_flight=5, max_in_flight_per_group=1)
        job_id = await two_jobs_one_running(core, group="acme")
        other = await enqueue_job(core, group="zeta")
        first = await agrees(core, job_id)
        assert (first["limit"], first["scope"], first["used"], first["max"]) == (
            "max_in_flight_per_group", {"queue": "q", "group": "acme"}, 1, 1)  # fmt: skip
        assert holding(await explain(core, other["id"])) == []


async def test_a_reservation_holds_other_groups_and_a_scheduled_job_is_judged_as_if_due(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_in_flight=2, min_in_flight={"gold": 1})
        await enqueue_job(core, group="base")
        assert len(await claim_jobs(core)) == 1
        await enqueue_job(core, group="gold")
        base = await enqueue_job(core, group="base")
        later = await enqueue_job(core, group="base", delay_ms=60_000)
        first = await agrees(core, base["id"])
        assert (first["limit"], first["scope"], first["used"], first["max"]) == (
            "min_in_flight", {"queue": "q", "group": "base"}, 1, 1)  # fmt: skip
        # Turns and reservations reorder claims: the position is an estimate there.
        assert (await explain(core, base["id"]))["position"] == {"ahead": 1, "approximate": True}
        scheduled = await explain(core, later["id"])
        assert scheduled["status"] == "scheduled" and scheduled["position"]["ahead"] is None
        assert holding(scheduled) == [first]


async def test_a_drip_budget_holds_a_job_to_the_exact_refill(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        drip = {"allocation": 1, "strategy": {"type": "time_based", "duration_ms": 30_000}}
        await call(core, "budget_create", key="llm", **drip)
        job_id = await two_jobs_one_running(core, budgets=[{"key": "llm"}])
        answer = await explain(core, job_id)
        first = await agrees(core, job_id)
        assert first == {
            "limit": "llm", "kind": "budget", "scope": {"budget": "llm"}, "used": 1,
            "max": 1, "holding": True, "next_eligible_at": WALL0 + 30_000, "exact": True,
        }  # fmt: skip
        assert answer["holds"] == [first]
        await trio.sleep_until(core.clock.deadline_for(WALL0 + 30_000))
        await trio.testing.wait_all_tasks_blocked()
        assert holding(await explain(core, job_id)) == []
        assert [j["id"] for j in await claim_jobs(core)] == [job_id]


async def test_a_paused_budget_holds_a_job_to_the_pause_end(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        slots = {"allocation": 5, "strategy": {"type": "while_in_flight"}}
        await call(core, "budget_create", key="api", **slots)
        job = await enqueue_job(core, budgets=[{"key": "api"}])
        await call(core, "budget_pause", key="api", retry_after_s=30, reason="upstream 429")
        first = await agrees(core, job["id"])
        assert first == {
            "limit": "api", "kind": "budget_paused", "scope": {"budget": "api"}, "used": None,
            "max": None, "holding": True, "next_eligible_at": WALL0 + 30_000, "exact": True,
        }  # fmt: skip
        # Its tokens are there: only the pause holds it, to the millisecond.
        assert [h["kind"] for h in holding(await explain(core, job["id"]))] == ["budget_paused"]
        await trio.sleep_until(core.clock.deadline_for(WALL0 + 30_000))
        await trio.testing.wait_all_tasks_blocked()
        assert holding(await explain(core, job["id"])) == []
        assert [j["id"] for j in await claim_jobs(core)] == [job["id"]]


async def test_a_budget_that_cannot_pay_is_named_before_the_policy(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        drip = {"allocation": 1, "strategy": {"type": "time_based", "duration_ms": 60_000}}
        await call(core, "budget_create", key="llm", **drip)
        await call(core, "policy_set", queue="q", max_in_flight=1)
        job_id = await two_jobs_one_running(core, budgets=[{"key": "llm"}])
        answer = await explain(core, job_id)
        assert [(h["kind"], h["holding"]) for h in answer["holds"]] == [
            ("budget", True), ("policy_in_flight", True)]  # fmt: skip
        await agrees(core, job_id)


async def test_the_monthly_quota_holds_a_dead_jobs_replay_to_next_month(tmp_path,
                                                                       autojump_clock):  # fmt: skip
    config = Config(daemon=DaemonConfig(rollup_interval=60_000))
    async with running_core(tmp_path, config=config, wall_start_ms=_ms(2026, 12, 31)) as core:
        await call(core, "quota_set", quota={"monthly_jobs_quota": 2, "max_pending": 10})
        await enqueue_job(core)
        pending = await enqueue_job(core)
        (job,) = await claim_jobs(core)
        await call(core, "fail", job_id=job["id"], lease=job["lease"], error="x", dead=True)
        await trio.sleep(60)  # virtual time (autojump_clock): the roll-up tick counts the month
        await trio.testing.wait_all_tasks_blocked()
        answer = await explain(core, job["id"])
        assert answer["status"] == "dead" and answer["position"] == {
            "ahead": None, "approximate": False}  # fmt: skip
        first = holding(answer)[0]
        assert first == {
            "limit": "monthly_jobs_quota", "kind": "door", "scope": {"namespace": "default"},
            "used": 2, "max": 2, "holding": True, "next_eligible_at": _ms(2027, 1, 1),
            "exact": True,
        }  # fmt: skip
        assert [h["limit"] for h in answer["holds"]] == ["monthly_jobs_quota", "max_pending"]
        with pytest.raises(Refused) as refused:  # what the replay meets: the same limit
            await call(core, "dead_replay", job_ids=[job["id"]])
        assert refused.value.details["limit"] == first["limit"]
        # The door holds what enters the namespace, not a job already in it.
        assert (await explain(core, pending["id"]))["holds"] == []


async def test_a_running_job_lists_what_it_holds_holding_nothing(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "quota_set", quota={"max_running": 3})
        await call(core, "policy_set", queue="q", max_in_flight=1)
        slots = {"allocation": 5, "strategy": {"type": "while_in_flight"}}
        await call(core, "budget_create", key="api", **slots)
        await enqueue_job(core, budgets=[{"key": "api", "cost": 2}])
        (job,) = await claim_jobs(core)
        answer = await explain(core, job["id"])
        assert answer["status"] == "running"
        assert [(h["limit"], h["used"], h["max"], h["holding"]) for h in answer["holds"]] == [
            ("api", 2, 5, False),
            ("max_running", 1, 3, False),
            ("max_in_flight", 1, 1, False),
        ]
        done = await call(core, "complete", job_id=job["id"], lease=job["lease"])
        assert (await explain(core, done["job"]["id"]))["holds"] == []


async def test_position_counts_claimable_jobs_ahead_and_caps_the_count(tmp_path, autojump_clock,
                                                                      monkeypatch):  # fmt: skip
    async with running_core(tmp_path) as core:
        ids = [(await enqueue_job(core))["id"] for _ in range(4)]
        urgent = await enqueue_job(core, priority=0)
        assert (await explain(core, urgent["id"]))["position"] == {
            "ahead": 0, "approximate": False}  # fmt: skip
        assert (await explain(core, ids[3]))["position"] == {"ahead": 4, "approximate": False}
        monkeypatch.setattr(explain_module, "AHEAD_MAX", 2)
        assert (await explain(core, ids[3]))["position"] == {"ahead": 3, "approximate": True}


async def test_bad_input_scope_and_another_tenants_job(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        job = await enqueue_job(core)
        bad = (({}, "job_id"), ({"job_id": 7}, "job_id"), ({"job_id": "x" * 500}, "job_id"),
               ({"job_id": "a", "z": 1}, "z"))  # fmt: skip
        for args, field in bad:
            with pytest.raises(Refused) as refused:
                await call(core, "explain", **args)
            assert (refused.value.code, refused.value.details.get("field")) == (
                "invalid_argument", field)  # fmt: skip
        with pytest.raises(Refused) as refused:
            await call(core, "explain", job_id="01NOSUCHJOB")
        assert refused.value.code == "not_found"
        elsewhere = Session(namespace="other", token_name="b")
        with pytest.raises(Refused) as refused:
            await dispatch(core, elsewhere, "explain", {"job_id": job["id"]})
        assert refused.value.code == "not_found"
        outside = Session(grants=frozenset({"consume"}), queues=("r",), token_name="w")
        with pytest.raises(Refused) as refused:
            await dispatch(core, outside, "explain", {"job_id": job["id"]})
        assert refused.value.code == "forbidden"


def test_the_cli_says_what_holds_the_job_in_the_viewers_zone_and_utc(monkeypatch):
    monkeypatch.setenv("TZ", "America/Los_Angeles")
    time.tzset()
    try:
        reopens = _ms(2023, 11, 15, 8)
        hold = {"limit": "day", "kind": "policy_window", "scope": {"queue": "images"},
                "used": 100, "max": 100, "holding": True, "next_eligible_at": reopens,
                "exact": True}  # fmt: skip
        budget = {**hold, "limit": "llm", "kind": "budget", "scope": {"budget": "llm"},
                  "used": 0.5, "max": 1, "holding": False, "next_eligible_at": None}  # fmt: skip
        result = {"job_id": "j", "status": "pending", "holds": [budget, hold],
                  "position": {"ahead": 10_001, "approximate": True}}  # fmt: skip
        lines = cli_explain.render(result, reopens - (3 * 60 + 12) * 60_000).splitlines()
        assert lines[0] == ("held by window 'day' of queue images: 100 of 100 used, reopens "
                            "00:00 PST (08:00 UTC) in 3 h 12 min")  # fmt: skip
        assert lines[1].split() == ["LIMIT", "KIND", "SCOPE", "USED", "HOLDING", "FREES"]
        assert lines[2].split() == ["llm", "budget", "budget", "llm", "0.5/1", "no"]
        assert lines[3].endswith("yes      00:00 PST (08:00 UTC) in 3 h 12 min")
        assert lines[-1] == "more than 10001 claimable job(s) ahead of it in its queue"
        held = {**hold, "kind": "policy_in_flight", "limit": "max_in_flight", "exact": False}
        assert cli_explain.summary(held, reopens - 90_000).endswith(
            "frees ~00:00 PST (08:00 UTC) in 1 min")  # fmt: skip
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
