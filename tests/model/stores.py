"""The store of one model example: a SQLite file, or a PostgreSQL database.

:class:`~tests.model.driver.CoreDriver` runs one Core per example and reopens
its store at each restart; the store tells it how to open and close, what must
be open around the whole Trio run (PostgreSQL: trio-asyncio's loop and a
greenback portal in every task, as :func:`daemon.launch.opened_store` sets
up), and what may still be in flight when every Trio task is blocked.

**Fresh per example, cheaply.** Creating the schema costs more than a whole
example's steps, so it is done once per process:

- SQLite (:class:`SqliteExample`): each example copies a migrated, empty file.
- PostgreSQL (:class:`PostgresExample`): each test gets one database of its
  own (:class:`ModelDatabase`, migrated once), emptied at the start of each
  example: every table but the migrations' deleted, the rows the migrations
  seed put back, identity sequences restarted. Measured on the CI machine
  (PostgreSQL 15, 14 tables): about 1 ms, against 85 ms for ``CREATE
  DATABASE ... TEMPLATE`` (plus 30 ms to drop it), 150 ms for ``TRUNCATE`` of
  every table, and 400 ms for ``STRATEGY FILE_COPY``.

**Settled on PostgreSQL.** Every statement the daemon sends is a coroutine
awaited on trio-asyncio's loop, and each such call is an :class:`asyncio.Task`
(``trio_asyncio.aio_as_trio``: the committer's bridged transactions, the reads
made through greenback, the pool's connects and resets). While one is on the
wire every Trio task is blocked (the loop waits on the socket), so
:func:`trio.testing.wait_all_tasks_blocked` alone would end a step early; the
step is settled only when, in addition, no such task is left
(:meth:`PostgresExample.in_flight`). Virtual time stands still meanwhile (the
driver's MockClock has no autojump), so no timeout of asyncpg's fires.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import attrs
import greenback
import trio
import trio_asyncio

from daemon.config import Config, parse_config
from daemon.store import bridge
from daemon.store.opening import open_database
from daemon.store.pg_opening import PgDatabase, open_postgres
from daemon.store.pg_schema import VERSION_TABLE, migrate_postgres
from daemon.store.postgres import Portals
from tests.postgres import CONNECT_TIMEOUT, run_asyncio

T = TypeVar("T")

#: Open mode, with no admin write limit (the model changes limits often).
_DAEMON = {"admin_write_rate": "unlimited"}


class SqliteExample:
    """A copy of the process's migrated template in the example's directory."""

    name = "sqlite"

    #: A freshly migrated, empty store, made once per process.
    _template: Path | None = None

    def __init__(self, directory: Path) -> None:
        self.path = directory / "db.sqlite"
        shutil.copyfile(self._made(), self.path)

    @classmethod
    def _made(cls) -> Path:
        if cls._template is None:
            made = Path(tempfile.mkdtemp(prefix="sluicegate-model-template-")) / "db.sqlite"
            db = open_database(made)
            db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.conn.close()
            cls._template = made
        return cls._template

    def config(self) -> Config:
        """The daemon's config on this store."""
        return parse_config({"daemon": _DAEMON}, "model.toml")

    @asynccontextmanager
    async def around_run(self) -> AsyncIterator[None]:
        """Nothing to open around the Trio run."""
        yield

    async def open(self) -> Any:
        """The database, opened (for a Core)."""
        return open_database(self.path)

    async def close(self, db: Any) -> None:
        """Close what :meth:`open` opened."""
        db.conn.close()

    async def read(self, db: Any, fn: Callable[[], T]) -> T:
        """``fn()``: its statements run on ``db``'s connection."""
        return fn()

    def in_flight(self) -> list[asyncio.Task[Any]]:
        """Nothing: SQLite's statements run on the event loop, never in flight."""
        return []


