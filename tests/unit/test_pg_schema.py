"""daemon/store/pg_schema.py: the migration list applied to PostgreSQL.

Each test gets a fresh database (``pg_dsn``, tests/postgres.py); with no server
the tests skip, except under ``CI=true``, where they fail. The tests run asyncpg
under ``asyncio.run``, as the daemon will under trio-asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import sqlite_utils

from daemon.store import schema
from daemon.store.migration import Migration, SchemaTooNew
from daemon.store.pg_schema import (
    _CREATE_VERSION_TABLE,
    LOCK_KEY,
    VERSION_TABLE,
    migrate_postgres,
    postgres_status,
)
from tests.postgres import run_asyncio

LATEST = len(schema.MIGRATIONS)
NAMES = [m.name for m in schema.MIGRATIONS]


@contextlib.asynccontextmanager
async def connected(dsn: str) -> AsyncIterator[Any]:
    conn = await asyncpg.connect(dsn, timeout=2)
    try:
        yield conn
    finally:
        await conn.close()


async def _version_rows(conn: Any) -> list[tuple[Any, ...]]:
    rows = await conn.fetch(f"SELECT version, name, applied_at FROM {VERSION_TABLE} ORDER BY 1")
    return [tuple(r) for r in rows]


def _predicate(where: str | None) -> str | None:
    """A partial index's condition, SQLite's text and PostgreSQL's deparsed
    form (casts, parentheses, ``= ANY (ARRAY[...])``) made comparable."""
    if where is None:
        return None
    where = re.sub(r"= ANY \(ARRAY\[(.*?)\]\)", r"IN (\1)", where.replace("::text", ""))
    return re.sub(r"[\s()]", "", where)


_PG_TYPES = {"INTEGER": "bigint", "TEXT": "text"}


def _sqlite_catalog() -> dict[str, Any]:
    """Tables (columns: name, type, NOT NULL, default), primary keys and
    indexes (table, columns, unique, condition) of a migrated SQLite database."""
    db = sqlite_utils.Database(sqlite3.connect(":memory:", isolation_level=None))
    try:
        schema.migrate(db)
        tables, keys, indexes = {}, {}, {}
        for table in db.table_names():
            info = db.execute(f"PRAGMA table_info({table})").fetchall()
            # A SQLite TEXT PRIMARY KEY may hold NULL; PostgreSQL's never does.
            tables[table] = [(n, _PG_TYPES[t], bool(nn or pk), d) for _, n, t, nn, d, pk in info]
            keys[table] = tuple(r[1] for r in sorted(info, key=lambda r: r[5]) if r[5])
        for name, table, sql in db.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql NOT NULL"
        ):
            columns = tuple(r[2] for r in db.execute(f"PRAGMA index_info({name})"))
            where = sql.split(" WHERE ", 1)[1] if " WHERE " in sql else None
            indexes[name] = (table, columns, sql.startswith("CREATE UNIQUE"), _predicate(where))
        return {"tables": tables, "keys": keys, "indexes": indexes}
    finally:
        db.conn.close()


_INDEXDEF = re.compile(r"CREATE (UNIQUE )?INDEX \S+ ON \S+ USING btree \(([^)]*)\)(?: WHERE (.*))?")


async def _pg_catalog(conn: Any) -> dict[str, Any]:
    """The same, read from information_schema and pg_indexes (the version table aside)."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    for r in await conn.fetch(
        "SELECT table_name, column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name <> $1 ORDER BY table_name, ordinal_position",
        VERSION_TABLE,
    ):
        tables.setdefault(r[0], []).append((r[1], r[2], r[3] == "NO", r[4]))
    keys, key_indexes = {}, set()
    for table, constraint, columns in await conn.fetch(
        "SELECT tc.table_name, tc.constraint_name, "
        "array_agg(k.column_name::text ORDER BY k.ordinal_position) "
        "FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage k "
        "USING (constraint_schema, constraint_name, table_name) "
        "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema() "
        "GROUP BY 1, 2"
    ):
        key_indexes.add(constraint)
        if table != VERSION_TABLE:
            keys[table] = tuple(columns)
    indexes = {}
    for name, table, indexdef in await conn.fetch(
        "SELECT indexname, tablename, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
    ):
        if name in key_indexes:
            continue
        unique, columns, where = _INDEXDEF.fullmatch(indexdef).groups()
        indexes[name] = (table, tuple(columns.split(", ")), bool(unique), _predicate(where))
    return {"tables": tables, "keys": keys, "indexes": indexes}


