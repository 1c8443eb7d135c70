"""The two kinds of end of ``sluice store copy``: a SQLite file, a PostgreSQL database.

Either may be the source or the target, behind the same few methods, so
:mod:`daemon.store.copier` is one loop for all four directions.

**A source** is read in one read transaction: on SQLite a read-only connection
whose snapshot (WAL) stays fixed while a daemon goes on writing; on PostgreSQL a
``REPEATABLE READ, READ ONLY`` transaction. Every count and batch sees the same
instant, so the copy is consistent even from a running daemon.

**A target** is first looked at as it is: a row in any table of the schema
refuses the copy before anything is written. It is then created if need be and
migrated to this build's schema, and every row is written in one transaction,
which holds the write lock (SQLite's ``BEGIN IMMEDIATE``; PostgreSQL's
``LOCK TABLE ... IN EXCLUSIVE MODE``) and looks for rows again under it. A
failure rolls it back: the target is left empty. On PostgreSQL, identity
columns (``audit.id``) get their sequence moved past the copied ids.

Values are passed as the drivers give them: integers (64-bit), text, NULL,
bytes. The schema has only bigint and text columns (daemon/store/schema.py);
a PostgreSQL column of a type this module does not map refuses the copy
rather than guess.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from daemon.store.copy_layout import CopyRefused, Row, Table, ValueRefused, page_query, quoted
from daemon.store.health import StoreUnavailable
from daemon.store.migration import SchemaTooNew
from daemon.store.opening import open_database
from daemon.store.pg_opening import redacted
from daemon.store.pg_schema import migrate_postgres, postgres_status

#: What asyncpg raises when it cannot connect, or loses the connection.
PG_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)

#: PostgreSQL column types a copy carries: each to the value SQLite holds, and back.
_PG_TYPES = {"bigint", "integer", "smallint", "text", "bytea", "boolean", "double precision"}


class SqliteEnd:
    """A SQLite database file, as a source or as a target of a copy."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: How messages name this end.
        self.shown = str(path)
        self._conn: sqlite3.Connection | None = None

    def scrub(self, text: str) -> str:
        """``text`` as it is: a file has no password to hide."""
        return text

    def _connect_read_only(self) -> sqlite3.Connection:
        # A URI from the absolute path: a name holding ? or # stays a name.
        uri = self.path.resolve().as_uri() + "?mode=ro"
        return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)

    async def open_source(self) -> int:
        """Open the file read-only and start the read snapshot; its schema version."""
        if not self.path.is_file():
            raise CopyRefused(f"no database at {self.path}")
        try:
            self._conn = self._connect_read_only()
            self._conn.execute("BEGIN")
            self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise CopyRefused(f"cannot read the database {self.path}: {exc}") from None

    async def open_target(self, tables: tuple[Table, ...]) -> None:
        """Refuse a file holding rows; else create or migrate it and start the write."""
        if self.path.exists():  # looked at read-only first: a refusal writes nothing
            try:
                look = self._connect_read_only()
                try:
                    _refuse_rows(self.shown, _sqlite_rows_in(look, tables))
                finally:
                    look.close()
            except sqlite3.Error as exc:
                raise CopyRefused(f"cannot open the database {self.path}: {exc}") from None
        try:
            self._conn = open_database(self.path).conn
        except StoreUnavailable as exc:
            raise CopyRefused(str(exc)) from None
        except SchemaTooNew as exc:
            raise CopyRefused(f"{self.shown}: {exc}") from None
        self._conn.execute("BEGIN IMMEDIATE")  # waits up to busy_timeout for a writer
        _refuse_rows(self.shown, _sqlite_rows_in(self._conn, tables))

    async def count(self, table: Table) -> int:
        """How many rows ``table`` holds."""
        return int(self._c.execute(f"SELECT count(*) FROM {quoted(table.name)}").fetchone()[0])

    async def page(self, table: Table, after: Row | None, limit: int) -> list[Row]:
        """At most ``limit`` rows of ``table`` after key ``after`` (None: the first)."""
        sql = page_query(table, after=after is not None, placeholder=lambda _i: "?")
        return self._c.execute(sql, (*(after or ()), limit)).fetchall()

    async def write(self, table: Table, rows: list[Row]) -> None:
        """Insert ``rows`` into ``table`` (in the target's transaction)."""
        columns = ", ".join(quoted(c) for c in table.columns)
        marks = ", ".join("?" for _ in table.columns)
        self._c.executemany(f"INSERT INTO {quoted(table.name)} ({columns}) VALUES ({marks})", rows)

    async def commit(self) -> None:
        """Commit what was written."""
        self._c.execute("COMMIT")

    async def close(self) -> None:
        """Close, rolling back anything not committed."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def _c(self) -> sqlite3.Connection:
        assert self._conn is not None, "open the end first"
        return self._conn


def _sqlite_rows_in(conn: sqlite3.Connection, tables: tuple[Table, ...]) -> str | None:
    """The first of ``tables`` that exists in ``conn``'s database and holds a row."""
    present = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    for table in tables:
        if (
            table.name in present
            and conn.execute(f"SELECT 1 FROM {quoted(table.name)} LIMIT 1").fetchone()
        ):
            return table.name
    return None


def _refuse_rows(shown: str, table: str | None) -> None:
    """Refuse the target ``shown`` when ``table`` (one holding rows) is named."""
    if table is not None:
        raise CopyRefused(
            f"the target {shown} is not empty (table {table} has rows): "
            "copy into a new file or an empty database"
        )


