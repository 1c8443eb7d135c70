"""PostgreSQL: a role held by one daemon at a time, as a session advisory lock.

A lease row (``leader``) lapses only after its term, so a leader killed with
``kill -9`` keeps the role for up to three ticks. A session-level
``pg_try_advisory_lock`` is released by the server the moment the holder's
connection closes, and a dead process's connection closes with it: another
daemon takes the role at its next tick. The lock lives on a connection of its
own (never the pool's, whose connections move between tasks); each tick the
holder checks that connection still answers, and a daemon that lost it (the
database restarted) stops leading until it takes the lock again.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import trio_asyncio

log = logging.getLogger("sluicegate.store")


def role_key(role: str) -> int:
    """The advisory lock key of a role: stable across daemons and builds."""
    return 0x5_1CE_0000_0000 + zlib.crc32(f"sluicegate:{role}".encode())


class AdvisoryRole:
    """One role's advisory lock, taken and kept by :meth:`hold` at each tick."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], role: str) -> None:
        self._connect = connect  # a coroutine function: a new asyncpg connection
        self.role = role
        self._key = role_key(role)
        self._conn: Any = None
        self.held = False

    async def hold(self) -> bool:
        """Take the role if it is free, or confirm we still hold it; False when
        another daemon holds it or the database cannot be reached."""
        try:
            if self._conn is None or self._conn.is_closed():
                self.held = False
                self._conn = await trio_asyncio.aio_as_trio(self._connect)()
            if self.held:
                await trio_asyncio.aio_as_trio(self._conn.fetchval)("SELECT 1")
            else:
                self.held = bool(await trio_asyncio.aio_as_trio(self._conn.fetchval)(
                    "SELECT pg_try_advisory_lock($1)", self._key))  # fmt: skip
                if self.held:
                    log.info("this daemon now holds the %s role", self.role)
        except Exception as exc:  # the database away: not leading until it is back
            if self.held:
                log.warning("lost the %s role with its connection: %r", self.role, exc)
            self.held = False
            await self.close()
        return self.held

    async def close(self) -> None:
        """Let the role go (the server releases the lock with the connection)."""
        conn, self._conn = self._conn, None
        self.held = False
        if conn is not None and not conn.is_closed():
            try:
                await trio_asyncio.aio_as_trio(conn.close)(timeout=2)
            except Exception:  # already gone: the server has released the lock
                conn.terminate()
