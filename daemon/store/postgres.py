"""The PostgreSQL side of the store: asyncpg behind the statements' own API.

The store's SQL modules (:mod:`~daemon.store.jobs`, :mod:`~daemon.store.budgets`,
...) speak to a connection through ``execute`` and ``executemany`` and read
rows from the cursor they return, as :mod:`sqlite3` defines them.
:class:`PgConnection` is that API over asyncpg, inside a bridged call
(:mod:`daemon.store.bridge`): the same modules, and therefore the same
statements, serve both databases. Where the dialects differ, a module holds
both texts and picks with :func:`is_postgres`.

- Parameters are written ``?`` (SQLite's style) and numbered ``$1, $2, ...``
  here, once per statement text (cached).
- A statement that returns rows (``SELECT``, ``WITH``, ``... RETURNING``) is
  fetched; any other runs with ``execute``, whose status line gives
  ``rowcount`` and feeds :attr:`PgConnection.total_changes` (what the group
  commit uses to tell a refused write that changed rows from one that did not).
- Rows are asyncpg records: tuples by position, as sqlite3's rows are.

One :class:`PgConnection` serves every bridged call; each call works on its own
pool connection (:func:`daemon.store.bridge.current`). A statement made outside
a bridged call (a read of a verb, the board, a timer) is a transaction of its
own on any pooled connection, awaited through greenback from whichever Trio
task made it: the daemon gives every task a portal (:class:`Portals`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import asyncpg
import greenback
import trio
import trio_asyncio

from daemon.store import bridge
from daemon.store.health import store_refusal

#: Statement text (SQLite style) -> (PostgreSQL text, whether it returns rows,
#: whether the rows it returns are rows it changed: ``... RETURNING``).
_TRANSLATED: dict[str, tuple[str, bool, bool]] = {}

#: The few SQLite spellings the statements use, and PostgreSQL's:
_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    # SQLite's index hints (the planners differ; PostgreSQL's chooses well here).
    (re.compile(r"\s+INDEXED BY \w+"), ""),
    # A text's size in bytes.
    (re.compile(r"length\(CAST\((\w+) AS BLOB\)\)"), r"octet_length(\1)"),
    # SUM of BIGINT is NUMERIC on PostgreSQL (a Decimal): the statements sum counts.
    (re.compile(r"\bSUM\(([^()]*)\)"), r"SUM(\1)::bigint"),
)


def numbered(sql: str) -> str:
    """``sql`` with each ``?`` outside quotes numbered ``$1, $2, ...``."""
    out: list[str] = []
    n = 0
    quote: str | None = None
    for ch in sql:
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "?":
            n += 1
            out.append(f"${n}")
            continue
        out.append(ch)
    return "".join(out)


def postgres_text(sql: str) -> str:
    """A statement written for SQLite, as PostgreSQL reads it."""
    for pattern, replacement in _REWRITES:
        sql = pattern.sub(replacement, sql)
    return numbered(sql)


def _translate(sql: str) -> tuple[str, bool, bool]:
    known = _TRANSLATED.get(sql)
    if known is None:
        returning = " RETURNING " in sql.upper()
        returns_rows = sql.lstrip()[:6].upper().startswith(("SELECT", "WITH")) or returning
        known = _TRANSLATED[sql] = (postgres_text(sql), returns_rows, returning)
    return known


def _count(status: str) -> int:
    """Rows a command changed, from its status line (``UPDATE 3``, ``INSERT 0 1``)."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class PgCursor:
    """The rows of one statement, read as a sqlite3 cursor's are."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: Sequence[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        """Every row."""
        return list(self._rows)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class PgConnection:
    """sqlite3's connection API (what the store's modules use of it) over the
    asyncpg connection of the running bridged call."""

    dialect = "postgres"
    #: The group commit's words for this dialect (daemon.store.database).
    begin_statement = "BEGIN"
    #: Errors of the database or of the way to it: the transaction is lost.
    errors: tuple[type[BaseException], ...] = (
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        asyncpg.exceptions.InternalClientError,  # a session ended under it (health.py)
        OSError,
        TimeoutError,
    )

    def __init__(self, pool: Any = None) -> None:
        #: The asyncpg pool statements outside a bridged call run on.
        self.pool = pool
        #: Rows changed by this process's commands, as sqlite3's ``total_changes``.
        self.total_changes = 0
        #: The id of the write transaction open now, once its epoch bump took it
        #: (cleared at each BEGIN): asked after a COMMIT whose answer was lost
        #: (daemon.store.commit_outcome).
        self.transaction_id: int | None = None

    @property
    def in_transaction(self) -> bool:
        """Whether the call's connection has a transaction open."""
        conn = bridge.connection_or_none()
        return conn is not None and bool(conn.is_in_transaction())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        """Run one statement; its rows (or an empty cursor with ``rowcount``)."""
        text, returns_rows, returning = _translate(sql)
        conn = bridge.connection_or_none()
        if conn is None:
            return self._alone(text, returns_rows, params)
        if text == "BEGIN":
            self.transaction_id = None
        if returns_rows:
            rows = bridge.await_(conn.fetch(text, *params))
            if returning:
                self.total_changes += len(rows)
            return PgCursor(rows, len(rows))
        status = bridge.await_(conn.execute(text, *params))
        if status == "ROLLBACK" and text == "COMMIT":
            # PostgreSQL answers COMMIT of an aborted transaction with a
            # rollback, not an error: never report such writes as committed.
            raise asyncpg.InFailedSQLTransactionError("COMMIT rolled back an aborted transaction")
        changed = _count(status) if status else 0
        self.total_changes += changed
        return PgCursor((), changed)

    def _alone(self, text: str, returns_rows: bool, params: Sequence[Any]) -> PgCursor:
        """One statement outside a transaction, from any Trio task with a portal."""
        if self.pool is None:
            raise bridge.NotBridged("a store statement ran outside a bridged call")
        method = self.pool.fetch if returns_rows else self.pool.execute
        try:
            done = greenback.await_(trio_asyncio.aio_as_trio(method)(text, *params))
        except Exception as exc:
            # The database away: ``unavailable``, as a failed write answers.
            refused = store_refusal(exc)
            if refused is None:
                raise
            raise refused from exc
        if returns_rows:
            return PgCursor(done, len(done))
        return PgCursor((), _count(done) if done else 0)

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        """Run one statement for each parameter tuple of ``seq``."""
        args = [tuple(p) for p in seq]
        if args:
            text = _translate(sql)[0]
            bridge.await_(bridge.current().executemany(text, args))
            self.total_changes += len(args)  # asyncpg reports no count: at most one each
        return PgCursor((), len(args))


class Portals(trio.abc.Instrument):
    """Gives every Trio task a greenback portal, so that synchronous store code
    in any task can await PostgreSQL (the daemon adds it on PostgreSQL only)."""

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        """A new task: a portal for it."""
        greenback.bestow_portal(task)


def is_postgres(conn: Any) -> bool:
    """Whether the store's statements run on PostgreSQL (else SQLite)."""
    return type(conn) is PgConnection