def test_a_fresh_database_gets_the_sqlite_schema_name_for_name(pg_dsn):
    async def main() -> tuple[int, dict[str, Any], set[Any]]:
        async with connected(pg_dsn) as conn:
            version = await migrate_postgres(conn)
            collations = await conn.fetch(
                "SELECT DISTINCT collation_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND data_type = 'text' "
                "AND table_name <> $1",
                VERSION_TABLE,
            )
            return version, await _pg_catalog(conn), {r[0] for r in collations}

    version, catalog, collations = run_asyncio(main())
    assert version == LATEST
    expected = _sqlite_catalog()
    assert catalog["tables"] == expected["tables"]
    assert catalog["keys"] == expected["keys"]
    assert catalog["indexes"] == expected["indexes"]
    assert {"ix_jobs_ready", "ux_jobs_unique", "ix_usage_unrolled"} <= set(catalog["indexes"])
    # Text compares as bytes, as SQLite's BINARY does, whatever the server's locale.
    assert collations == {"C"}


def test_migrating_again_is_a_no_op(pg_dsn):
    async def main() -> None:
        async with connected(pg_dsn) as conn:
            await migrate_postgres(conn)
            rows, catalog = await _version_rows(conn), await _pg_catalog(conn)
            await conn.execute("INSERT INTO settings (key, value, updated_at) VALUES ('k', 'v', 1)")
            assert await migrate_postgres(conn) == LATEST
            assert await _version_rows(conn) == rows
            assert await _pg_catalog(conn) == catalog
            assert await conn.fetchval("SELECT value FROM settings") == "v"
            assert not conn.is_in_transaction()

    run_asyncio(main())


def test_two_daemons_starting_together_migrate_once(pg_dsn):
    async def main() -> None:
        async with connected(pg_dsn) as a, connected(pg_dsn) as b:
            assert await asyncio.gather(migrate_postgres(a), migrate_postgres(b)) == [LATEST] * 2
            rows = await a.fetch(f"SELECT version, name FROM {VERSION_TABLE} ORDER BY version")
            assert [tuple(r) for r in rows] == list(enumerate(NAMES, start=1))

    run_asyncio(main())


def test_a_migrator_waits_for_the_lock_then_reads_the_version_again(pg_dsn):
    async def main() -> None:
        async with connected(pg_dsn) as holder, connected(pg_dsn) as daemon:
            async with holder.transaction():
                await holder.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
                waiting = asyncio.create_task(migrate_postgres(daemon))
                # Until the daemon's lock request is queued: each query is a round
                # trip, so this waits on the server's lock table, not on a timer.
                async with asyncio.timeout(10):
                    while not await holder.fetchval(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    ):
                        pass
                assert not waiting.done()
                # Meanwhile the holder migrates, as a first daemon would.
                await holder.execute(_CREATE_VERSION_TABLE)
                for m in schema.MIGRATIONS[:2]:
                    for statement in m.postgres:
                        await holder.execute(statement)
                    await holder.execute(
                        f"INSERT INTO {VERSION_TABLE} (version, name) VALUES ($1, $2)",
                        m.version, m.name,
                    )  # fmt: skip
            assert await waiting == LATEST  # and did not apply 1 and 2 again
            assert [r[1] for r in await _version_rows(daemon)] == NAMES

    run_asyncio(main())


def test_a_newer_database_is_refused_naming_both_versions(pg_dsn):
    async def main() -> None:
        async with connected(pg_dsn) as conn:
            await migrate_postgres(conn)
            await conn.execute(
                f"INSERT INTO {VERSION_TABLE} (version, name) VALUES ($1, 'from_a_newer_build')",
                LATEST + 1,
            )
            rows = await _version_rows(conn)
            with pytest.raises(SchemaTooNew) as refused:
                await migrate_postgres(conn)
            assert str(refused.value) == (
                f"database schema version {LATEST + 1} is newer than this sluicegate "
                f"({LATEST}); upgrade sluicegate"
            )
            assert await _version_rows(conn) == rows
            assert not conn.is_in_transaction()
            status = await postgres_status(conn)
            assert (status.current, status.latest, status.pending) == (LATEST + 1, LATEST, ())
            assert status.too_new and status.applied[-1].name == "from_a_newer_build"

    run_asyncio(main())


def test_status_before_and_after_migrating(pg_dsn):
    async def main() -> None:
        async with connected(pg_dsn) as conn:
            before = await postgres_status(conn)
            assert (before.dialect, before.current, before.latest) == ("postgresql", 0, LATEST)
            assert before.applied == () and not before.up_to_date
            assert [(s.version, s.name) for s in before.pending] == list(enumerate(NAMES, 1))
            # Status only reads: it created nothing.
            assert await conn.fetchval("SELECT to_regclass($1)", VERSION_TABLE) is None

            await migrate_postgres(conn)
            after = await postgres_status(conn)
            assert (after.current, after.pending) == (LATEST, ())
            assert after.up_to_date and not after.too_new
            assert [s.name for s in after.applied] == NAMES
            times = [s.applied_at for s in after.applied]
            assert all(t is not None and t.tzinfo is not None for t in times)
            assert times == sorted(times)

    run_asyncio(main())


