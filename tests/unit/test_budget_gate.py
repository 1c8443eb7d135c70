"""The budget gate in a real Core on MockClock: the claim gate, parking, release.

Seed 003's scenarios run through the verbs (enqueue, claim_next, complete) on
virtual time, so a minute of drip takes milliseconds and every instant is exact.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.errors import Refused
from daemon.core import Core
from daemon.store.opening import open_database
from tests.unit.harness import WALL0, call, claim_jobs, running_core

WIF5 = {"allocation": 5, "strategy": {"type": "while_in_flight"}}


def six_per_minute(burst: int | None = None) -> dict[str, Any]:
    strategy: dict[str, Any] = {"type": "time_based", "duration_ms": 60_000}
    if burst is not None:
        strategy["burst"] = burst
    return {"allocation": 6, "strategy": strategy}


async def budget(core: Core, key: str, spec: dict[str, Any]) -> None:
    await call(core, "budget_create", key=key, **spec)


async def enqueue(core: Core, n: int, budgets: list[dict[str, Any]] | None,
                  queue: str = "q") -> list[str]:  # fmt: skip
    jobs = [{"queue": queue, "type": "t", "budgets": budgets} for _ in range(n)]
    if budgets is None:
        jobs = [{"queue": queue, "type": "t"} for _ in range(n)]
    out = await call(core, "enqueue_many", jobs=jobs)
    return [r["job"]["id"] for r in out["results"]]


async def claim(core: Core, n: int = 100, queue: str = "q", **kw: Any) -> list[dict[str, Any]]:
    return await claim_jobs(core, [queue], max=n, **kw)


async def complete(core: Core, job: dict[str, Any]) -> None:
    await call(core, "complete", job_id=job["id"], lease=job["lease"])


def state(core: Core, key: str) -> dict[str, Any]:
    return core.budgets[("default", key)].to_wire(core.clock.now_ms())["state"]


async def test_while_in_flight_five_runs_five_at_a_time(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "b", WIF5)
        ids = await enqueue(core, 12, [{"key": "b"}])
        first = await claim(core)
        assert [j["id"] for j in first] == ids[:5]
        assert state(core, "b") == {
            "available": 0.0,
            "in_flight": 5,
            "parked": 7,
            "next_refill_at": None,
            "paused_until": None,
            "pause_reason": None,
        }
        # The rest wait, pending, and say why.
        waiting = (await call(core, "get", job_id=ids[5]))["job"]
        assert waiting["status"] == "pending"
        assert waiting["admission"] == {
            "state": "deferred", "reason": "budget_exhausted", "budget": "b",
            "next_eligible_at": first[0]["lease_expires_at"], "exact": False,
        }  # fmt: skip
        empty = await call(core, "claim_next", queues=["q"], max=10)
        assert empty["jobs"] == [] and empty["empty"] is True
        assert empty["deferred"] == [{
            "queue": "q", "reason": "budget_exhausted", "pending": 7,
            "next_eligible_at": first[0]["lease_expires_at"], "exact": False, "budget": "b",
        }]  # fmt: skip
        # Two finish: exactly two more run, the oldest parked first.
        await complete(core, first[0])
        await complete(core, first[1])
        await trio.sleep(0.01)  # virtual time: autojump_clock
        second = await claim(core)
        assert [j["id"] for j in second] == ids[5:7]
        assert state(core, "b") == {
            "available": 0.0,
            "in_flight": 5,
            "parked": 5,
            "next_refill_at": None,
            "paused_until": None,
            "pause_reason": None,
        }


async def test_two_second_jobs_under_while_in_flight_5_run_in_waves(tmp_path, autojump_clock):
    """Seed 003's first timeline: 2-second jobs, five at a time."""
    async with running_core(tmp_path) as core:
        await budget(core, "b", WIF5)
        await enqueue(core, 15, [{"key": "b"}])
        starts: list[float] = []
        running = 0
        most = 0
        all_started = trio.Event()

        async def worker() -> None:
            nonlocal running, most
            while len(starts) < 15:
                jobs = await claim(core, n=1, wait_ms=60_000)
                for job in jobs:
                    starts.append(trio.current_time())
                    if len(starts) == 15:
                        all_started.set()
                    running += 1
                    most = max(most, running)
                    await trio.sleep(2)  # virtual time: autojump_clock
                    running -= 1
                    await complete(core, job)

        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(worker)
            await all_started.wait()
            nursery.cancel_scope.cancel()
        assert most == 5
        waves = sorted(round(s - t0, 1) for s in starts)
        assert waves == [0.0] * 5 + [2.0] * 5 + [4.0] * 5


