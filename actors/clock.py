"""One clock for the whole daemon.

Monotonic time is ``trio.current_time()``. Wall time is a wall instant captured
at start plus the monotonic time elapsed since, so ``trio.testing.MockClock``
moves both and a test runs a day in milliseconds. Never mix the two: durations,
leases and refills use :meth:`Clock.monotonic`; stored instants and calendar
math use :meth:`Clock.now_ms` (integer milliseconds since the Unix epoch).

The host's wall clock is a separate source (``wall_source``, the OS clock unless
a test injects one), read once, at start. A step of it while the daemon runs
(NTP, an operator's ``date -s``) is not adopted: windows, drips and leases keep
the time they were timed on, and no elapsed time goes negative. It is adopted at
the next start; :meth:`Clock.wall_step_ms` tells how far the source has moved
from the daemon's wall time meanwhile. tests/unit/test_clock_steps.py holds
the decision and what a step, live or across a restart, does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import trio


def monotonic_reader() -> Callable[[], float]:
    """The running Trio clock's own reader: the seconds of ``trio.current_time()``
    in one call instead of three, for what reads the time on every request.
    Call it inside ``trio.run``; the reader is good for that run only."""
    return trio.lowlevel.current_clock().current_time


def os_wall_ms() -> int:
    """The host's wall clock in integer milliseconds since the Unix epoch."""
    return int(time.time() * 1000)


class Clock:
    """Monotonic and wall time from one source. Create it inside ``trio.run``.

    ``wall_start_ms`` fixes the wall instant at start; otherwise ``wall_source``
    (the OS clock by default) is read once for it.
    """

    def __init__(
        self, wall_start_ms: int | None = None, wall_source: Callable[[], int] = os_wall_ms
    ) -> None:
        self._wall_source = wall_source
        self._read = monotonic_reader()
        self._mono0 = self._read()
        self._wall0_ms = wall_source() if wall_start_ms is None else wall_start_ms

    def monotonic(self) -> float:
        """Seconds on Trio's clock (virtual under ``MockClock``)."""
        return self._read()

    def now_ms(self) -> int:
        """Wall time in integer milliseconds since the Unix epoch."""
        # The epsilon absorbs float error, so at deadline_for(t) this reads t,
        # never t - 1 (which would make a timer wake up early and spin).
        return self._wall0_ms + math.floor((self._read() - self._mono0) * 1000 + 1e-6)

    def wall_step_ms(self) -> int:
        """How far the wall source has moved from :meth:`now_ms` since start: a step
        of the host's clock (or its drift), not adopted until the next start."""
        return self._wall_source() - self.now_ms()

    def deadline_for(self, at_ms: int) -> float:
        """The monotonic instant at which wall time reaches ``at_ms``."""
        return self._mono0 + (at_ms - self._wall0_ms) / 1000

    async def sleep_until_ms(self, at_ms: int) -> None:
        """Sleep until wall time reaches ``at_ms`` (returns at once if past)."""
        await trio.sleep_until(self.deadline_for(at_ms))
