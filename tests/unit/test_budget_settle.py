"""Settling a completion's cost (``complete``'s ``cost``) in a real Core on MockClock.

A ``time_based`` debit is settled to the job's actual cost when it completes:
a smaller actual refunds the difference (never above the burst), a larger one
takes the extra and may leave the pool in debt, which delays later work exactly
until the drip repays it. The issue's timelines, the interval property, the
pool against its replayed ledger, and every refusal.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.clock import Clock
from actors.errors import Refused
from daemon.config import Config
from daemon.core import Core
from daemon.store.opening import open_database
from daemon.verbs.args import structure
from daemon.verbs.fast_checks import FAST
from daemon.verbs.working import CompleteArgs
from tests.unit.harness import WALL0, call, claim_jobs, running_core

#: 10 tokens per 100 s: R = 0.1 token/s; the pool holds 10 at most.
TEN_PER_100S = {"allocation": 10, "strategy": {"type": "time_based", "duration_ms": 100_000}}
R = Fraction(10, 100)  # tokens per second


async def setup(core: Core, key: str = "api", spec: dict[str, Any] = TEN_PER_100S) -> None:
    await call(core, "budget_create", key=key, **spec)


async def enqueue(core: Core, cost: int, key: str = "api", **kw: Any) -> dict[str, Any]:
    budgets = [{"key": key, "cost": cost}]
    return (await call(core, "enqueue", queue="q", type="t", budgets=budgets, **kw))["job"]


async def claim_one(core: Core, **kw: Any) -> dict[str, Any]:
    (job,) = await claim_jobs(core, max=1, **kw)
    return job


def available(core: Core, key: str = "api") -> float:
    return core.budgets[("default", key)].pool.available(core.clock.now_ms())


async def test_reserve_10_settle_4_gives_the_6_back_at_once(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await setup(core)
        await enqueue(core, 10)
        job = await claim_one(core)
        assert available(core) == 0.0
        done = await call(core, "complete", job_id=job["id"], lease=job["lease"], cost={"api": 4})
        assert done["job"]["costs"] == [{"key": "api", "reserved": 10, "settled": 4}]
        assert done["job"]["budgets"] == [{"key": "api", "cost": 10}]  # the binding as enqueued
        assert available(core) == 6.0  # at the same instant: no drip in between
        start = trio.current_time()
        await enqueue(core, 6)
        assert (await claim_one(core))["budgets"] == [{"key": "api", "cost": 6}]
        assert trio.current_time() == start
        got = (await call(core, "get", job_id=job["id"]))["job"]
        assert got["costs"] == [{"key": "api", "reserved": 10, "settled": 4}]


async def test_a_refund_never_lifts_the_pool_above_its_burst(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await setup(core)
        await enqueue(core, 2)
        job = await claim_one(core, lease_ms=3_600_000)
        await trio.sleep(100)  # virtual time (autojump_clock): the pool is full again
        await call(core, "complete", job_id=job["id"], lease=job["lease"], cost={"api": 0})
        assert available(core) == 10.0


async def _next_claim_wait(tmp_path, settle: dict[str, Any] | None) -> float:
    """Seconds between a settle (or none) of a 10-token job and the claim of the next."""
    async with running_core(tmp_path) as core:
        await setup(core)
        await enqueue(core, 10)
        first = await claim_one(core)
        await call(core, "complete", job_id=first["id"], lease=first["lease"], cost=settle)
        second = await enqueue(core, 10)
        start, now_ms = trio.current_time(), core.clock.now_ms()
        held = (await call(core, "get", job_id=second["id"]))["job"]["admission"]
        got = await claim_one(core, wait_ms=3_600_000)
        assert got["id"] == second["id"]
        waited = trio.current_time() - start
        # The answer said when, exactly; the waker released it at that instant.
        assert held["exact"] and held["next_eligible_at"] == now_ms + round(waited * 1000)
        return waited


async def test_reserve_10_settle_25_delays_the_next_job_exactly_15_over_r(tmp_path, autojump_clock):
    plain = await _next_claim_wait(tmp_path / "a", None)
    settled = await _next_claim_wait(tmp_path / "b", {"api": 25})
    assert plain == 10 / R == 100
    assert settled - plain == 15 / R == 150


async def test_a_debt_survives_a_restart_exactly(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await setup(core)
        await enqueue(core, 10)
        job = await claim_one(core)
        await call(core, "complete", job_id=job["id"], lease=job["lease"], cost={"api": 25.5})
        assert available(core) == -15.5
        units = core.budgets[("default", "api")].pool.raw()
    db = open_database(tmp_path / "db.sqlite")
    try:
        again = Core(Config(), db, Clock(wall_start_ms=WALL0))
        pool = again.budgets[("default", "api")].pool
        assert pool.raw()[0] == units[0]  # the scaled units, to the last one
    finally:
        db.conn.close()


async def test_settled_costs_are_counted_in_metrics(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await setup(core)
        for actual in (4, 2.5):
            await enqueue(core, 1)
            job = await claim_one(core)
            await call(core, "complete", job_id=job["id"], lease=job["lease"], cost={"api": actual})
        value = core.metrics.registry.get_sample_value(
            "sluicegate_budget_settled_total", {"budget": "api"}
        )
        assert value == 6.5


async def three_claimed(core: Core) -> list[dict[str, Any]]:
    """Three jobs bound to ``api`` at cost 3 each, claimed: 1 token left of 10."""
    await setup(core)
    for _ in range(3):
        await enqueue(core, 3)
    jobs = await claim_jobs(core, max=3)
    assert available(core) == 1.0
    return jobs


async def test_complete_many_settles_each_item_and_refuses_one_alone(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        a, b, c = await three_claimed(core)
        out = await call(core, "complete_many", jobs=[
            {"job_id": a["id"], "lease": a["lease"], "cost": {"api": 1}},
            {"job_id": b["id"], "lease": b["lease"], "cost": {"nope": 1}},
            {"job_id": c["id"], "lease": c["lease"]},
        ])  # fmt: skip
        first, second, third = out["results"]
        assert first["state"] == third["state"] == "completed"
        assert second["error"]["code"] == "invalid_argument"
        assert second["error"]["field"] == "cost.nope"
        assert available(core) == 3.0  # a's 2 back; b (still running) and c unchanged
        assert (await call(core, "get", job_id=b["id"]))["job"]["status"] == "running"
        costs = (await call(core, "get", job_id=c["id"]))["job"]["costs"]
        assert costs == [{"key": "api", "reserved": 3, "settled": None}]


async def test_complete_many_going_one_at_a_time_settles_each_cost_once(tmp_path, autojump_clock):
    # A job named twice sends the whole batch one at a time (to say which is
    # lease_lost); the completion that settles a cost must still settle it once.
    async with running_core(tmp_path) as core:
        a, b, c = await three_claimed(core)
        out = await call(core, "complete_many", jobs=[
            {"job_id": b["id"], "lease": b["lease"]},
            {"job_id": a["id"], "lease": a["lease"], "cost": {"api": 1}},
            {"job_id": b["id"], "lease": b["lease"]},
            {"job_id": c["id"], "lease": "not-its-lease"},
        ])  # fmt: skip
        results = out["results"]
        assert [r.get("state") for r in results] == ["completed", "completed", None, None]
        assert [r.get("error", {}).get("code") for r in results] == [
            None, None, "lease_lost", "lease_lost",
        ]  # fmt: skip
        assert available(core) == 3.0  # a's 2 back, once
        costs = (await call(core, "get", job_id=a["id"]))["job"]["costs"]
        assert costs == [{"key": "api", "reserved": 3, "settled": 1}]
        assert (await call(core, "get", job_id=c["id"]))["job"]["status"] == "running"


@pytest.mark.parametrize(
    ("cost", "field", "words"),
    [
        ({"ghost": 1}, "cost.ghost", "cost names budget 'ghost', which does not exist"),
        ({"other": 1}, "cost.other", "is not bound to budget 'other'"),
        ({"slots": 1}, "cost.slots", "budget 'slots' is while_in_flight"),
        ({"api": -1}, "cost.api", "cost.api must be a number from 0 to 2147483647, got -1"),
        ({"api": "4"}, "cost.api", "must be a number"),
        ({"api": True}, "cost.api", "must be a number"),
        ({"api": 2**31}, "cost.api", "must be a number"),
        ({"api": math.inf}, "cost.api", "must be a number"),
        ({"bad key!": 1}, "cost", "keys must be budget keys"),
        ([1], "cost", "cost must be an object"),
        ({f"k{i}": 1 for i in range(17)}, "cost", "at most 16 budgets"),
    ],
)
async def test_a_refused_cost_writes_nothing(tmp_path, autojump_clock, cost, field, words):
    async with running_core(tmp_path) as core:
        await setup(core)
        await setup(core, "other")
        await setup(core, "slots", {"allocation": 5, "strategy": {"type": "while_in_flight"}})
        binding = [{"key": "api", "cost": 10}, {"key": "slots"}]
        await call(core, "enqueue", queue="q", type="t", budgets=binding)
        job = await claim_one(core)
        with pytest.raises(Refused) as refused:
            await call(core, "complete", job_id=job["id"], lease=job["lease"], cost=cost)
        assert refused.value.code == "invalid_argument"
        assert refused.value.details["field"] == field
        assert words in refused.value.message
        assert (await call(core, "get", job_id=job["id"]))["job"]["status"] == "running"
        assert available(core) == 0.0


def test_the_fast_check_takes_plain_completions_and_leaves_costs_to_the_converter():
    fast = FAST[CompleteArgs]
    plain = {"job_id": "j", "lease": "l", "result": {"ok": 1}}
    made = fast(plain)
    assert made == CompleteArgs("j", "l", {"ok": 1}, None)
    assert fast({**plain, "cost": {"api": 1}}) is None  # to the converter
    assert structure({**plain, "cost": {"api": 1.5}}, CompleteArgs).cost == {"api": 1.5}
    with pytest.raises(Refused) as refused:
        structure({**plain, "cost": {"api": -2}}, CompleteArgs)
    assert refused.value.details["field"] == "cost.api"


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    allocation=st.integers(1, 8),
    burst=st.one_of(st.none(), st.integers(1, 10)),
    steps=st.lists(
        st.tuples(st.integers(0, 3_000), st.integers(1, 3), st.integers(1, 8),
                  st.integers(0, 12), st.booleans()),
        min_size=1, max_size=20,
    ),  # (wait ms, jobs, cost, actual in quarters of the cost, complete one)
)  # fmt: skip
def test_settled_debits_stay_within_burst_drip_and_excess_and_match_the_ledger(
    tmp_path_factory, allocation, burst, steps
):
    """Any arrivals, costs, settles and claim times through the real core: the pool
    always equals its ledger replayed exactly, and in any interval T the tokens
    charged (claim debits, plus settled excess, less refunds) stay within
    burst + R·T + the excess settled in it."""
    duration_ms = 10_000
    cap = burst or allocation
    rate = Fraction(allocation, duration_ms)  # tokens per ms
    #: (at ms, debit, excess, refund credited) per event.
    ledger: list[tuple[int, Fraction, Fraction, Fraction]] = []

    async def main() -> None:
        strategy: dict[str, Any] = {"type": "time_based", "duration_ms": duration_ms}
        if burst is not None:
            strategy["burst"] = burst
        async with running_core(tmp_path_factory.mktemp("s")) as core:
            await setup(core, "api", {"allocation": allocation, "strategy": strategy})
            pool = core.budgets[("default", "api")].pool
            level, as_of = Fraction(cap), core.clock.now_ms()

            def drip(now: int) -> Fraction:
                return level if level >= cap else min(Fraction(cap), level + rate * (now - as_of))

            running: list[dict[str, Any]] = []
            for wait, n, cost, quarters, finish in steps:
                await trio.sleep(wait / 1000)  # virtual time (autojump_clock)
                c = min(cost, cap, allocation)
                for _ in range(n):
                    await enqueue(core, c)
                if finish and running:
                    job = running.pop(0)
                    reserved = job["budgets"][0]["cost"]
                    actual = reserved * quarters / 4  # quarters: exact in binary
                    await call(core, "complete", job_id=job["id"], lease=job["lease"],
                               cost={"api": actual})  # fmt: skip
                    now = core.clock.now_ms()
                    level, as_of = drip(now), now
                    change = reserved - Fraction(math.ceil(Fraction(actual) * duration_ms),
                                                 duration_ms)  # fmt: skip
                    after = min(Fraction(cap), level + change) if change > 0 else level + change
                    ledger.append((now, Fraction(0), max(-change, Fraction(0)),
                                   max(after - level, Fraction(0))))  # fmt: skip
                    level = after
                for job in await claim_jobs(core, max=5):
                    now = core.clock.now_ms()
                    level, as_of = drip(now), now
                    debit = job["budgets"][0]["cost"]
                    assert level >= debit  # never debited beyond what the ledger holds
                    level -= debit
                    ledger.append((now, Fraction(debit), Fraction(0), Fraction(0)))
                    running.append(job)
                now = core.clock.now_ms()
                assert Fraction(pool.snapshot(now).units, duration_ms) == drip(now)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    for i, (start, *_rest) in enumerate(ledger):
        charged = excess = Fraction(0)
        for at, debit, extra, refund in ledger[i:]:
            charged += debit + extra - refund
            excess += extra
            assert charged <= cap + rate * (at - start) + excess