async def _dispatch_times(core: Core, n: int) -> list[float]:
    """Claim ``n`` jobs one at a time with a waiting claim; their virtual instants."""
    t0 = trio.current_time()
    times = []
    while len(times) < n:
        for job in await claim(core, n=1, wait_ms=600_000):
            times.append(round(trio.current_time() - t0, 3))
            await complete(core, job)
    return times


async def test_time_based_6_per_minute_burst_1_dispatches_one_every_10s(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "drip", six_per_minute(burst=1))
        await enqueue(core, 5, [{"key": "drip"}])
        assert await _dispatch_times(core, 5) == [0.0, 10.0, 20.0, 30.0, 40.0]


async def test_time_based_default_burst_six_at_once_then_every_10s(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "drip", six_per_minute())
        await enqueue(core, 9, [{"key": "drip"}])
        times = await _dispatch_times(core, 9)
        assert times == [0.0] * 6 + [10.0, 20.0, 30.0]


async def test_parked_job_does_not_hold_back_an_unbudgeted_job(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "one", {"allocation": 1, "strategy": {"type": "while_in_flight"}})
        budgeted = await enqueue(core, 3, [{"key": "one"}])
        free = await enqueue(core, 2, None)
        got = await claim(core, n=10)
        assert [j["id"] for j in got] == [budgeted[0], *free]
        assert state(core, "one")["parked"] == 2


async def test_job_bound_to_two_budgets_runs_only_when_both_allow(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "slots", {"allocation": 2, "strategy": {"type": "while_in_flight"}})
        await budget(core, "drip", six_per_minute(burst=1))
        ids = await enqueue(core, 3, [{"key": "slots"}, {"key": "drip"}])
        assert [j["id"] for j in await claim(core)] == ids[:1]  # drip allows one
        await trio.sleep(10.01)  # virtual time: autojump_clock
        assert [j["id"] for j in await claim(core)] == ids[1:2]  # slots: 2 of 2
        await trio.sleep(10.01)  # virtual time: autojump_clock
        assert await claim(core) == []  # drip has a token, slots none
        assert state(core, "slots")["in_flight"] == 2
        assert state(core, "drip")["available"] == 1.0  # nothing debited from it


async def test_claim_of_a_parked_job_is_deferred_and_changes_nothing(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "drip", six_per_minute(burst=1))
        ids = await enqueue(core, 2, [{"key": "drip"}])
        await claim(core, n=1)
        await claim(core, n=1)  # parks the second
        with pytest.raises(Refused) as info:
            await call(core, "claim", job_id=ids[1])
        assert info.value.code == "deferred"
        assert info.value.details == {
            "queue": "q", "reason": "budget_exhausted", "budget": "drip",
            "next_eligible_at": WALL0 + 10_000, "exact": True,
        }  # fmt: skip
        job = (await call(core, "get", job_id=ids[1]))["job"]
        assert (job["status"], job["attempts"]) == ("pending", 0)


async def test_claim_by_id_debits_and_reports_what_is_left(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "b", WIF5)
        [job_id] = await enqueue(core, 1, [{"key": "b", "cost": 2}])
        got = await call(core, "claim", job_id=job_id)
        assert got["admission"] == {"budgets": [{"key": "b", "available": 3.0}]}
        assert state(core, "b")["in_flight"] == 2


