"""The jobs journal: every move of a job row, reported as it is written.

A store's :class:`~daemon.store.interface.JobStore` is wrapped in a
:class:`Journal`, so no caller has to remember to say what its write did:
each method that inserts or moves jobs hands the move (``tx``, the rows after,
and for most moves the event and the state they left) to the transition step
(:class:`Transitions`, :class:`daemon.admission.views.Views`) as soon as its
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

from collections.abc import Sequence
from typing import Any, Protocol

from actors import lifecycle as lc
from daemon.store.interface import JobStore, Transaction
from daemon.store.rows import JobRow

#: Passed straight through: reads, and parking (no state moves; the budget gate counts it).
_THROUGH = (
    "get", "find_live_unique", "ready", "ready_groups", "ready_except", "group_counts",
    "adopt_default_group", "ready_group_names", "park",
    "unpark", "parked_oldest", "parked_counts",
    "unfinished_bindings", "unfinished_bound_groups", "lapsed", "earliest_scheduled",
    "earliest_lease_expiry",
    "list_jobs", "dead_ids", "state_counts", "ahead",
)  # fmt: skip


class Transitions(Protocol):
    """The transition step, as the journal reports to it (one method per kind of
    move, so a hot path pays no dispatch)."""

    def inserted(self, tx: Transaction, rows: Sequence[JobRow]) -> None:
        """New rows, in their arrival states."""

    def claimed(self, tx: Transaction, rows: Sequence[JobRow]) -> None:
        """Pending rows became running."""

    def promoted(self, tx: Transaction, rows: Sequence[JobRow]) -> None:
        """Scheduled rows became pending."""

    def extended(self, tx: Transaction, rows: Sequence[JobRow]) -> None:
        """Running rows' leases moved (heartbeat)."""

    def left(self, tx: Transaction, event: str, source: str, rows: Sequence[JobRow]) -> None:
        """Any other move, by ``event`` from ``source``."""


class Unreported:
    """No transition step: moves are not reported (a bare store)."""

    def inserted(self, tx: Any, rows: Any) -> None:
        """Nothing."""

    claimed = promoted = extended = inserted

    def left(self, tx: Any, event: str, source: str, rows: Any) -> None:
        """Nothing."""


class Journal:
    """A :class:`JobStore` whose writes of job states report their transitions.

    ``tx`` is the write being run (set by the committer before each write) and
    ``step`` the transition step (set once by the composition root). Without
    a step (a bare store in a contract test) moves are simply not reported.
    """

    def __init__(self, inner: JobStore) -> None:
        self._inner = inner
        self.tx: Transaction | None = None
        self.step: Transitions = Unreported()
        for name in _THROUGH:
            setattr(self, name, getattr(inner, name))

    def insert(self, rows: Sequence[JobRow]) -> None:
        """Insert new jobs (reported: ``enqueue``, from no state)."""
        self._inner.insert(rows)
        if rows and self.tx is not None:
            self.step.inserted(self.tx, rows)

    def fold(self, before: JobRow, payload: str, ready_at: int, now: int) -> JobRow:
        """Debounce a waiting job (reported: ``fold``)."""
        after = self._inner.fold(before, payload, ready_at, now)
        if self.tx is not None:
            self.step.left(self.tx, "fold", before.state, (after,))
        return after

    def mark_running(
        self, rows: list[JobRow], lease: str, lease_ms: int | None, now: int
    ) -> list[JobRow]:
        """Claim, step 2 (reported: ``claim``, from pending)."""
        claimed = self._inner.mark_running(rows, lease, lease_ms, now)
        if claimed and self.tx is not None:
            self.step.claimed(self.tx, claimed)
        return claimed

    def extend_lease(self, before: JobRow, expires: int, now: int) -> JobRow:
        """Heartbeat (reported: ``heartbeat``, running to running)."""
        after = self._inner.extend_lease(before, expires, now)
        if self.tx is not None:
            self.step.extended(self.tx, (after,))
        return after

    def finish(self, before: JobRow, *, event: str, state: str, now: int,
               ready_at: int | None = None, attempts_delta: int = 0, error: str | None = None,
               result: str | None = None, dead: str | None = None,
               budgets: str | None = None) -> JobRow:  # fmt: skip
        """A running job leaves ``running`` (reported under ``event``; the
        arguments are :meth:`JobStore.finish`'s)."""
        # Every argument named, not ``**changes``: a dict built and unpacked
        # again cost each completion 0.3 µs more (bench/verb_costs.py, single).
        after = self._inner.finish(
            before, event=event, state=state, now=now, ready_at=ready_at,
            attempts_delta=attempts_delta, error=error, result=result, dead=dead,
            budgets=budgets,
        )  # fmt: skip
        if self.tx is not None:
            self.step.left(self.tx, event, before.state, (after,))
        return after

    def complete_many(self, rows: list[tuple[JobRow, str | None]], now: int) -> list[JobRow] | None:
        """Complete running jobs, all or none (reported: ``complete``)."""
        done = self._inner.complete_many(rows, now)
        if done and self.tx is not None:
            self.step.left(self.tx, "complete", lc.RUNNING, done)
        return done

    def replay(self, before: JobRow, now: int, grouped: bool = False) -> JobRow:
        """A dead letter back to pending (reported: ``replay``)."""
        after = self._inner.replay(before, now, grouped)
        if self.tx is not None:
            self.step.left(self.tx, "replay", before.state, (after,))
        return after

    def promote_due(self, now: int, batch: int = 1000) -> list[JobRow]:
        """Due scheduled jobs become pending (reported: ``promote``)."""
        rows = self._inner.promote_due(now, batch)
        if rows and self.tx is not None:
            self.step.promoted(self.tx, rows)
        return rows
