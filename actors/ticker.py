"""A ticker actor: runs a piece of work at once, then at each instant it asks for.

The usage roll-up uses it (a tick every ``daemon.rollup_interval`` and at the
turn of each UTC month). Between ticks it sleeps; nothing polls.
"""

from __future__ import annotations

from typing import Protocol

import trio

from actors.clock import Clock


class TickWork(Protocol):
    """What the ticker runs."""

    async def tick(self) -> None:
        """One tick's work (it handles its own errors)."""

    def next_tick_ms(self, started_ms: int) -> int:
        """Wall ms of the next tick, given when this one started."""


class Ticker:
    """Sleeps to the next instant its work names, then runs the work."""

    def __init__(self, clock: Clock, work: TickWork) -> None:
        self._clock = clock
        self._work = work
        self.ticks = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor's task: a tick at once (so a restart re-evaluates), then on time."""
        task_status.started()
        while True:
            started = self._clock.now_ms()
            await self._work.tick()
            self.ticks += 1
            await self._clock.sleep_until_ms(self._work.next_tick_ms(started))
