"""One task that keeps the leases of all a worker's running jobs.

A task per job that sleeps ``lease_ms / 3`` and heartbeats cost every job a
task, a nursery and a timer that is cancelled (trio raises ``Cancelled`` into
it) when the job ends, which for short jobs is most of what the worker does
per job. Here a job is an entry in a dict: :meth:`LeaseKeeper.keep` adds it
with its next beat, :meth:`LeaseKeeper.drop` removes it, and one task sleeps
until the earliest beat, sends the beats that are due, each in its own task
(a slow answer delays no other job's beat), and sleeps again. A job whose
beat is earlier than the sleep's end moves that end (a cancel scope's
deadline, set from outside: no wake-up, no task step); a job that ends first
leaves it, and the task wakes once for nothing, at most once per beat
interval however many jobs came and went. A beat that
finds the lease lost marks the job's outcome and cancels its handler's scope:
another worker owns the job now.
"""

from __future__ import annotations

import logging
import math
from typing import Protocol

import trio

from daemon.sdk.errors import LeaseLost, SluicegateError
from daemon.sdk.job import TrioJob

log = logging.getLogger("sluicegate.worker")

#: The shortest interval between two beats of one job.
MIN_BEAT_S = 0.05


class Lost(Protocol):
    """What the keeper marks when a job's lease is lost (the worker's outcome)."""

    lost: bool


class LeaseKeeper:
    """Heartbeats every kept job each third of its lease, from one task."""

    def __init__(self) -> None:
        #: job -> (next beat on Trio's clock, the handler's scope, its outcome)
        self._kept: dict[TrioJob, tuple[float, trio.CancelScope, Lost]] = {}
        self._sleep = trio.CancelScope()  # the task's sleep until the earliest beat

    def keep(self, job: TrioJob, scope: trio.CancelScope, outcome: Lost) -> None:
        """Keep ``job``'s lease while its handler runs in ``scope``."""
        beat = trio.current_time() + self.interval(job)
        self._kept[job] = (beat, scope, outcome)
        if beat < self._sleep.deadline:
            self._sleep.deadline = beat

    def drop(self, job: TrioJob) -> None:
        """``job``'s handler ended: no more beats (one in flight is ignored)."""
        self._kept.pop(job, None)

    @staticmethod
    def interval(job: TrioJob) -> float:
        """Seconds between two beats of ``job``: a third of its lease."""
        return max(MIN_BEAT_S, job.lease_ms / 3000)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send beats as they fall due, until cancelled."""
        async with trio.open_nursery() as beats:
            task_status.started()
            while True:
                earliest = min((beat for beat, _, _ in self._kept.values()), default=math.inf)
                with trio.CancelScope(deadline=earliest) as self._sleep:
                    await trio.sleep_forever()  # until the earliest beat (keep() may move it)
                now = trio.current_time()
                for job, (beat, scope, outcome) in list(self._kept.items()):
                    if beat <= now:
                        self._kept[job] = (now + self.interval(job), scope, outcome)
                        beats.start_soon(self._beat, job, scope, outcome)

    async def _beat(self, job: TrioJob, scope: trio.CancelScope, outcome: Lost) -> None:
        try:
            await job.heartbeat()
        except LeaseLost:
            if job in self._kept:  # still running: its handler must stop
                log.warning("job %s: lease lost; cancelling its handler", job.id)
                outcome.lost = True
                scope.cancel()
                self.drop(job)
        except SluicegateError as exc:
            if job in self._kept:
                log.warning("job %s: heartbeat failed: %s", job.id, exc)
