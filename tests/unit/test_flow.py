"""The 24-hour flow of a backlog (actors/flow.py): exact counts per hour from the limits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.budget import BudgetSpec, Strategy, TokenPool
from actors.claim_windows import ClaimWindow
from actors.flow import MAX_STEPS, Limits, Meter, Slots, admissible, flow, next_eligible_at
from actors.window import HOUR_MS, Window, bounds

NOW = 1_700_000_000_000  # 2023-11-14T22:13:20Z
MINUTE = 60_000


def drip(allocation: int, duration_ms: int, burst: int | None = None) -> TokenPool:
    return TokenPool(BudgetSpec(allocation, Strategy("time_based", duration_ms, burst)), NOW)


def hours(limits: Limits) -> list[int]:
    return flow(limits, NOW).admitted


def test_six_an_hour_over_twenty_jobs_full_then_empty():
    # Full: the burst of 6 at once, then one every 10 minutes (+10 .. +50 in hour one).
    assert hours(Limits(20, pool=drip(6, HOUR_MS))) == [11, 6, 3] + [0] * 21
    empty = drip(6, HOUR_MS)
    empty.debit(6, NOW)
    assert hours(Limits(20, pool=empty)) == [5, 6, 6, 3] + [0] * 20
    # A burst of 2 over 7 an hour: a token every 3600/7 s.
    assert hours(Limits(30, pool=drip(7, HOUR_MS, burst=2))) == [8, 7, 7, 7, 1] + [0] * 19


def test_a_fast_drip_is_counted_without_a_step_per_job():
    out = hours(Limits(10**9, pool=drip(1000, 1000)))  # 1000 a second, a day long
    assert out[0] == 1000 + 3_600_000 - 1 and out[1:] == [3_600_000] * 23


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    allocation=st.integers(1, 12),
    duration_min=st.integers(1, 90),
    burst=st.none() | st.integers(1, 12),
    cost=st.integers(1, 3),
    backlog=st.integers(0, 400),
    spent=st.integers(0, 12),
)
def test_the_closed_form_drip_agrees_with_one_step_per_admission(
    allocation, duration_min, burst, cost, backlog, spent
):
    pool = drip(allocation, duration_min * MINUTE, burst)
    pool.debit(min(spent, int(pool.available(NOW))), NOW)
    closed = flow(Limits(backlog, pool=pool, cost=cost), NOW)
    # A cap that never binds, with completions tracked: the run steps job by job.
    stepped = flow(
        Limits(backlog, pool=pool, cost=cost, slots=[Slots(10**9, 0)], duration_ms=10**12), NOW
    )
    assert closed.admitted == stepped.admitted
    assert sum(closed.admitted) <= backlog


def test_a_used_up_daily_window_in_its_zone_reopens_at_local_midnight():
    day = Window("day", "America/Los_Angeles", "00:00")
    start, end = bounds(day, NOW)
    limits = Limits(150, meters=[Meter(ClaimWindow(100, day), start, end, 100)])
    assert admissible(limits.copy(), NOW) == 0
    assert next_eligible_at(limits.copy(), NOW) == end  # 2023-11-15 00:00 PST
    out = hours(limits)
    first = (end - NOW) // HOUR_MS  # the hour holding local midnight
    assert out[first] == 100 and sum(out) == 100  # the next midnight is past 24 h
    assert limits.meters[0].used == 100  # the caller's limits are not touched


def test_in_flight_slots_come_back_at_the_median_run_time():
    # 2 slots, 1 held by a job running now: it is done 20 minutes from now.
    limits = Limits(20, slots=[Slots(2, 1)], held=1, duration_ms=20 * MINUTE)
    assert admissible(limits.copy(), NOW) == 1
    # +0: 1, +20: 2, +40: 2 (5 in hour one), then 2 every 20 minutes.
    assert hours(limits)[:5] == [5, 6, 6, 3, 0]
    paused = Limits(20, slots=[Slots(0, 0)])
    assert flow(paused, NOW).stalled and hours(paused) == [0] * 24
    assert next_eligible_at(paused, NOW) is None
    tick = Window("second", "UTC", "00:00")
    closed = Limits(20, meters=[Meter(ClaimWindow(0, tick), *bounds(tick, NOW), 0)])
    assert flow(closed, NOW).stalled and next_eligible_at(closed, NOW) is None
    no_runs = Limits(20, slots=[Slots(2, 2)], held=2)  # nothing observed: held all day
    assert flow(no_runs, NOW).stalled and next_eligible_at(no_runs, NOW) is None


def test_the_run_is_cut_after_its_step_limit():
    many = Limits(10**9, pool=drip(1000, 1000), slots=[Slots(10, 0)], duration_ms=3)
    run = flow(many, NOW)
    assert run.cut_at is not None and NOW < run.cut_at < NOW + HOUR_MS
    assert 0 < sum(run.admitted) <= MAX_STEPS * 10
