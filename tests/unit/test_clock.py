"""actors/clock.py: one clock, monotonic and wall, both moved by MockClock."""

from __future__ import annotations

import time

import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st

from actors.clock import Clock

WALL0 = 1_700_000_000_000


async def test_wall_time_moves_with_the_mock_clock(autojump_clock):
    with trio.fail_after(100_000):
        t0 = trio.current_time()
        clock = Clock(wall_start_ms=WALL0)
        assert clock.now_ms() == WALL0
        await trio.sleep(3.5)  # virtual time: autojump_clock
        assert trio.current_time() - t0 == 3.5
        assert clock.monotonic() == trio.current_time()
        assert clock.now_ms() == WALL0 + 3_500
        await trio.sleep(86_400)
        assert clock.now_ms() == WALL0 + 3_500 + 86_400_000


async def test_default_wall_start_is_the_host_time(autojump_clock):
    with trio.fail_after(120):
        before = int(time.time() * 1000)
        clock = Clock()
        after = int(time.time() * 1000)
        assert before <= clock.now_ms() <= after
        await trio.sleep(60)  # virtual time: autojump_clock
        assert before + 60_000 <= clock.now_ms() <= after + 60_000


async def test_deadline_for_now_is_now(autojump_clock):
    with trio.fail_after(10):
        clock = Clock(wall_start_ms=WALL0)
        await trio.sleep(2.25)  # virtual time: autojump_clock
        assert clock.deadline_for(clock.now_ms()) == trio.current_time()
        assert clock.deadline_for(WALL0) == trio.current_time() - 2.25
        assert clock.deadline_for(WALL0 + 10_000) - clock.deadline_for(WALL0) == 10.0


async def test_sleep_until_ms_sleeps_exactly_to_the_instant(autojump_clock):
    with trio.fail_after(10):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        await clock.sleep_until_ms(WALL0 + 4_000)
        assert trio.current_time() - t0 == 4.0
        assert clock.now_ms() == WALL0 + 4_000


async def test_sleep_until_a_past_instant_returns_at_once(autojump_clock):
    with trio.fail_after(10):
        clock = Clock(wall_start_ms=WALL0)
        await trio.sleep(5)  # virtual time: autojump_clock
        t1 = trio.current_time()
        await clock.sleep_until_ms(WALL0 + 1_000)
        assert trio.current_time() == t1


def _wall_at_deadline(start_offset_s: float, delta_ms: int) -> tuple[int, int]:
    """Sleep ``start_offset_s`` before creating the clock, then to ``WALL0 + delta_ms``."""

    async def main() -> tuple[int, int]:
        await trio.sleep(start_offset_s)
        clock = Clock(wall_start_ms=WALL0)
        await clock.sleep_until_ms(WALL0 + delta_ms)
        return clock.now_ms(), WALL0 + delta_ms

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@given(
    start_offset_s=st.sampled_from([0.0, 2.0, 3600.0]),
    delta_ms=st.integers(min_value=0, max_value=10_000_000).map(lambda n: n - n % 1000),
)
@settings(max_examples=30, deadline=None)
def test_round_trip_on_whole_seconds(start_offset_s, delta_ms):
    now, at = _wall_at_deadline(start_offset_s, delta_ms)
    assert now == at


@given(
    start_offset_s=st.floats(min_value=0, max_value=1e5, allow_nan=False),
    delta_ms=st.integers(min_value=0, max_value=10**9),
)
@example(start_offset_s=0.0, delta_ms=1001)
@settings(max_examples=50, deadline=None)
def test_wall_clock_reaches_the_instant_at_its_deadline(start_offset_s, delta_ms):
    now, at = _wall_at_deadline(start_offset_s, delta_ms)
    assert now >= at