class PostgresEnd:
    """A PostgreSQL database (its DSN's first schema), as a source or a target."""

    def __init__(self, dsn: str, password: str | None = None) -> None:
        self.dsn = dsn
        self.password = password
        #: How messages name this end: the DSN without its password.
        self.shown = redacted(dsn)
        self._conn: Any = None
        self._tx: Any = None
        self._booleans: dict[str, tuple[int, ...]] = {}

    def scrub(self, text: str) -> str:
        """``text`` without any password of this end (for an error message)."""
        for secret in (self.password, urlsplit(self.dsn).password):
            if secret:
                text = text.replace(secret, "***")
        return text

    async def _connect(self) -> None:
        try:
            self._conn = await asyncpg.connect(
                self.dsn, password=self.password, timeout=10,
                server_settings={"application_name": "sluice store copy"},
            )  # fmt: skip
        except PG_ERRORS as exc:
            raise CopyRefused(f"cannot reach {self.shown}: {self.scrub(str(exc))}") from None

    async def open_source(self) -> int:
        """Connect and start a read-only snapshot; its schema version."""
        await self._connect()
        self._tx = self._conn.transaction(isolation="repeatable_read", readonly=True)
        await self._tx.start()
        status = await postgres_status(self._conn)
        return status.current

    async def open_target(self, tables: tuple[Table, ...]) -> None:
        """Refuse a database holding rows; else migrate it, start the write and lock."""
        await self._connect()
        _refuse_rows(self.shown, await self._rows_in(tables))
        try:
            await migrate_postgres(self._conn)
        except SchemaTooNew as exc:
            raise CopyRefused(f"{self.shown}: {exc}") from None
        self._tx = self._conn.transaction()
        await self._tx.start()
        await self._conn.execute("SET LOCAL lock_timeout = '10s'")
        names = ", ".join(quoted(t.name) for t in tables)
        try:
            await self._conn.execute(f"LOCK TABLE {names} IN EXCLUSIVE MODE")
        except asyncpg.LockNotAvailableError:
            raise CopyRefused(f"the target {self.shown} is in use (a daemon on it?)") from None
        _refuse_rows(self.shown, await self._rows_in(tables))
        await self._check_types(tables)

    async def _rows_in(self, tables: tuple[Table, ...]) -> str | None:
        """The first of ``tables`` that exists here and holds a row."""
        present = {
            r[0]
            for r in await self._conn.fetch(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )
        }
        for table in tables:
            if table.name in present and await self._conn.fetchval(
                f"SELECT EXISTS (SELECT 1 FROM {quoted(table.name)})"
            ):
                return table.name
        return None

    async def _check_types(self, tables: tuple[Table, ...]) -> None:
        """Refuse a column this module cannot carry; note the boolean ones."""
        types = {
            (r[0], r[1]): r[2]
            for r in await self._conn.fetch(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema()"
            )
        }
        for table in tables:
            for column in table.columns:
                kind = types.get((table.name, column))
                if kind not in _PG_TYPES:
                    raise CopyRefused(
                        f"column {table.name}.{column} of {self.shown} is {kind or 'missing'}: "
                        "this build of sluice cannot copy it"
                    )
            # SQLite holds a boolean as 0 or 1; asyncpg takes only a bool.
            columns = enumerate(table.columns)
            flags = tuple(i for i, c in columns if types[table.name, c] == "boolean")
            if flags:
                self._booleans[table.name] = flags

    async def count(self, table: Table) -> int:
        """How many rows ``table`` holds."""
        return int(await self._conn.fetchval(f"SELECT count(*) FROM {quoted(table.name)}"))

    async def page(self, table: Table, after: Row | None, limit: int) -> list[Row]:
        """At most ``limit`` rows of ``table`` after key ``after`` (None: the first)."""
        sql = page_query(table, after=after is not None, placeholder=lambda i: f"${i}")
        return [tuple(r) for r in await self._conn.fetch(sql, *(after or ()), limit)]

    async def write(self, table: Table, rows: list[Row]) -> None:
        """COPY ``rows`` into ``table`` (in the target's transaction)."""
        if flags := self._booleans.get(table.name):
            rows = [_with_booleans(row, flags) for row in rows]
        try:
            await self._conn.copy_records_to_table(table.name, records=rows, columns=table.columns)
        except (TypeError, ValueError, OverflowError) as exc:  # asyncpg's encoders refuse
            raise ValueRefused(f"a value does not fit its column: {exc}") from exc

    async def commit(self) -> None:
        """Move identity sequences past the copied ids, then commit."""
        for table, column in await self._conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND is_identity = 'YES'"
        ):
            await self._conn.execute(
                f"SELECT setval(pg_get_serial_sequence($1, $2), max({quoted(column)})) "
                f"FROM {quoted(table)} HAVING max({quoted(column)}) IS NOT NULL",
                quoted(table), column,
            )  # fmt: skip
        await self._tx.commit()
        self._tx = None

    async def close(self) -> None:
        """Close, rolling back anything not committed."""
        if self._conn is None:
            return
        try:
            if self._tx is not None and not self._conn.is_closed():
                await self._tx.rollback()
        except PG_ERRORS:
            pass  # a lost connection rolls back by itself
        finally:
            self._tx = None
            await self._conn.close()
            self._conn = None


def _with_booleans(row: Row, flags: tuple[int, ...]) -> Row:
    """``row`` with the values at ``flags`` (SQLite's 0 and 1) as bools."""
    return tuple(bool(v) if i in flags and v is not None else v for i, v in enumerate(row))
