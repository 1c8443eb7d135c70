"""Budget token pools: seed 003's timelines on MockClock, and the limit math's properties."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.budget import BudgetSpec, Strategy, TokenPool

from .harness import WALL0


def _wall(t0: float) -> int:
    """Wall ms on the virtual clock (the daemon's Clock does the same)."""
    return WALL0 + round((trio.current_time() - t0) * 1000)


async def _dispatch(pool: TokenPool, costs: list[int], run_s: float, t0: float) -> list[float]:
    """Dispatch ``costs`` in order, each as soon as the pool allows, each job
    running ``run_s`` seconds; return the dispatch instants (s since t0)."""
    started: list[float] = []
    freed = trio.Event()

    async def run(cost: int) -> None:
        nonlocal freed
        await trio.sleep(run_s)
        pool.credit(cost)
        freed.set()

    async with trio.open_nursery() as nursery:
        for cost in costs:
            while not pool.debit(cost, _wall(t0)):
                at = pool.eligible_at(cost, _wall(t0))
                if at is None:  # while_in_flight: wait for a job to finish
                    freed = trio.Event()
                    await freed.wait()
                else:
                    await trio.sleep_until(t0 + (at - WALL0) / 1000)
            started.append(trio.current_time() - t0)
            nursery.start_soon(run, cost)
    return started


def _pool(allocation: int, kind: str = "while_in_flight", **strategy: int) -> TokenPool:
    return TokenPool(BudgetSpec(allocation, Strategy(kind, **strategy)), WALL0)


async def test_while_in_flight_5_runs_2_second_jobs_five_at_a_time(autojump_clock):
    with trio.fail_after(60):
        t0 = trio.current_time()
        started = await _dispatch(_pool(5), [1] * 12, run_s=2, t0=t0)
        assert started == [0] * 5 + [2] * 5 + [4] * 2


async def test_time_based_6_per_minute_with_burst_1_one_every_10_s(autojump_clock):
    with trio.fail_after(600):
        t0 = trio.current_time()
        pool = _pool(6, "time_based", duration_ms=60_000, burst=1)
        started = await _dispatch(pool, [1] * 5, run_s=2, t0=t0)
        assert started == [0, 10, 20, 30, 40]


async def test_time_based_6_per_minute_default_burst_six_then_one_every_10_s(autojump_clock):
    with trio.fail_after(600):
        t0 = trio.current_time()
        pool = _pool(6, "time_based", duration_ms=60_000)
        started = await _dispatch(pool, [1] * 10, run_s=2, t0=t0)
        assert started == [0] * 6 + [10, 20, 30, 40]


async def test_burst_above_allocation_spikes_only_after_an_equivalent_idle_time(autojump_clock):
    with trio.fail_after(600):
        t0 = trio.current_time()
        pool = _pool(6, "time_based", duration_ms=60_000, burst=12)
        assert await _dispatch(pool, [1] * 12, run_s=0, t0=t0) == [0] * 12  # new: full
        await trio.sleep(
            60
        )  # idle for one duration: 6 tokens back, not 12 (virtual time: autojump_clock)
        started = await _dispatch(pool, [1] * 8, run_s=0, t0=t0)
        assert started == [60] * 6 + [70, 80]
        await trio.sleep(
            200
        )  # idle for two durations or more: the whole burst (virtual time: autojump_clock)
        started = await _dispatch(pool, [1] * 12, run_s=0, t0=t0)
        assert started == [280] * 12


@pytest.mark.parametrize(
    "costs",
    [[1] * 20, [2] * 10, [2] * 5 + [1] * 10, [5] * 3 + [2] * 2, [1, 7, 3, 20, 2, 5, 1] * 3],
)
async def test_mixed_costs_never_exceed_the_allocation(costs, autojump_clock):
    with trio.fail_after(600):
        pool = _pool(20)
        peak = 0
        real_debit = pool.debit

        def debit(cost: int, now_ms: int) -> bool:
            nonlocal peak
            ok = real_debit(cost, now_ms)
            peak = max(peak, pool.in_flight)
            return ok

        pool.debit = debit  # type: ignore[method-assign]
        started = await _dispatch(pool, costs, run_s=2, t0=trio.current_time())
        assert peak <= 20
        if sum(costs) <= 20:  # the seed's combinations all run at once
            assert started == [0] * len(costs)


def test_a_cost_above_the_cap_is_never_eligible():
    pool = _pool(10, "time_based", duration_ms=1000, burst=3)
    assert not pool.can_debit(4, WALL0 + 10**9)
    assert pool.eligible_at(4, WALL0) is None
    assert pool.eligible_at(11, WALL0) is None
    assert _pool(5).eligible_at(6, WALL0) is None


def test_eligible_at_is_the_exact_millisecond():
    pool = _pool(6, "time_based", duration_ms=60_000, burst=1)
    assert pool.debit(1, WALL0)
    at = pool.eligible_at(1, WALL0)
    assert at == WALL0 + 10_000
    assert not pool.can_debit(1, at - 1)
    assert pool.can_debit(1, at)


def test_next_token_at_is_when_the_drip_completes_a_whole_token():
    pool = _pool(6, "time_based", duration_ms=60_000, burst=3)
    assert pool.next_token_at(WALL0) is None  # full
    assert pool.debit(3, WALL0)
    assert pool.next_token_at(WALL0) == WALL0 + 10_000
    assert pool.next_token_at(WALL0 + 12_000) == WALL0 + 20_000  # 1.2 tokens: the 2nd
    assert pool.available(WALL0 + 20_000) == 2.0
    assert _pool(5).next_token_at(WALL0) is None  # while_in_flight has no drip


def test_state_survives_a_restart_without_refilling():
    spec = BudgetSpec(6, Strategy("time_based", duration_ms=60_000))
    pool = TokenPool(spec, WALL0)
    for _ in range(6):
        assert pool.debit(1, WALL0)
    state = pool.snapshot(WALL0 + 5_000)
    restarted = TokenPool(spec, WALL0 + 5_000, state)
    assert restarted.available(WALL0 + 5_000) == pytest.approx(0.5)
    assert not restarted.can_debit(1, WALL0 + 9_999)
    assert restarted.can_debit(1, WALL0 + 10_000)


def test_raising_the_cap_keeps_the_count_and_lowering_clamps_it():
    pool = _pool(10, "time_based", duration_ms=1000)
    assert pool.debit(7, WALL0)
    pool.update(BudgetSpec(100, Strategy("time_based", duration_ms=1000)), WALL0)
    assert pool.available(WALL0) == 3
    pool.update(BudgetSpec(100, Strategy("time_based", duration_ms=1000, burst=2)), WALL0)
    assert pool.available(WALL0) == 2
    flight = _pool(10)
    assert flight.debit(8, WALL0)
    flight.update(BudgetSpec(5, Strategy("while_in_flight")), WALL0)
    assert flight.available(WALL0) == -3  # lowered below what runs: nothing new until it drains


# -- properties ----------------------------------------------------------------

_specs = st.builds(
    lambda allocation, duration, burst: BudgetSpec(
        allocation, Strategy("time_based", duration_ms=duration, burst=burst)
    ),
    st.integers(1, 50),
    st.integers(1, 10_000),
    st.one_of(st.none(), st.integers(1, 100)),
)


@settings(max_examples=200, deadline=None)
@given(
    spec=_specs,
    attempts=st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 60)), max_size=60),
)
def test_debits_in_any_interval_never_exceed_burst_plus_drip(spec, attempts):
    pool = TokenPool(spec, 0)
    now = 0
    debits: list[tuple[int, int]] = []
    for delta, cost in attempts:
        now += delta
        if pool.debit(cost, now):
            debits.append((now, cost))
    rate = spec.allocation / spec.strategy.duration_ms
    for i, (start, _c) in enumerate(debits):
        total = 0
        for at, cost in debits[i:]:
            total += cost
            assert total <= spec.cap + rate * (at - start) + 1e-9


@settings(max_examples=200, deadline=None)
@given(
    first=_specs,
    updates=st.lists(st.tuples(st.integers(0, 5_000), _specs), max_size=10),
    spend=st.integers(0, 100),
)
def test_no_update_ever_increases_the_available_tokens(first, updates, spend):
    pool = TokenPool(first, 0)
    pool.debit(min(spend, first.max_cost()), 0)
    now = 0
    for delta, spec in updates:
        now += delta
        before = pool.available(now)
        pool.update(spec, now)
        assert pool.available(now) <= before + 1e-9


@settings(max_examples=100, deadline=None)
@given(spec=_specs, cost=st.integers(1, 200), waits=st.lists(st.integers(0, 10**7), max_size=5))
def test_a_cost_above_the_burst_is_never_admitted(spec, cost, waits):
    pool = TokenPool(spec, 0)
    now = 0
    for wait in waits:
        now += wait
        admitted = pool.debit(cost, now)
        if cost > spec.cap:
            assert not admitted
