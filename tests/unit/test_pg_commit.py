"""The group commit on PostgreSQL: a round of writes is one transaction on a
pooled connection, run through the bridge; reads outside a transaction go
through greenback from any task. A fresh database each (``pg_dsn``, tests/postgres.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import greenback
import pytest
import trio
import trio_asyncio

from actors.errors import Refused
from daemon.store.database import GroupCommit
from daemon.store.postgres import PgConnection, Portals

pytestmark = pytest.mark.postgres


@asynccontextmanager
async def _committer(dsn: str) -> AsyncIterator[tuple[GroupCommit, PgConnection]]:
    portals = Portals()
    trio.lowlevel.add_instrument(portals)
    await greenback.ensure_portal()  # this task was spawned before the instrument
    try:
        async with trio_asyncio.open_loop():
            pool = await trio_asyncio.aio_as_trio(asyncpg.create_pool)(dsn, min_size=1, max_size=4)
            try:
                await trio_asyncio.aio_as_trio(pool.execute)(
                    "CREATE TABLE t (k TEXT PRIMARY KEY, v BIGINT)"
                )
                conn = PgConnection(pool)
                writer = GroupCommit(conn, lambda: 1000, budget_s=60, pool=pool)
                async with trio.open_nursery() as nursery:
                    await nursery.start(writer.run)
                    yield writer, conn
                    nursery.cancel_scope.cancel()
            finally:
                await trio_asyncio.aio_as_trio(pool.close)()
    finally:
        trio.lowlevel.remove_instrument(portals)


def _put(key: str, value: int = 1):
    def fn(tx):
        tx.conn.execute("INSERT INTO t VALUES (?, ?)", (key, value))
        return key

    return fn


def _put_then_refuse(key: str):
    def fn(tx):
        tx.conn.execute("INSERT INTO t VALUES (?, ?)", (key, 0))
        raise Refused("conflict", f"{key} refused")

    return fn


async def _round(writer: GroupCommit, writes: dict[str, object]) -> dict[str, object]:
    """Submit ``writes`` (key -> write) in one round; each one's result or refusal code."""
    outcomes: dict[str, object] = {}

    async def submit(key, fn):
        try:
            outcomes[key] = await writer.write(fn)
        except Refused as exc:
            outcomes[key] = exc.code

    async with trio.open_nursery() as nursery:
        for key, fn in writes.items():
            nursery.start_soon(submit, key, fn)
    return outcomes


async def test_a_round_of_writes_is_one_transaction_and_reads_see_it(pg_dsn):
    async with _committer(pg_dsn) as (writer, conn):
        results: dict[str, str] = {}

        async def put(key):
            results[key] = await writer.write(_put(key))

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(put, f"k{i}")
        assert writer.commits == 1
        assert sorted(results) == [f"k{i}" for i in range(10)]
        # A read outside any transaction, from this task (greenback's portal).
        rows = conn.execute("SELECT k FROM t ORDER BY k").fetchall()
        assert [r[0] for r in rows] == sorted(results)


async def test_a_write_refused_after_changing_rows_is_rolled_back_alone(pg_dsn):
    async with _committer(pg_dsn) as (writer, conn):
        outcomes = await _round(
            writer, {"a": _put("a"), "b": _put_then_refuse("b"), "c": _put("c")}
        )
        assert outcomes == {"a": "a", "b": "conflict", "c": "c"}
        keys = [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k").fetchall()]
        assert keys == ["a", "c"]


async def test_a_statement_error_fails_its_write_alone(pg_dsn):
    async with _committer(pg_dsn) as (writer, conn):
        await writer.write(_put("dup"))
        with pytest.raises(Refused) as refused:
            await writer.write(_put("dup"))  # primary key violation
        assert refused.value.code == "internal"
        assert await writer.write(_put("after")) == "after"
        keys = [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k").fetchall()]
        assert keys == ["after", "dup"]


async def test_a_failed_statement_in_a_shared_transaction_spares_the_other_writes(pg_dsn):
    """PostgreSQL aborts a transaction at its first error: the round runs again
    with a savepoint per write, so the others still commit."""
    async with _committer(pg_dsn) as (writer, conn):
        await writer.write(_put("dup"))
        outcomes = await _round(writer, {"a": _put("a"), "dup": _put("dup"), "c": _put("c")})
        assert outcomes == {"a": "a", "dup": "internal", "c": "c"}
        keys = [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k").fetchall()]
        assert keys == ["a", "c", "dup"]


async def test_a_lost_database_answers_unavailable_and_the_committer_lives_on(pg_dsn):
    async with _committer(pg_dsn) as (writer, conn):
        await writer.write(_put("before"))
        conn.pool.terminate()  # every connection gone, no new one to be had
        for key in ("x", "y"):  # the committer is still there to answer each
            with pytest.raises(Refused) as refused:
                await writer.write(_put(key))
            assert refused.value.code == "unavailable"
            assert "database is unavailable" in refused.value.message
        assert writer.health.failing is not None
