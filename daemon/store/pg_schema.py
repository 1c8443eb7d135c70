"""Applying the migrations of :mod:`daemon.store.schema` to PostgreSQL (asyncpg).

**Versions.** SQLite keeps its version in ``PRAGMA user_version``;
PostgreSQL keeps one row per migration applied in
``sluicegate_schema_migrations`` (version, name, applied_at), created in the
first schema of the connection's ``search_path`` beside the tables it
describes. A row per migration, not a counter, so ``sluice db status`` can
say what was applied when, and can name migrations a newer build applied.
The version is the largest row.

**Why an advisory lock.** Several daemons share one database (issue 15) and
a deploy starts them together; each migrates at start. Each migration runs
in its own transaction that first takes ``pg_advisory_xact_lock`` on
:data:`LOCK_KEY`; a second daemon waits there until the first commits, then
reads the version again and finds that migration done, so every migration
is applied once and no daemon fails on "relation already exists". The
transaction runs at READ COMMITTED whatever the connection's default,
because only there does a statement after the lock see what committed while
it waited (REPEATABLE READ would read the version of before the wait). A
transaction-level lock is released by COMMIT or ROLLBACK, and by the server
when a daemon dies mid-migration, so unlike a session lock it cannot outlive
its migration on a pooled connection. One transaction per migration, as on
SQLite: PostgreSQL's DDL is transactional, so a failed migration leaves the
schema at the whole version before it.

These functions take an asyncpg connection, not in a transaction; the daemon
runs them under trio-asyncio, the tests under ``asyncio.run``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from daemon.store.migration import (
    Migration,
    SchemaStatus,
    Step,
    pending_steps,
    refuse_newer,
)
from daemon.store.schema import MIGRATIONS

if TYPE_CHECKING:
    import asyncpg

__all__ = ["LOCK_KEY", "LOCK_NAME", "VERSION_TABLE", "migrate_postgres", "postgres_status"]

#: Where PostgreSQL records the migrations applied.
VERSION_TABLE = "sluicegate_schema_migrations"

#: The name :data:`LOCK_KEY` is derived from.
LOCK_NAME = "sluicegate.schema"

#: The advisory lock every migration holds: the first 8 bytes of
#: SHA-256(:data:`LOCK_NAME`) as a signed 64-bit integer. Advisory keys are one
#: space per database shared by every application using it, so a hash of a
#: name, not a small number. Fixed for good (a test pins it): a daemon of the
#: next release must exclude one of this release during a rolling upgrade.
LOCK_KEY = int.from_bytes(hashlib.sha256(LOCK_NAME.encode()).digest()[:8], "big", signed=True)

_CREATE_VERSION_TABLE = f"""CREATE TABLE {VERSION_TABLE} (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
# to_regclass resolves the name through search_path as the statements do, and
# is NULL (no error, which would abort the transaction) when there is none.
_VERSION_TABLE_EXISTS = f"SELECT to_regclass('{VERSION_TABLE}') IS NOT NULL"
_VERSION = f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}"
_APPLIED = f"SELECT version, name, applied_at FROM {VERSION_TABLE} ORDER BY version"
_RECORD = f"INSERT INTO {VERSION_TABLE} (version, name) VALUES ($1, $2)"


async def migrate_postgres(
    conn: asyncpg.Connection, *, migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Apply every migration past the database's version; return the version reached.

    Each migration runs in its own transaction holding :data:`LOCK_KEY`, which
    reads the version after the lock is granted: daemons migrating together
    apply each migration once. A database a newer build migrated raises
    :class:`~daemon.store.migration.SchemaTooNew` naming both versions, having
    changed nothing. ``migrations`` is for tests; the daemon uses the default.
    """
    if conn.is_in_transaction():
        raise ValueError("migrate_postgres commits each migration: pass a connection idle")
    while True:
        async with conn.transaction(isolation="read_committed"):
            await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
            # Created under the lock: CREATE TABLE IF NOT EXISTS run by two
            # sessions at once can still fail on the type it creates.
            if not await conn.fetchval(_VERSION_TABLE_EXISTS):
                await conn.execute(_CREATE_VERSION_TABLE)
            version: int = await conn.fetchval(_VERSION)
            refuse_newer(version, len(migrations))
            if version == len(migrations):
                return version
            migration = migrations[version]
            for statement in migration.postgres:
                await conn.execute(statement)
            await conn.execute(_RECORD, migration.version, migration.name)


async def postgres_status(
    conn: asyncpg.Connection, *, migrations: Sequence[Migration] = MIGRATIONS
) -> SchemaStatus:
    """The schema of a PostgreSQL database against this build's migrations.

    Reads only: no lock, and a database never migrated (no version table) is
    reported at version 0 without creating the table.
    """
    applied: tuple[Step, ...] = ()
    if await conn.fetchval(_VERSION_TABLE_EXISTS):
        rows = await conn.fetch(_APPLIED)
        applied = tuple(Step(r["version"], r["name"], r["applied_at"]) for r in rows)
    current = applied[-1].version if applied else 0
    return SchemaStatus(
        dialect="postgresql",
        current=current,
        latest=len(migrations),
        applied=applied,
        pending=pending_steps(migrations, current),
    )
