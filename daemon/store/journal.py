"""The jobs journal: every move of a job row, reported as it is written.

A store's :class:`~daemon.store.interface.JobStore` is wrapped in a
:class:`Journal`, so no caller has to remember to say what its write did:
each method that inserts or moves jobs hands ``(tx, event, source, rows)`` to
the transition step (:class:`daemon.admission.views.Views`) as soon as its
statement ran, inside the write's transaction. ``source`` is the state the
rows left (None for new rows) and ``rows`` are the rows after. The step keeps
the daemon's in-memory views (counts, budgets, policies, quotas, usage,
history, metrics, timers, doorbells) equal to the store, and registers what
must wait for the COMMIT with ``tx.after``.

The wrapper is the store's, not a dialect's: the PostgreSQL store wraps its
job statements the same way. Reads pass straight through (the bound method
itself, no extra frame), and so do ``park``/``unpark``, which move no state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from actors import lifecycle as lc
from daemon.store.interface import JobStore, Transaction
from daemon.store.rows import JobRow

#: ``step(tx, event, source, rows)``: what the journal calls for every move.
Step = Callable[[Transaction, str, "str | None", Sequence[JobRow]], None]

#: Passed straight through: reads, and parking (no state moves; the budget gate counts it).
_THROUGH = (
    "get", "find_live_unique", "ready", "park", "unpark", "parked_oldest", "parked_counts",
    "unfinished_bindings", "lapsed", "earliest_scheduled", "earliest_lease_expiry",
    "list_jobs", "dead_ids", "state_counts",
)  # fmt: skip


def _ignore(_tx: Any, _event: str, _source: str | None, _rows: Sequence[JobRow]) -> None:
    return None


class Journal:
    """A :class:`JobStore` whose writes of job states report their transitions.

    ``tx`` is the write being run (set by the committer before each write) and
    ``step`` the transition step (set once by the composition root). Without
    a step (a bare store in a contract test) moves are simply not reported.
    """

    def __init__(self, inner: JobStore) -> None:
        self._inner = inner
        self.tx: Transaction | None = None
        self.step: Step = _ignore
        for name in _THROUGH:
            setattr(self, name, getattr(inner, name))

    def _report(self, event: str, source: str | None, rows: Sequence[JobRow]) -> None:
        if rows and self.tx is not None:
            self.step(self.tx, event, source, rows)

    def insert(self, rows: Sequence[JobRow]) -> None:
        """Insert new jobs (reported: ``enqueue``, from no state)."""
        self._inner.insert(rows)
        self._report("enqueue", None, rows)

    def fold(self, before: JobRow, payload: str, ready_at: int, now: int) -> JobRow:
        """Debounce a waiting job (reported: ``fold``)."""
        after = self._inner.fold(before, payload, ready_at, now)
        self._report("fold", before.state, (after,))
        return after

    def mark_running(
        self, rows: list[JobRow], lease: str, lease_ms: int | None, now: int
    ) -> list[JobRow]:
        """Claim, step 2 (reported: ``claim``, from pending)."""
        claimed = self._inner.mark_running(rows, lease, lease_ms, now)
        self._report("claim", lc.PENDING, claimed)
        return claimed

    def extend_lease(self, before: JobRow, expires: int, now: int) -> JobRow:
        """Heartbeat (reported: ``heartbeat``, running to running)."""
        after = self._inner.extend_lease(before, expires, now)
        self._report("heartbeat", lc.RUNNING, (after,))
        return after

    def finish(self, before: JobRow, *, event: str, state: str, now: int,
               **changes: Any) -> JobRow:  # fmt: skip
        """A running job leaves ``running`` (reported under ``event``)."""
        after = self._inner.finish(before, event=event, state=state, now=now, **changes)
        self._report(event, before.state, (after,))
        return after

    def complete_many(self, rows: list[tuple[JobRow, str | None]], now: int) -> list[JobRow] | None:
        """Complete running jobs, all or none (reported: ``complete``)."""
        done = self._inner.complete_many(rows, now)
        if done:
            self._report("complete", lc.RUNNING, done)
        return done

    def replay(self, before: JobRow, now: int) -> JobRow:
        """A dead letter back to pending (reported: ``replay``)."""
        after = self._inner.replay(before, now)
        self._report("replay", before.state, (after,))
        return after

    def promote_due(self, now: int, batch: int = 1000) -> list[JobRow]:
        """Due scheduled jobs become pending (reported: ``promote``)."""
        rows = self._inner.promote_due(now, batch)
        self._report("promote", lc.SCHEDULED, rows)
        return rows