async def test_create_with_makes_the_budget_with_the_job_and_is_ignored_after(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        binding = {"key": "cpu", "create_with": WIF5}
        await enqueue(core, 1, [binding])
        assert core.budgets[("default", "cpu")].spec.allocation == 5
        other = {"key": "cpu", "create_with": {**WIF5, "allocation": 50}}
        await enqueue(core, 1, [other])
        assert core.budgets[("default", "cpu")].spec.allocation == 5


async def test_a_refused_batch_leaves_no_budget_and_no_parked_count(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "one", {"allocation": 1, "strategy": {"type": "while_in_flight"}})
        jobs = [
            {"queue": "q", "type": "t", "budgets": [{"key": "one"}]},
            {"queue": "q", "type": "t", "budgets": [{"key": "one"}]},  # parked at enqueue
            {"queue": "q", "type": "t", "budgets": [{"key": "new", "create_with": WIF5}]},
            {"queue": "q", "type": "t", "budgets": [{"key": "missing"}]},
        ]
        with pytest.raises(Refused) as info:
            await call(core, "enqueue_many", jobs=jobs)
        assert info.value.code == "invalid_argument"
        assert "missing" in info.value.message
        assert ("default", "new") not in core.budgets
        one = core.budgets[("default", "one")]
        assert (one.parked, one.bound) == (0, {})
        assert core.conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
        assert core.conn.execute("SELECT count(*) FROM budgets").fetchone()[0] == 1


@pytest.mark.parametrize(
    ("spec", "cost", "message"),
    [
        (WIF5, 6, "cost 6 is above the allocation 5 of budget 'b'"),
        (six_per_minute(burst=2), 3, "cost 3 is above the burst 2 of budget 'b'"),
    ],
)
async def test_a_cost_the_budget_can_never_pay_is_refused(
    tmp_path, autojump_clock, spec, cost, message
):
    async with running_core(tmp_path) as core:
        await budget(core, "b", spec)
        with pytest.raises(Refused) as info:
            await enqueue(core, 1, [{"key": "b", "cost": cost}])
        assert (info.value.code, info.value.message) == ("invalid_argument", message)
        assert info.value.status == 422


async def test_delete_and_lowering_are_refused_while_jobs_are_bound(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "b", WIF5)
        [job_id] = await enqueue(core, 1, [{"key": "b", "cost": 2}])
        await enqueue(core, 1, [{"key": "b", "cost": 1}])
        with pytest.raises(Refused) as info:
            await call(core, "budget_delete", key="b")
        assert info.value.message == (
            "budget 'b' is referenced by 2 unfinished jobs. "
            "Delete them or wait for them to finish before deleting it."
        )
        with pytest.raises(Refused) as info:
            await call(core, "budget_patch", key="b", allocation=1)
        assert info.value.message == (
            "budget 'b' cannot allocate 1: 2 unfinished jobs draw up to 2 from it. "
            "Raise the allocation, delete them, or wait for them to drain."
        )
        assert core.budgets[("default", "b")].spec.allocation == 5
        # Lowering to the largest bound cost is fine; once the jobs finish, anything is.
        await call(core, "budget_patch", key="b", allocation=2)
        for _ in range(2):  # cost 2, then cost 1: one at a time under 2
            [job] = await claim(core, wait_ms=1000)
            await complete(core, job)
        assert core.budgets[("default", "b")].bound == {}
        await call(core, "budget_delete", key="b")
        assert job_id


async def test_raising_the_allocation_releases_parked_jobs(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "b", {"allocation": 1, "strategy": {"type": "while_in_flight"}})
        await enqueue(core, 4, [{"key": "b"}])
        assert len(await claim(core)) == 1
        await call(core, "budget_patch", key="b", allocation=3)
        await trio.sleep(0.01)  # virtual time: autojump_clock
        assert len(await claim(core)) == 2
        assert state(core, "b") == {
            "available": 0.0,
            "in_flight": 3,
            "parked": 1,
            "next_refill_at": None,
            "paused_until": None,
            "pause_reason": None,
        }


async def test_a_waiting_claim_is_woken_by_the_refill(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "drip", six_per_minute(burst=1))
        await enqueue(core, 2, [{"key": "drip"}])
        await claim(core, n=1)
        t0 = trio.current_time()
        got = await claim(core, n=1, wait_ms=60_000)
        assert len(got) == 1
        assert trio.current_time() - t0 == pytest.approx(10.0, abs=0.002)


async def test_a_restart_neither_refills_nor_forgets(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "drip", six_per_minute(burst=3))
        await budget(core, "slots", WIF5)
        await enqueue(core, 5, [{"key": "drip"}, {"key": "slots"}])
        running = await claim(core)
        assert len(running) == 3
        before = state(core, "drip"), state(core, "slots")
    db = open_database(tmp_path / "db.sqlite")
    try:
        from actors.clock import Clock
        from daemon.config import Config

        again = Core(Config(), db, Clock(wall_start_ms=WALL0 + 1))
        now = again.clock.now_ms()
        drip = again.budgets[("default", "drip")]
        slots = again.budgets[("default", "slots")]
        assert drip.pool.available(now) < 0.01  # no free burst after the restart
        assert slots.pool.in_flight == 3 == before[1]["in_flight"]
        assert (drip.parked, slots.parked) == (2, 0)
        assert drip.bound == {1: 5} and slots.bound == {1: 5}
        assert before[0]["parked"] == 2
    finally:
        db.conn.close()


async def test_a_claim_of_many_bound_jobs_writes_each_pool_once_as_memory_holds_it(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        await budget(core, "slots", {"allocation": 100, "strategy": {"type": "while_in_flight"}})
        await enqueue(core, 40, [{"key": "slots", "cost": 2}])
        pool_writes: list[str] = []
        core.conn.set_trace_callback(
            lambda sql: pool_writes.append(sql) if sql.startswith("UPDATE budgets") else None
        )
        try:
            assert len(await claim(core, 30)) == 30
        finally:
            core.conn.set_trace_callback(None)
        assert len(pool_writes) == 1  # 30 debits, one statement before the COMMIT
        stored = core.conn.execute("SELECT in_flight FROM budgets WHERE key = 'slots'").fetchone()
        assert stored == (60,) == (core.budgets[("default", "slots")].pool.in_flight,)


async def test_a_lapsed_lease_gives_its_tokens_back(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "one", {"allocation": 1, "strategy": {"type": "while_in_flight"}})
        ids = await enqueue(core, 2, [{"key": "one"}])
        [first] = await claim(core, lease_ms=1000)
        assert first["id"] == ids[0]
        # The worker vanishes: the reaper returns its job and its token; the
        # retried job (older ready_at) goes first, the other stays parked.
        t0 = trio.current_time()
        got = await claim(core, wait_ms=5000)
        assert [(j["id"], j["attempts"]) for j in got] == [(ids[0], 2)]
        assert trio.current_time() - t0 == pytest.approx(1.0, abs=0.01)
        assert state(core, "one")["in_flight"] == 1
        assert state(core, "one")["parked"] == 1
        assert core.budgets[("default", "one")].reserved == {}


async def test_folding_a_parked_job_unparks_it(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "one", {"allocation": 1, "strategy": {"type": "while_in_flight"}})
        await enqueue(core, 1, [{"key": "one"}])
        await claim(core)
        job = {"queue": "q", "type": "t", "unique_key": "u", "budgets": [{"key": "one"}]}
        parked = (await call(core, "enqueue", **job))["job"]
        assert parked["admission"]["state"] == "deferred"
        assert state(core, "one")["parked"] == 1
        folded = await call(core, "enqueue", **job, debounce_ms=1000)
        assert folded["folded"] is True and folded["job"]["status"] == "scheduled"
        assert state(core, "one")["parked"] == 0
        assert core.budget_gate.parked_in(("default", "q")) == 0
        await trio.sleep(1.01)  # virtual time: autojump_clock
        assert await claim(core) == []  # due again, and parked again: the slot is taken
        assert state(core, "one")["parked"] == 1


async def test_replaying_a_dead_job_its_budget_cannot_pay_is_refused(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "b", WIF5)
        [job_id] = await enqueue(core, 1, [{"key": "b", "cost": 3}])
        [job] = await claim(core)
        await call(core, "fail", job_id=job_id, lease=job["lease"], error="x", dead=True)
        await call(core, "budget_patch", key="b", allocation=2)  # no unfinished job binds it
        with pytest.raises(Refused) as info:
            await call(core, "dead_replay", job_ids=[job_id])
        assert info.value.code == "conflict"
        assert info.value.message == (
            f"job {job_id!r} costs 3 on budget 'b', which can pay at most 2"
        )
        assert (await call(core, "get", job_id=job_id))["job"]["status"] == "dead"


async def test_debits_are_counted_in_metrics(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await budget(core, "b", WIF5)
        await enqueue(core, 2, [{"key": "b", "cost": 2}])
        await claim(core)
        sample = core.metrics.registry.get_sample_value
        assert sample("sluicegate_budget_debits_total", {"budget": "b"}) == 4
        assert sample("sluicegate_budget_in_flight", {"budget": "b"}) == 4
        assert sample("sluicegate_budget_parked_jobs", {"budget": "b"}) == 0


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    allocation=st.integers(1, 6),
    duration_ms=st.sampled_from([1_000, 10_000]),
    burst=st.one_of(st.none(), st.integers(1, 9)),
    slots=st.integers(1, 4),
    steps=st.lists(
        st.tuples(st.integers(0, 3_000), st.integers(1, 3), st.integers(1, 6), st.booleans()),
        min_size=1, max_size=25,
    ),
)  # fmt: skip
def test_the_daemon_never_over_spends_a_budget(
    tmp_path_factory, allocation, duration_ms, burst, slots, steps
):
    """Any arrivals, costs and claim times through the real core: debits over any
    interval stay within burst + drip, and in-flight cost within the slots."""
    cap = burst or allocation
    debits: list[tuple[int, int]] = []

    async def main() -> None:
        strategy: dict[str, Any] = {"type": "time_based", "duration_ms": duration_ms}
        if burst is not None:
            strategy["burst"] = burst
        async with running_core(tmp_path_factory.mktemp("p")) as core:
            await budget(core, "drip", {"allocation": allocation, "strategy": strategy})
            await budget(
                core, "slots", {"allocation": slots, "strategy": {"type": "while_in_flight"}}
            )
            running: list[dict[str, Any]] = []
            for wait, n, cost, finish in steps:
                await trio.sleep(wait / 1000)  # virtual time: MockClock
                c = min(cost, cap, allocation)
                binding = [{"key": "drip", "cost": c}, {"key": "slots", "cost": min(c, slots)}]
                await enqueue(core, n, binding)
                if finish and running:
                    await complete(core, running.pop(0))
                for job in await claim(core, n=5):
                    debits.append((core.clock.now_ms(), job["budgets"][0]["cost"]))
                    running.append(job)
                held = sum(j["budgets"][1]["cost"] for j in running)
                assert core.budgets[("default", "slots")].pool.in_flight == held <= slots

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    for i, (start, _c) in enumerate(debits):
        spent = 0
        for at, cost in debits[i:]:
            spent += cost
            # Tokens are exact units of 1/duration_ms: compare without rounding.
            assert spent * duration_ms <= cap * duration_ms + allocation * (at - start)


async def test_subscribers_hear_a_refill_once_and_not_while_still_deferred(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        await budget(core, "drip", six_per_minute(burst=1))
        await enqueue(core, 1, [{"key": "drip"}])
        await claim(core)
        events: list[dict[str, Any]] = []
        core.router.subscribe(object(), [("default", "q")], events.append)
        await enqueue(core, 3, [{"key": "drip"}])  # parked at enqueue: nothing claimable
        assert events == []
        await trio.sleep(10.01)  # virtual time: autojump_clock
        assert events == [{"event": "doorbell", "queue": "q", "pending": 1}]