def test_a_failing_migration_leaves_the_previous_version(pg_dsn):
    broken = Migration(
        LATEST + 1, "broken", lambda db: None, ("CREATE TABLE half_made (id int)", "SELECT 1 / 0")
    )

    async def main() -> None:
        async with connected(pg_dsn) as conn:
            with pytest.raises(asyncpg.DivisionByZeroError):
                await migrate_postgres(conn, migrations=[*schema.MIGRATIONS, broken])
            assert (await postgres_status(conn)).current == LATEST
            assert await conn.fetchval("SELECT to_regclass('half_made')") is None
            assert not conn.is_in_transaction()

    run_asyncio(main())


def test_the_lock_key_never_changes():
    # Daemons of two releases must exclude each other during a rolling upgrade.
    assert LOCK_KEY == -6230581943948752540


_INSERT_JOB = (
    "INSERT INTO jobs (id, namespace, queue, type, payload, priority, state, attempts, "
    "max_attempts, lease_ms, ready_at, created_at, updated_at, unique_key, parked_on) "
    "VALUES ($1, 'ns', 'q', 't', '{}', $2, $3, 0, 3, 30000, $4, 0, 0, $5, $6)"
)
_CLAIM = (
    "SELECT id FROM jobs WHERE namespace = $1 AND queue = $2 AND state = 'pending' "
    "AND parked_on IS NULL ORDER BY priority, ready_at, id LIMIT $3 FOR UPDATE SKIP LOCKED"
)
_MARK_RUNNING = (
    "UPDATE jobs SET state = 'running', attempts = attempts + 1, lease = $1, "
    "lease_expires_at = $2 + lease_ms, updated_at = $2 WHERE id = ANY($3::text[])"
)


def test_the_store_s_claim_runs_on_the_schema(pg_dsn):
    async def main() -> None:
        async with connected(pg_dsn) as a, connected(pg_dsn) as b:
            await migrate_postgres(a)
            await a.executemany(_INSERT_JOB, [
                ("j1", 0, "pending", 200, None, None),
                ("j2", 0, "pending", 100, "k", None),
                ("j3", 1, "pending", 0, None, None),
                ("j0", 0, "pending", 200, None, None),
                ("j4", 0, "pending", 0, None, "budget"),  # parked: never a candidate
                ("j5", 0, "scheduled", 0, None, None),
            ])  # fmt: skip
            async with a.transaction():
                assert [r[0] for r in await a.fetch(_CLAIM, "ns", "q", 1)] == ["j2"]
                async with b.transaction():  # another daemon skips the row a holds
                    others = await b.fetch(_CLAIM, "ns", "q", 10)
                    assert [r[0] for r in others] == ["j0", "j1", "j3"]
                    await b.execute("SET LOCAL enable_seqscan = off")
                    plan = "\n".join(
                        r[0] for r in await b.fetch("EXPLAIN " + _CLAIM, "ns", "q", 10)
                    )
                    assert "ix_jobs_ready" in plan
                await a.execute(_MARK_RUNNING, "lease-1", 1000, ["j2"])
            row = await b.fetchrow("SELECT state, attempts, lease, lease_expires_at FROM jobs "
                                   "WHERE id = 'j2'")  # fmt: skip
            assert tuple(row) == ("running", 1, "lease-1", 31000)
            # The unique key holds while its job lives, and frees when it ends.
            with pytest.raises(asyncpg.UniqueViolationError):
                await a.execute(_INSERT_JOB, "j6", 0, "pending", 0, "k", None)
            await a.execute("UPDATE jobs SET state = 'completed' WHERE id = 'j2'")
            await a.execute(_INSERT_JOB, "j6", 0, "pending", 0, "k", None)

    run_asyncio(main())


def test_version_9_keys_each_usage_row_by_its_policys_window(pg_dsn):
    """As tests/unit/test_schema.py's test of the same name, on PostgreSQL."""
    from tests.unit.test_schema import USAGE_AFTER_V9, USAGE_BEFORE_V9

    async def main() -> list[tuple[Any, ...]]:
        async with connected(pg_dsn) as conn:
            await migrate_postgres(conn, migrations=schema.MIGRATIONS[:7])
            for statement in USAGE_BEFORE_V9:
                await conn.execute(statement)
            assert await migrate_postgres(conn) == LATEST
            rows = await conn.fetch("SELECT namespace, queue, window_key, window_start, used "
                                    "FROM policy_usage ORDER BY 1, 2, 3, 4")  # fmt: skip
            return [tuple(r) for r in rows]

    assert run_asyncio(main()) == USAGE_AFTER_V9
