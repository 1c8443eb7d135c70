"""``budget_pause`` and ``budget_resume`` in a real Core on MockClock.

A worker told by its upstream to wait pauses the budget: jobs park with reason
``budget_paused``, the exact instant and the reason text, and become claimable
at exactly the pause's end (the budgets' waker sleeps until then). A shorter
pause never shortens a longer one; who may pause, every bad input, the audit
record, metrics and a restart.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors.clock import Clock
from actors.errors import Refused
from daemon.config import Config
from daemon.core import Core
from daemon.dispatch import dispatch
from daemon.session import Session
from daemon.store.opening import open_database
from tests.unit.harness import WALL0, call, claim_jobs, running_core

DRIP = {"allocation": 100, "strategy": {"type": "time_based", "duration_ms": 1_000}}
SLOTS = {"allocation": 5, "strategy": {"type": "while_in_flight"}}
WORKER = Session(grants=frozenset({"consume"}), queues=("q",), token_name="worker")
ELSEWHERE = Session(grants=frozenset({"consume"}), queues=("other",), token_name="elsewhere")
PRODUCER = Session(grants=frozenset({"produce"}), token_name="producer")


async def as_(core: Core, who: Session, op: str, **args: Any) -> dict[str, Any]:
    return await dispatch(core, who, op, args)


async def bound_jobs(core: Core, n: int, key: str = "openai", spec: dict = DRIP) -> list[str]:
    await call(core, "budget_create", key=key, **spec)
    jobs = [{"queue": "q", "type": "t", "budgets": [{"key": key}]} for _ in range(n)]
    return [r["job"]["id"] for r in (await call(core, "enqueue_many", jobs=jobs))["results"]]


async def test_a_worker_pauses_30s_and_jobs_come_back_at_exactly_30s(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        ids = await bound_jobs(core, 3)
        held = await claim_jobs(core, max=1)
        now = core.clock.now_ms()
        paused = await as_(core, WORKER, "budget_pause", key="openai", retry_after_s=30,
                           reason="429 from upstream")  # fmt: skip
        state = paused["budget"]["state"]
        assert (state["paused_until"], state["pause_reason"]) == (now + 30_000, "429 from upstream")
        answer = await call(core, "claim_next", queues=["q"])
        assert answer["empty"] and answer["deferred"] == [{
            "queue": "q", "reason": "budget_paused", "pending": 2, "budget": "openai",
            "next_eligible_at": now + 30_000, "exact": True, "pause_reason": "429 from upstream",
        }]  # fmt: skip
        job = (await call(core, "get", job_id=ids[2]))["job"]
        assert job["admission"] == {
            "state": "deferred", "reason": "budget_paused", "budget": "openai",
            "next_eligible_at": now + 30_000, "exact": True, "pause_reason": "429 from upstream",
        }  # fmt: skip
        with pytest.raises(Refused) as refused:
            await call(core, "claim", job_id=ids[2])
        assert refused.value.code == "deferred"
        assert refused.value.details["reason"] == "budget_paused"
        assert refused.value.details["pause_reason"] == "429 from upstream"
        start = trio.current_time()
        got = await claim_jobs(core, max=2, wait_ms=3_600_000, lease_ms=3_600_000)
        assert trio.current_time() - start == 30  # exactly the pause's end
        assert [held[0]["id"], *(j["id"] for j in got)] == ids
        state = (await call(core, "budget_get", key="openai"))["budget"]["state"]
        assert (state["paused_until"], state["pause_reason"]) == (None, None)


async def test_a_shorter_second_pause_does_not_shorten_it_and_a_longer_one_lengthens_it(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        await bound_jobs(core, 1)
        now = core.clock.now_ms()
        await as_(core, WORKER, "budget_pause", key="openai", retry_after_s=30, reason="first")
        short = await as_(core, WORKER, "budget_pause", key="openai", until_ms=now + 10_000,
                          reason="second")  # fmt: skip
        assert short["budget"]["state"]["paused_until"] == now + 30_000
        assert short["budget"]["state"]["pause_reason"] == "first"
        start = trio.current_time()
        assert await claim_jobs(core, wait_ms=60_000) and trio.current_time() - start == 30
        await bound_jobs(core, 1, key="other")
        await as_(core, WORKER, "budget_pause", key="other", retry_after_s=5)
        longer = await as_(core, WORKER, "budget_pause", key="other", retry_after_s=20.5,
                           reason="longer")  # fmt: skip
        assert longer["budget"]["state"]["paused_until"] == core.clock.now_ms() + 20_500
        start = trio.current_time()
        assert await claim_jobs(core, wait_ms=60_000) and trio.current_time() - start == 20.5
        audit = await call(core, "audit_list", target_kind="budget", target="openai")
        pauses = [r for r in audit["records"] if r["action"] == "pause"]
        assert [r["actor"] for r in pauses] == ["worker"]  # the shorter one wrote nothing


async def test_a_paused_while_in_flight_budget_holds_even_with_slots_free(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await bound_jobs(core, 2, key="slots", spec=SLOTS)
        await call(core, "budget_pause", key="slots", retry_after_s=1)
        assert await claim_jobs(core) == []
        start = trio.current_time()
        assert len(await claim_jobs(core, max=2, wait_ms=10_000)) == 2
        assert trio.current_time() - start == 1


async def test_who_may_pause_and_resume(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await bound_jobs(core, 1)
        await call(core, "budget_create", key="idle", **DRIP)
        with pytest.raises(Refused) as refused:
            await as_(core, ELSEWHERE, "budget_pause", key="openai", retry_after_s=30)
        assert refused.value.code == "forbidden"
        with pytest.raises(Refused) as refused:  # no job of its queue binds "idle"
            await as_(core, WORKER, "budget_pause", key="idle", retry_after_s=30)
        assert refused.value.code == "forbidden"
        with pytest.raises(Refused) as refused:
            await as_(core, PRODUCER, "budget_pause", key="openai", retry_after_s=30)
        assert refused.value.code == "forbidden"
        with pytest.raises(Refused) as refused:
            await as_(core, WORKER, "budget_pause", key="ghost", retry_after_s=30)
        assert refused.value.code == "not_found"
        with pytest.raises(Refused) as refused:  # another tenant's budget: absent here
            await dispatch(core, Session(namespace="b", token_name="b"), "budget_pause",
                           {"key": "openai", "retry_after_s": 30})  # fmt: skip
        assert refused.value.code == "not_found"
        await as_(core, WORKER, "budget_pause", key="openai", retry_after_s=30)  # a pending job
        (job,) = await claim_jobs(core) or [None]
        assert job is None
        with pytest.raises(Refused) as refused:
            await as_(core, WORKER, "budget_resume", key="openai")
        assert refused.value.code == "forbidden"
        resumed = await call(core, "budget_resume", key="openai")
        assert resumed["budget"]["state"]["paused_until"] is None
        assert len(await claim_jobs(core)) == 1  # at once
        assert not core.budgets[("default", "openai")].paused(core.clock.now_ms())
        records = (await call(core, "audit_list", target_kind="budget", target="openai"))["records"]
        assert [(r["action"], r["actor"]) for r in records][-2:] == [
            ("pause", "worker"), ("resume", "open")]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({}, "until_ms"),
        ({"until_ms": WALL0 + 1000, "retry_after_s": 1}, "until_ms"),
        ({"retry_after_s": 0}, "retry_after_s"),
        ({"retry_after_s": -5}, "retry_after_s"),
        ({"retry_after_s": 604_801}, "retry_after_s"),
        ({"retry_after_s": "30"}, "retry_after_s"),
        ({"retry_after_s": True}, "retry_after_s"),
        ({"until_ms": -1}, "until_ms"),
        ({"until_ms": WALL0 + 604_800_001}, "until_ms"),
        ({"until_ms": "soon"}, "until_ms"),
        ({"retry_after_s": 1, "reason": ""}, "reason"),
        ({"retry_after_s": 1, "reason": "x" * 1001}, "reason"),
        ({"retry_after_s": 1, "reason": 7}, "reason"),
        ({"retry_after_s": 1, "extra": 1}, "extra"),
    ],
)
async def test_bad_pause_arguments_write_nothing(tmp_path, autojump_clock, args, field):
    async with running_core(tmp_path) as core:
        await bound_jobs(core, 1)
        with pytest.raises(Refused) as refused:
            await call(core, "budget_pause", key="openai", **args)
        assert refused.value.code == "invalid_argument"
        assert refused.value.details["field"] == field
        assert core.budgets[("default", "openai")].paused_until is None
        with pytest.raises(Refused) as refused:
            await call(core, "budget_pause", key="bad key", retry_after_s=1)
        assert refused.value.details["field"] == "key"


async def test_a_pause_already_past_pauses_nothing(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await bound_jobs(core, 1)
        out = await call(core, "budget_pause", key="openai", until_ms=core.clock.now_ms() - 1)
        assert out["budget"]["state"]["paused_until"] is None
        assert len(await claim_jobs(core)) == 1


async def test_a_pause_is_listed_counted_and_survives_a_restart(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await bound_jobs(core, 2)
        until = core.clock.now_ms() + 60_000
        await call(core, "budget_pause", key="openai", until_ms=until, reason="maintenance")
        (listed,) = (await call(core, "budget_list"))["budgets"]
        assert listed["state"]["paused_until"] == until
        sample = core.metrics.registry.get_sample_value
        assert sample("sluicegate_budget_paused", {"budget": "openai"}) == 1
        assert sample("sluicegate_budget_pauses_total", {"budget": "openai"}) == 1
        await claim_jobs(core)  # parks both
        held = {"queue": "q", "reason": "budget_paused"}
        assert sample("sluicegate_admission_deferred_jobs", held) == 2
    db = open_database(tmp_path / "db.sqlite")
    try:
        again = Core(Config(), db, Clock(wall_start_ms=WALL0 + 1_000))
        budget = again.budgets[("default", "openai")]
        assert (budget.paused_until, budget.pause_reason) == (until, "maintenance")
        assert budget.next_release_at(WALL0 + 1_000) == until
    finally:
        db.conn.close()


async def test_a_pause_written_by_another_daemon_holds_here(tmp_path, autojump_clock):
    """Cluster mode (daemon.admission.cluster): the pause is in the budget's row,
    read back with it after another daemon's write; so is a resume there."""
    from tests.unit.test_cluster_sync import another_daemon, attach

    async with running_core(tmp_path) as core:
        attach(core)
        await bound_jobs(core, 2)
        until = core.clock.now_ms() + 20_000
        another_daemon(core, f"UPDATE budgets SET paused_until = {until}, "
                             "pause_reason = 'elsewhere' WHERE key = 'openai'")  # fmt: skip
        answer = await call(core, "claim_next", queues=["q"])
        assert answer["deferred"][0]["reason"] == "budget_paused"
        assert answer["deferred"][0]["pause_reason"] == "elsewhere"
        assert answer["deferred"][0]["next_eligible_at"] == until
        another_daemon(core, "UPDATE budgets SET paused_until = NULL, pause_reason = NULL")
        start = trio.current_time()
        assert len(await claim_jobs(core, max=2, wait_ms=60_000)) == 2
        assert trio.current_time() - start == 0  # the resume there released them here, at once
