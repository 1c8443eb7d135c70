"""One clock for the whole daemon.

Monotonic time is ``trio.current_time()``. Wall time is a wall instant captured
at start plus the monotonic time elapsed since, so ``trio.testing.MockClock``
moves both and a test runs a day in milliseconds. Never mix the two: durations,
leases and refills use :meth:`Clock.monotonic`; stored instants and calendar
math use :meth:`Clock.now_ms` (integer milliseconds since the Unix epoch).
"""

from __future__ import annotations

import math
import time

import trio


class Clock:
    """Monotonic and wall time from one source. Create it inside ``trio.run``."""

    def __init__(self, wall_start_ms: int | None = None) -> None:
        self._mono0 = trio.current_time()
        self._wall0_ms = int(time.time() * 1000) if wall_start_ms is None else wall_start_ms

    def monotonic(self) -> float:
        """Seconds on Trio's clock (virtual under ``MockClock``)."""
        return trio.current_time()

    def now_ms(self) -> int:
        """Wall time in integer milliseconds since the Unix epoch."""
        # The epsilon absorbs float error, so at deadline_for(t) this reads t,
        # never t - 1 (which would make a timer wake up early and spin).
        return self._wall0_ms + math.floor((trio.current_time() - self._mono0) * 1000 + 1e-6)

    def deadline_for(self, at_ms: int) -> float:
        """The monotonic instant at which wall time reaches ``at_ms``."""
        return self._mono0 + (at_ms - self._wall0_ms) / 1000

    async def sleep_until_ms(self, at_ms: int) -> None:
        """Sleep until wall time reaches ``at_ms`` (returns at once if past)."""
        await trio.sleep_until(self.deadline_for(at_ms))
