"""daemon/store/pg_stats.py: the daemon analyzes ``jobs`` when enough changed, so
claims are planned as index scans (a fresh database each, tests/postgres.py)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
import trio_asyncio

from daemon.store import pg_stats
from daemon.store.pg_stats import JobStatistics

pytestmark = pytest.mark.postgres


async def _insert(pool, first: int, last: int) -> None:
    """Rows inserted, and their count in the statistics views (a backend reports
    its counts when idle, at most once a second, unless asked to at once)."""
    async with pool.acquire() as conn:  # an asyncio context: run on the loop below
        await conn.execute(f"INSERT INTO jobs SELECT generate_series({first}, {last})")
        await conn.execute("SELECT pg_stat_force_next_flush()")
    for _ in range(200):  # waits for a condition, at most 2 s
        row = await pool.fetchrow(
            "SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'jobs'")  # fmt: skip
        if row is not None and row[0] >= last:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the insert never showed in pg_stat_user_tables")


async def _analyzed(pool) -> int:
    row = await trio_asyncio.aio_as_trio(pool.fetchrow)(
        "SELECT analyze_count + autoanalyze_count FROM pg_stat_user_tables WHERE relname = 'jobs'"
    )
    return int(row[0])


async def test_jobs_are_analyzed_once_enough_changed_and_not_before(pg_dsn):
    async with trio_asyncio.open_loop():
        pool = await trio_asyncio.aio_as_trio(asyncpg.create_pool)(pg_dsn, min_size=1, max_size=2)
        try:
            run = trio_asyncio.aio_as_trio(pool.execute)
            await run("CREATE TABLE jobs (id bigint PRIMARY KEY)")
            stats = JobStatistics(pool)
            await trio_asyncio.aio_as_trio(_insert)(pool, 1, 100)
            await stats._check()  # 100 changed: under MIN_CHANGED, left to autovacuum
            assert stats.analyzed == 0
            await trio_asyncio.aio_as_trio(_insert)(pool, 101, 200 + pg_stats.MIN_CHANGED)
            await stats._check()
            assert stats.analyzed == 1 and await _analyzed(pool) >= 1
            await stats._check()  # nothing changed since: no second ANALYZE
            assert stats.analyzed == 1
        finally:
            await trio_asyncio.aio_as_trio(pool.close)()


def test_the_committer_wakes_it_every_so_many_writes():
    stats = JobStatistics(pool=None)
    stats.committed(pg_stats.EVERY_WRITES - 1)
    assert not stats._wake.is_set()
    stats.committed(pg_stats.EVERY_WRITES)
    assert stats._wake.is_set()
