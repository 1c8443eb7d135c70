"""Observed run times: how long each queue's recent jobs ran, bounded, in memory.

``what_if``'s flow (:mod:`actors.flow`) assumes jobs complete after their
queue's median run time. The transition step notes each claim
(:meth:`Durations.claimed`) and each completion (:meth:`Durations.completed`);
the run time is the time between, so only jobs claimed since this daemon
started count (a restart starts afresh, as :mod:`actors.history` does).
Memory is bounded: :data:`KEEP` run times per queue, :data:`MAX_SERIES`
queues, :data:`MAX_RUNNING` claims remembered.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque

#: Run times kept per queue: the latest completions.
KEEP = 1000
#: Queues with a series, at most (the least recently touched dropped first).
MAX_SERIES = 2000
#: Claim instants remembered at most (beyond, a claim is simply not timed).
MAX_RUNNING = 100_000
Key = tuple[str, str]


class Durations:
    """Run times of the latest completed jobs of each queue."""

    def __init__(self) -> None:
        self._started: dict[str, int] = {}
        self._series: OrderedDict[Key, deque[int]] = OrderedDict()

    def claimed(self, job_id: str, now_ms: int) -> None:
        """Job ``job_id`` started running at ``now_ms``."""
        if len(self._started) < MAX_RUNNING:
            self._started[job_id] = now_ms

    def left(self, key: Key, job_id: str, now_ms: int, completed: bool) -> None:
        """Job ``job_id`` of queue ``key`` left running; a completion is timed."""
        started = self._started.pop(job_id, None)
        if started is None or not completed:
            return
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = deque(maxlen=KEEP)
            while len(self._series) > MAX_SERIES:
                self._series.popitem(last=False)
        else:
            self._series.move_to_end(key)
        series.append(max(0, now_ms - started))

    def median(self, key: Key) -> tuple[int, int] | None:
        """The median run time of queue ``key`` in ms and how many it is taken
        from (None: no completion observed)."""
        series = self._series.get(key)
        if not series:
            return None
        return int(statistics.median_low(series)), len(series)
