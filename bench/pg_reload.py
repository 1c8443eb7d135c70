"""What one cluster reload of the limits costs on PostgreSQL, with and without JIT.

Every write transaction of a daemon that follows another daemon's write reads
every limit back (``daemon.store.epoch``, one statement) while it holds the
cluster's epoch lock, so this statement's time is paid by every daemon's
writes. Makes a scratch database (dropped at the end) with one stacked-window
policy and ``--rows`` usage rows, and times the statement both ways::

    .venv/bin/python bench/pg_reload.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres]

Prints ms per reload; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import asyncpg

from daemon.store import epoch
from daemon.store.pg_schema import migrate_postgres
from daemon.store.postgres import postgres_text

POLICY = '{"max_in_flight":null,"windows":[]}'


async def _time(dsn: str, jit: str, repeat: int) -> float:
    conn = await asyncpg.connect(dsn, server_settings={"jit": jit})
    try:
        text = postgres_text(epoch._LIMITS_POSTGRES)
        args = epoch._key_range(epoch.RATE_PREFIX)
        await conn.fetchrow(text, *args)
        started = time.perf_counter()
        for _ in range(repeat):
            await conn.fetchrow(text, *args)
        return (time.perf_counter() - started) / repeat * 1000
    finally:
        await conn.close()


async def main(admin_dsn: str, rows: int, repeat: int) -> None:
    name = f"sluicegate_reload_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f"CREATE DATABASE {name}")
    dsn = admin_dsn.rsplit("/", 1)[0] + "/" + name
    try:
        conn = await asyncpg.connect(dsn)
        await migrate_postgres(conn)
        await conn.execute(
            "INSERT INTO policies VALUES ('default', 'q', $1, 1, 1, 'a', 'a', 'api')", POLICY
        )
        await conn.executemany(
            "INSERT INTO policy_usage (namespace, queue, window_key, window_start, used) "
            "VALUES ('default', 'q', 'second', $1, 3)",
            [(1000 * i,) for i in range(rows)],
        )
        await conn.close()
        for jit in ("on", "off"):
            print(f"jit={jit}: {await _time(dsn, jit, repeat):.2f} ms per reload "
                  f"({rows} usage rows)")  # fmt: skip
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=20)
    a = p.parse_args()
    asyncio.run(main(a.dsn, a.rows, a.repeat))
