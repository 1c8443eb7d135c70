"""Capped label values: a producer inventing queue names cannot blow up the series.

The first ``max_queues`` distinct names get their own value; later ones are
folded into :data:`OTHER`.
"""

from __future__ import annotations

OTHER = "__other__"


class QueueLabels:
    """Maps queue names to a capped set of label values."""

    def __init__(self, max_queues: int) -> None:
        self._max = max_queues
        self._known: set[str] = set()

    def __call__(self, queue: str) -> str:
        """The label value for ``queue``."""
        if queue in self._known:
            return queue
        if len(self._known) < self._max:
            self._known.add(queue)
            return queue
        return OTHER
