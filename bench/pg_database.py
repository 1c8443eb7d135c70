"""A fresh PostgreSQL database for one benchmark phase (``--store postgres``).

The server is ``SLUICEGATE_BENCH_POSTGRES`` (an admin DSN that may create
databases), else the local one the tests use. Each phase gets a database of its
own, created empty and dropped ``WITH (FORCE)`` afterwards, so no phase sees
another's rows or statistics.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

DEFAULT_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def admin_dsn() -> str:
    """The server the benchmark uses."""
    return os.environ.get("SLUICEGATE_BENCH_POSTGRES", DEFAULT_ADMIN)


async def _execute(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new empty database's DSN, dropped on the way out."""
    admin = admin_dsn()
    name = f"sluicegate_bench_{uuid.uuid4().hex[:12]}"
    asyncio.run(_execute(admin, f'CREATE DATABASE "{name}"'))
    try:
        parts = urlsplit(admin)
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        asyncio.run(_execute(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class Session:
    """One connection kept open for many statements (a poll loop), on an asyncio
    runner of its own: the benchmarks are synchronous. Use as a context manager."""

    def __init__(self, dsn: str) -> None:
        self._runner = asyncio.Runner()
        self._conn = self._runner.run(asyncpg.connect(dsn, timeout=5))

    def query(self, statement: str, *args: Any) -> list[tuple[Any, ...]]:
        """The rows of one statement."""
        return [tuple(row) for row in self._runner.run(self._conn.fetch(statement, *args))]

    def close(self) -> None:
        """Close the connection and the runner."""
        try:
            self._runner.run(self._conn.close(timeout=5))
        finally:
            self._runner.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def query(dsn: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows of one statement, on a connection of its own."""
    with Session(dsn) as session:
        return session.query(statement, *args)


def queue_counts(dsn: str, queue: str) -> dict[str, int]:
    """Jobs of ``queue`` by state, as the database has them (what every daemon shares)."""
    rows = query(dsn, "SELECT state, count(*) FROM jobs WHERE queue = $1 GROUP BY state", queue)
    return {state: int(n) for state, n in rows}