@attrs.frozen
class ModelDatabase:
    """A migrated PostgreSQL database for one test's examples, and what
    emptying it again means: its tables, the rows the migrations seeded, and
    the identity columns whose sequences restart."""

    dsn: str
    tables: tuple[str, ...]
    seeds: tuple[tuple[str, tuple[str, ...], tuple[tuple[Any, ...], ...]], ...]
    identities: tuple[tuple[str, str], ...]

    @classmethod
    def prepare(cls, dsn: str) -> ModelDatabase:
        """Migrate the (new, empty) database at ``dsn`` and note what it holds."""
        return run_asyncio(cls._prepare(dsn))

    @classmethod
    async def _prepare(cls, dsn: str) -> ModelDatabase:
        conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
        try:
            await migrate_postgres(conn)
            tables = tuple(sorted(
                r[0] for r in await conn.fetch(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
                if r[0] != VERSION_TABLE
            ))  # fmt: skip
            seeds = []
            for table in tables:
                rows = await conn.fetch(f'SELECT * FROM "{table}"')
                if rows:
                    columns = tuple(rows[0].keys())
                    seeds.append((table, columns, tuple(tuple(r) for r in rows)))
            identities = tuple(
                (r[0], r[1])
                for r in await conn.fetch(
                    "SELECT table_name, column_name FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND is_identity = 'YES'"
                )
            )
        finally:
            await conn.close()
        return cls(dsn, tables, tuple(seeds), identities)

    async def empty(self, conn: asyncpg.Connection) -> None:
        """Back to just migrated (asyncio side, on ``conn``), in one transaction."""
        async with conn.transaction():
            for table in self.tables:
                await conn.execute(f'DELETE FROM "{table}"')
            for table, columns, rows in self.seeds:
                names = ", ".join(f'"{c}"' for c in columns)
                marks = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
                await conn.executemany(
                    f'INSERT INTO "{table}" ({names}) VALUES ({marks})', list(rows)
                )
            for table, column in self.identities:  # setval, not ALTER: no DDL, no lock
                await conn.execute(
                    "SELECT setval(pg_get_serial_sequence($1, $2), 1, false)", f'"{table}"', column
                )


class PostgresExample:
    """The test's database, emptied when the example's first Core opens it;
    each open is a new pool (a restart reopens as the daemon starts)."""

    name = "postgres"

    def __init__(self, database: ModelDatabase) -> None:
        self.database = database
        self._emptied = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def config(self) -> Config:
        """The daemon's config on this store (its DSN: no file, no disk check)."""
        return parse_config({"daemon": {**_DAEMON, "database": self.database.dsn}}, "model.toml")

    @asynccontextmanager
    async def around_run(self) -> AsyncIterator[None]:
        """A greenback portal in every task and trio-asyncio's loop, for the
        whole run (tasks that use the store must be started inside)."""
        portals = Portals()
        trio.lowlevel.add_instrument(portals)
        try:
            await greenback.ensure_portal()  # this task began before the instrument
            async with trio_asyncio.open_loop() as loop:
                self._loop = loop
                try:
                    yield
                finally:
                    self._loop = None
        finally:
            trio.lowlevel.remove_instrument(portals)

    async def open(self) -> PgDatabase:
        """A new pool on the database (migrated already: the check is cheap)."""
        db = await open_postgres(self.database.dsn)
        if not self._emptied:

            async def empty() -> None:
                async with db.pool.acquire() as conn:
                    await self.database.empty(conn)

            try:
                await trio_asyncio.aio_as_trio(empty)()
            except BaseException:
                await db.aclose()
                raise
            self._emptied = True
        return db

    async def close(self, db: PgDatabase) -> None:
        """Close the pool."""
        with trio.CancelScope(shield=True):
            await db.aclose()

    async def read(self, db: PgDatabase, fn: Callable[[], T]) -> T:
        """``fn()`` bridged on one pooled connection: its statements cross to
        asyncio once together, not once each."""
        return await bridge.run_pooled(db.pool, fn)

    def in_flight(self) -> list[asyncio.Task[Any]]:
        """The asyncio tasks not done yet: a statement, a connect or a pool's
        reset on the wire (every ``aio_as_trio`` call is one)."""
        if self._loop is None:
            return []
        return [t for t in asyncio.all_tasks(self._loop) if not t.done()]
