"""The committer's side of a failing store: answers, probes, recovery.

A transaction that fails with an error of the store (disk full, I/O error,
read-only file: :mod:`daemon.store.health`) answers every write of it
``unavailable`` and marks the store failing; any other error is a bug,
``internal``. While failing, the committer probes with backoff (from
:data:`PROBE_FIRST` up to :data:`PROBE_MAX` seconds) until a commit writes
again (the mixin of :class:`~daemon.store.database.GroupCommit`).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from actors.errors import Refused, internal_error
from daemon.store.health import StoreHealth, is_store_failure, store_refusal
from daemon.store.transaction import Write

log = logging.getLogger("sluicegate.store")
#: The committer's probe of a failing store: first delay and cap (seconds).
PROBE_FIRST = 0.25
PROBE_MAX = 10.0


class FailingStore:
    """What the committer does when the store fails, and how it sees it return."""

    health: StoreHealth
    _conn: Any
    _pool: Any
    _errors: tuple[type[BaseException], ...]
    _wake: trio.Event
    _probe_delay: float
    _probe_at: float | None

    def _fail_all(self, writes: list[Write], exc: BaseException) -> None:
        """The transaction failed: a store error answers ``unavailable``, a bug
        ``internal`` (one logged reference for the whole transaction)."""
        refused = store_refusal(exc)
        if refused is not None:
            self.health.failed(exc)
        else:
            refused = internal_error(exc)
        for item in writes:
            item.tx = None
            item.error = refused

    def failed_elsewhere(self, exc: BaseException) -> None:
        """A probe outside any transaction (``/healthz``) found the store away:
        failing, and the committer probes for its return even with no write."""
        self.health.failed(exc)
        self._wake.set()

    def _recovered(self) -> None:
        if self.health.wrote():
            self._probe_delay = PROBE_FIRST
            self._probe_at = None

    def _probe(self) -> None:
        """A failing store's probe: a one-page write (the schema version,
        rewritten unchanged) in its own transaction; on PostgreSQL a statement
        on any pooled connection."""
        conn = self._conn
        if self._pool is not None:
            try:
                conn.execute("SELECT 1")  # PostgreSQL: the server answers again
            except Refused:  # still away (daemon.store.postgres answers unavailable)
                return
            self._recovered()
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
        except self._errors as exc:
            rollback(conn, self._errors)
            if not is_store_failure(exc):
                internal_error(exc)  # logged with a reference; the store stays failing
            return
        self._recovered()


def rollback(conn: Any, errors: tuple[type[BaseException], ...]) -> None:
    """Roll back what is open; the database may have done it already, or fail to.
    Asking is inside the ``try``: a PostgreSQL connection whose session ended
    mid-transaction is back in the pool already, and says so by raising (else
    the error would escape the transaction, whose writes would go unanswered)."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except errors as exc:
        log.warning("rollback failed: %s", exc)
