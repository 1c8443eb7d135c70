"""Bounded in-memory history for the board's pictures.

The core records it where claims commit and the board draws it
(:mod:`daemon.board.charts`); it lives here, among the pure models, so the
core never imports the board.

Two series, both kept only in memory (a restart starts them afresh):

- claims per minute per queue, counted where claims commit
  (:meth:`History.claimed`, one call per queue per claim statement);
- each budget's token level over time, sampled at most every
  :data:`SAMPLE_MS` by :meth:`History.sample`, which the board calls after
  commits (a level moves only when a write commits or a drip refills, and a
  drip is a straight line between samples).

Memory is bounded: :data:`MINUTES` buckets per queue, :data:`SAMPLES` points per
budget, and at most :data:`MAX_SERIES` series of each kind (the least recently
touched is dropped first).

Besides, :class:`Durations` keeps the run times of each queue's latest
completions, for ``what_if``'s flow (:mod:`actors.flow`).
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.budgets import Budget

#: Six hours of one-minute buckets per queue.
MINUTES = 360
MINUTE_MS = 60_000
#: A budget's level is sampled at most this often ...
SAMPLE_MS = 30_000
#: ... and this many samples are kept (six hours at the finest).
SAMPLES = 720
#: Queues (and budgets) with a series, at most.
MAX_SERIES = 2000
#: Run times kept per queue: the latest completions.
RUNS = 1000
#: Claim instants remembered at most (beyond, a claim is simply not timed).
MAX_RUNNING = 100_000
Key = tuple[str, str]


class History:
    """Claims per minute per queue and budget levels, bounded."""

    def __init__(self) -> None:
        self._claims: OrderedDict[Key, deque[list[int]]] = OrderedDict()
        self._levels: OrderedDict[Key, deque[tuple[int, float]]] = OrderedDict()
        self._next_sample = 0
        #: Run times of recent completions per queue (what_if's median).
        self.durations = Durations()

    def claimed(self, key: Key, n: int, now_ms: int) -> None:
        """``n`` claims of queue ``key`` committed at ``now_ms``."""
        minute = now_ms // MINUTE_MS
        series = self._claims.get(key)
        if series is None:
            series = self._claims[key] = deque(maxlen=MINUTES)
            _bound(self._claims)
        else:
            self._claims.move_to_end(key)
        if series and series[-1][0] == minute:
            series[-1][1] += n
        else:
            series.append([minute, n])

    def claims_per_minute(self, key: Key, now_ms: int, minutes: int = MINUTES) -> list[int]:
        """The last ``minutes`` minutes of claims of ``key``, oldest first, the
        current (partial) minute last; minutes without claims are 0."""
        last = now_ms // MINUTE_MS
        first = last - minutes + 1
        out = [0] * minutes
        for minute, n in self._claims.get(key, ()):
            if first <= minute <= last:
                out[minute - first] = n
        return out

    def sample(self, budgets: Iterable[tuple[Key, Budget]], now_ms: int) -> None:
        """Record each budget's available tokens, unless sampled within
        :data:`SAMPLE_MS` (cheap to call after every commit)."""
        if now_ms < self._next_sample:
            return
        self._next_sample = now_ms + SAMPLE_MS
        for key, budget in budgets:
            self.record_level(key, budget.pool.available(now_ms), now_ms)

    def record_level(self, key: Key, level: float, now_ms: int) -> None:
        """One sample of budget ``key``'s level."""
        series = self._levels.get(key)
        if series is None:
            series = self._levels[key] = deque(maxlen=SAMPLES)
            _bound(self._levels)
        else:
            self._levels.move_to_end(key)
        series.append((now_ms, level))

    def levels(self, key: Key, since_ms: int) -> list[tuple[int, float]]:
        """Samples of budget ``key`` at or after ``since_ms``, oldest first."""
        return [(at, level) for at, level in self._levels.get(key, ()) if at >= since_ms]


def _bound(series: OrderedDict[Key, object]) -> None:
    while len(series) > MAX_SERIES:
        series.popitem(last=False)


class Durations:
    """Run times of the latest completed jobs of each queue, bounded.

    The transition step notes each claim (:meth:`claimed`) and each job
    leaving ``running`` (:meth:`left`); a completion's run time is the time
    between, so only jobs claimed since this daemon started count (a restart
    starts afresh).
    """

    def __init__(self) -> None:
        self._started: dict[str, int] = {}
        self._series: OrderedDict[Key, deque[int]] = OrderedDict()

    def claimed(self, job_ids: Sequence[str], now_ms: int) -> None:
        """Jobs ``job_ids`` started running at ``now_ms`` (one call per claim, not per job)."""
        started = self._started
        room = MAX_RUNNING - len(started)
        if room < len(job_ids):
            job_ids = job_ids[: max(room, 0)]
        started.update(dict.fromkeys(job_ids, now_ms))  # one C loop for the claim

    def left(self, jobs: Iterable[tuple[str, Key]], now_ms: int, completed: bool) -> None:
        """Jobs ``(job_id, queue key)`` left running; completions are timed."""
        pop, series_of = self._started.pop, self._series
        if not completed:
            for job_id, _key in jobs:
                pop(job_id, None)
            return
        # The jobs of one call are mostly of one queue: its series is looked up
        # (and marked recent) once per run of equal keys, not once per job.
        last: Key | None = None
        append: Any = None
        for job_id, key in jobs:
            started = pop(job_id, None)
            if started is None:
                continue
            if key != last:
                series = series_of.get(key)
                if series is None:
                    series = series_of[key] = deque(maxlen=RUNS)
                    _bound(series_of)
                else:
                    series_of.move_to_end(key)
                last, append = key, series.append
            ran = now_ms - started
            append(ran if ran > 0 else 0)

    def median(self, key: Key) -> tuple[int, int] | None:
        """The median run time of queue ``key`` in ms and how many it is taken
        from (None: no completion observed)."""
        series = self._series.get(key)
        if not series:
            return None
        return int(statistics.median_low(series)), len(series)
