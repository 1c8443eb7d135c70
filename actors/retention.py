"""The retention leader: one daemon among all those sharing the database sweeps.

State model (river's ``JobCleaner``, Oban's pruner):

- **follower**: each tick it tries to take the leader lease (a row in the
  store); it fails while another daemon holds an unexpired lease, and it never
  tries where ``maintenance = false``.
- **leader**: it took or renewed the lease at this tick; the lease lasts three
  intervals and is renewed in every write of the sweep, so a leader that stops
  (crash, stop, ``maintenance`` turned off) hands over within three ticks and a
  leader that lost its lease stops at its next batch.

Each tick runs the sweep (:meth:`RetentionWork.tick`): TTL sweeps, then row
ceilings, in bounded batches, each its own group-commit write. Between ticks
the actor sleeps; ticks keep their pace from the first one (a tick that
overruns its interval starts the next one at once, never two at once).
"""

from __future__ import annotations

from typing import Protocol

import attrs
import trio


class RetentionWork(Protocol):
    """What the leader needs from the daemon."""

    def interval_s(self) -> float:
        """Seconds between ticks (read at every tick: a reload applies at the next)."""

    async def tick(self) -> bool:
        """Take or renew the lease and, if held, sweep; True if this daemon leads."""


@attrs.frozen
class RetentionStatistics:
    """A snapshot of the leader actor."""

    ticks: int
    leading: bool
    #: Ticks at which this daemon led.
    led: int


class RetentionLeader:
    """Sleeps to its next tick, then runs :meth:`RetentionWork.tick`."""

    def __init__(self, work: RetentionWork) -> None:
        self._work = work
        self.ticks = 0
        self.led = 0
        self.leading = False

    def statistics(self) -> RetentionStatistics:
        return RetentionStatistics(self.ticks, self.leading, self.led)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor's task: a tick at once, then one per interval, until cancelled."""
        task_status.started()
        next_at = trio.current_time()
        while True:
            self.leading = await self._work.tick()
            self.ticks += 1
            self.led += self.leading
            next_at = max(next_at + self._work.interval_s(), trio.current_time())
            await trio.sleep_until(next_at)
