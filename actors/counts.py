"""Live job counts per (namespace, queue) and state, kept in memory.

Recovered from the store at start, then moved by every committed transition,
so ``status``, ``queue_list``, the metrics gauge and the doorbell edge test
("nothing claimable -> claimable") never count rows on the hot path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from actors.lifecycle import STATES

QueueKey = tuple[str, str]


class QueueCounts:
    """Counts of jobs per (namespace, queue) and state."""

    def __init__(self) -> None:
        self._counts: dict[QueueKey, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATES, 0))
        #: The same, summed per namespace (what namespace quotas count).
        self._totals: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATES, 0))

    def load(self, rows: Iterable[tuple[str, str, str, int]]) -> None:
        """Replace every count with ``(namespace, queue, state, count)`` rows."""
        self._counts.clear()
        self._totals.clear()
        for namespace, queue, state, count in rows:
            self._counts[(namespace, queue)][state] = count
            self._totals[namespace][state] += count

    def add(self, key: QueueKey, state: str, n: int = 1) -> None:
        """``n`` jobs appeared in ``state`` (enqueue)."""
        self._counts[key][state] += n
        self._totals[key[0]][state] += n

    def move(self, key: QueueKey, source: str, target: str, n: int = 1) -> None:
        """``n`` jobs went from ``source`` to ``target``."""
        counts = self._counts[key]
        counts[source] -= n
        counts[target] += n
        totals = self._totals[key[0]]
        totals[source] -= n
        totals[target] += n

    def remove(self, key: QueueKey, state: str, n: int = 1) -> None:
        """``n`` jobs in ``state`` were deleted (retention)."""
        self._counts[key][state] -= n
        self._totals[key[0]][state] -= n

    def set_state(self, state: str, counts: dict[QueueKey, int]) -> None:
        """Every queue's count of ``state`` is now ``counts`` (absent: 0): the
        store's own figure, read when other daemons move jobs too."""
        for key in set(self._counts) | set(counts):
            n = counts.get(key, 0)
            old = self._counts[key][state]
            if n != old:
                self._counts[key][state] = n
                self._totals[key[0]][state] += n - old

    def queues_of(self, namespace: str) -> list[str]:
        """The queues of ``namespace`` that have (or had) jobs."""
        return [q for ns, q in self._counts if ns == namespace]

    def total(self, namespace: str, state: str) -> int:
        """The count of one state over every queue of ``namespace``."""
        totals = self._totals.get(namespace)
        return 0 if totals is None else totals[state]

    def get(self, key: QueueKey, state: str) -> int:
        """The count of one state of one queue."""
        counts = self._counts.get(key)
        return 0 if counts is None else counts[state]

    def queue(self, key: QueueKey) -> dict[str, int]:
        """A copy of one queue's counts."""
        return dict(self._counts.get(key) or dict.fromkeys(STATES, 0))

    def namespace(self, namespace: str) -> dict[str, dict[str, int]]:
        """Counts of every queue of ``namespace``, by queue name."""
        return {q: dict(c) for (ns, q), c in sorted(self._counts.items()) if ns == namespace}

    def __iter__(self) -> Iterator[tuple[QueueKey, dict[str, int]]]:
        return iter(list(self._counts.items()))
