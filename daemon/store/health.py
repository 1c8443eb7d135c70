"""The store's health: whether it can write, and SQLite's errors sorted into
outcomes.

An error of the store itself is no bug: the disk is full, an I/O error, a file
that cannot be opened or is read-only, a lock another process held past the
busy timeout. The same call may succeed later, so it answers ``unavailable``
(503) with ``retry_after`` (:func:`store_refusal`). Any other SQLite error (a
constraint, a syntax error) is a bug: ``internal``, with a logged reference.

State model of :class:`StoreHealth`:

- **ok**: no failed transaction since the last one that wrote.
- **failing**: a transaction failed with a store error (:meth:`failed`).
  ``/healthz`` answers 503 naming the store. The committer probes with a
  one-page write, with backoff, only while failing; the probe or any commit
  that wrote rows makes the store **ok** again (:meth:`wrote`), once the
  filesystem also has :data:`HEADROOM` bytes free: SQLite reuses slack in the
  WAL file, so a small write can succeed on a disk that is still full.

Nothing here does I/O but one ``statvfs`` per check while failing.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import asyncpg
import attrs

from actors.errors import Refused

log = logging.getLogger("sluicegate.store")

#: Free bytes the store's filesystem needs before a failing store counts as ok.
HEADROOM = 1_048_576
#: Seconds a client is told to wait before it tries again.
RETRY_AFTER = 1

_FULL = 13
_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
#: Primary result codes that mean the store failed, not the caller or our SQL.
STORE_CODES = frozenset(
    {
        5,  # SQLITE_BUSY: another process held the lock past busy_timeout
        6,  # SQLITE_LOCKED
        7,  # SQLITE_NOMEM
        8,  # SQLITE_READONLY
        10,  # SQLITE_IOERR (and its extended codes)
        11,  # SQLITE_CORRUPT
        _FULL,  # SQLITE_FULL
        14,  # SQLITE_CANTOPEN
        15,  # SQLITE_PROTOCOL
        22,  # SQLITE_NOLFS
        26,  # SQLITE_NOTADB
    }
)


#: PostgreSQL: errors of the server or of the way to it, not of the caller or
#: our SQL: the connection lost or refused (class 08, OSError, a closed pool),
#: the server shutting down or cancelling a statement past its timeout
#: (class 57), out of resources (53: disk full, too many connections), and a
#: transaction rolled back for a deadlock or a serialization failure (40).
#: asyncpg's ``InternalClientError`` too: a session the server ended while it
#: was idle in the pool (``pg_terminate_backend``, a restart) sends its FATAL
#: before the close, and a statement sent in between finds the protocol still
#: consuming that error ("cannot switch to state 15; another operation (2) is
#: in progress"); the pool drops the connection on its release. And a session
#: the server ended for idling in a transaction (25P03: this daemon was frozen
#: mid-transaction past ``database_idle_in_transaction_timeout``).
PG_STORE_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.IdleInTransactionSessionTimeoutError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.TransactionRollbackError,
    OSError,
    TimeoutError,
)


class StoreUnavailable(Exception):
    """The store cannot be opened: the message names the path and the cause."""


def is_store_failure(exc: BaseException) -> bool:
    """True when ``exc`` is an error of the store (disk, file, lock, the
    database server or the way to it), not a bug."""
    if isinstance(exc, PG_STORE_ERRORS):
        return True
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in STORE_CODES


def describe(exc: BaseException) -> str:
    """What the store could not do, for messages and ``/healthz``."""
    if isinstance(exc, PG_STORE_ERRORS):
        return f"the database is unavailable: {type(exc).__name__}: {exc}"
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code in _BUSY:
        return f"the store is busy: {exc} (another process holds its lock)"
    return f"the store cannot write: {exc}"


def store_refusal(exc: BaseException) -> Refused | None:
    """The ``unavailable`` refusal for a store error; None for anything else."""
    if not is_store_failure(exc):
        return None
    return Refused("unavailable", f"{describe(exc)}; retry later", retry_after=RETRY_AFTER)


@attrs.frozen
class HealthStatistics:
    """A snapshot of :class:`StoreHealth`."""

    failing: str | None
    failures: int
    wal_bytes: int | None
    wal_max_bytes: int


class StoreHealth:
    """Whether the store writes, and the WAL's last measured size.

    The committer reports into it (:meth:`failed`, :meth:`wrote`); the
    checkpointer reports the WAL's size (:meth:`wal_measured`).
    """

    def __init__(self, path: Path | str | None = None, wal_max_bytes: int = 64 << 20) -> None:
        #: A directory on the store's filesystem, for the free-space check.
        self.directory = None if path is None or str(path) == ":memory:" else Path(path).parent
        self.wal_max_bytes = wal_max_bytes
        self.wal_bytes: int | None = None
        self.failing: str | None = None
        #: Transactions failed in the current episode.
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        """A transaction failed with the store error ``exc``."""
        if self.failing is None:
            log.error("%s; writes answer unavailable until it recovers", describe(exc))
        self.failing = describe(exc)
        self.failures += 1

    def wrote(self) -> bool:
        """A transaction that wrote committed: ok again if there is headroom.

        True when this call ended a failing episode.
        """
        if self.failing is None or not self.has_headroom():
            return False
        log.info("the store writes again (after %d failed transactions)", self.failures)
        self.failing = None
        self.failures = 0
        return True

    def has_headroom(self) -> bool:
        """The store's filesystem has :data:`HEADROOM` bytes free (or is unknown)."""
        if self.directory is None:
            return True
        try:
            st = os.statvfs(self.directory)
        except OSError:
            return True  # the probe write alone decides
        return st.f_bavail * st.f_frsize >= HEADROOM

    def wal_measured(self, size: int | None) -> None:
        """The checkpointer measured the ``-wal`` file (None: it does not exist)."""
        self.wal_bytes = size

    def unusable(self) -> list[str]:
        """Problems that make the daemon unable to serve (``/healthz`` 503)."""
        if self.failing is None:
            return []
        return [f"store: {self.failing} ({self.failures} failed transactions)"]

    def degraded(self) -> list[str]:
        """Problems that leave the daemon serving (``/healthz`` 200, degraded)."""
        if self.wal_bytes is not None and self.wal_bytes > self.wal_max_bytes:
            return [
                f"store: the WAL is {self.wal_bytes} bytes, over wal_max_bytes "
                f"{self.wal_max_bytes} (a long read transaction holds it?)"
            ]
        return []

    def statistics(self) -> HealthStatistics:
        """A frozen snapshot, for metrics and status."""
        return HealthStatistics(self.failing, self.failures, self.wal_bytes, self.wal_max_bytes)
