"""An actor that sleeps until the earliest due instant of some work, then runs it.

The delay timer (scheduled jobs becoming pending) and the lease reaper (lapsed
leases) are both this shape: ask the store for the earliest instant, sleep to
it, handle everything due, ask again. A writer that adds an earlier instant
calls :meth:`DueActor.note`, which wakes the actor to look again. Nothing polls.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from actors.clock import Clock

log = logging.getLogger("sluicegate.timers")


class DueWork(Protocol):
    """What a :class:`DueActor` needs from storage."""

    def earliest(self) -> int | None:
        """The wall instant (ms) of the earliest due item, or None."""

    async def run_due(self, now_ms: int) -> None:
        """Handle every item due at ``now_ms``."""


@attrs.frozen
class Due:
    """A :class:`DueWork` made of two calls: the earliest instant, and the work.

    The one adapter every timer uses, so a service hands its actor two of its
    own methods instead of writing a class for the purpose.
    """

    earliest: Callable[[], int | None]
    run_due: Callable[[int], Awaitable[Any]]


class DueActor:
    """Sleeps to the earliest instant of its :class:`DueWork`, then runs it."""

    def __init__(self, clock: Clock, work: DueWork) -> None:
        self._clock = clock
        self._work = work
        self._wake = trio.Event()
        self._target: int | None = None
        self._started = False
        self._failed = 0  # store failures in a row
        #: Told of every instant noted here (PostgreSQL: passed on to the other
        #: daemons, whose timers must know of leases and delays taken here).
        self.on_note: Callable[[int], None] | None = None

    @property
    def target(self) -> int | None:
        """The instant the actor sleeps to (None when idle). May be stale-early."""
        return self._target

    async def _back_off(self, exc: Exception) -> None:
        """The store failed: look again after 0.5 s, doubling to 10 s (a note
        wakes it sooner). Logged once per episode."""
        self._failed += 1
        if self._failed == 1:
            log.error("%s cannot reach the store, retrying: %r", type(self).__name__, exc)
        with trio.move_on_after(min(0.5 * 2 ** (self._failed - 1), 10.0)):
            await self._wake.wait()

    def note(self, at_ms: int) -> None:
        """Tell the actor an item is due at ``at_ms``; wakes it if that is sooner."""
        if self.on_note is not None:
            self.on_note(at_ms)
        self.heard(at_ms)

    def heard(self, at_ms: int) -> None:
        """:meth:`note`, for an instant learned from elsewhere (not passed on)."""
        if self._target is None or at_ms < self._target:
            self._target = at_ms
            self._wake.set()

    def refresh(self) -> None:
        """Look at the store again (another process may have added work)."""
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor's task: runs until cancelled."""
        task_status.started()
        while True:
            self._wake = trio.Event()
            try:
                self._target = self._work.earliest()
                now = self._clock.now_ms()
                if self._target is not None and self._target <= now:
                    await self._work.run_due(now)
                    self._failed = 0
                    await trio.lowlevel.checkpoint()
                    continue
            except Exception as exc:  # the store away (disk full, database down): again later
                await self._back_off(exc)
                continue
            if self._target is None:
                await self._wake.wait()
                continue
            with trio.move_on_at(self._clock.deadline_for(self._target)):
                await self._wake.wait()
