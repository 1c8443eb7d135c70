"""The schema, for operators: ``sluice db status`` and ``sluice db migrate``.

A daemon migrates its database at start; an operator who wants to migrate by
hand first (a maintenance window, a database user with more rights than the
daemon's) or to see where a database stands uses these, without a daemon.
Both take the ``[daemon]`` section's database: a SQLite file or a PostgreSQL
DSN (asyncpg, run with ``asyncio.run``: no Trio here).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg

from daemon.store.health import StoreUnavailable
from daemon.store.migration import SchemaStatus
from daemon.store.opening import open_database
from daemon.store.pg_opening import redacted
from daemon.store.pg_schema import migrate_postgres, postgres_status
from daemon.store.schema import sqlite_status
from daemon.store.sqlite_lib import sqlite_utils


class NoDatabase(Exception):
    """There is no database where the config says (status never creates one)."""


async def _on_postgres(dsn: str, password: str | None, *, apply: bool) -> SchemaStatus:
    conn = await asyncpg.connect(dsn, password=password, timeout=10)
    try:
        if apply:
            await migrate_postgres(conn)
        return await postgres_status(conn)
    finally:
        await conn.close()


def schema_status(database: str | Path, *, password: str | None = None,
                  apply: bool = False) -> SchemaStatus:  # fmt: skip
    """Where ``database`` (a SQLite path or a PostgreSQL DSN) stands; with
    ``apply``, after migrating it to this build's latest version."""
    text = str(database)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            return asyncio.run(_on_postgres(text, password, apply=apply))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            cause = str(exc).replace(password, "***") if password else str(exc)
            raise NoDatabase(f"cannot reach {redacted(text)}: {cause}") from None
    path = Path(text)
    if apply:  # as the daemon opens it: created if absent, WAL, migrated
        try:
            db: Any = open_database(path)
        except StoreUnavailable as exc:
            raise NoDatabase(str(exc)) from None
    elif not path.exists():
        raise NoDatabase(f"no database at {path}")
    else:  # read-only: status changes nothing
        db = sqlite_utils.Database(sqlite3.connect(f"file:{path}?mode=ro", uri=True))
    try:
        return sqlite_status(db)
    finally:
        db.conn.close()
