"""The PostgreSQL store from synchronous tests: a Trio loop on a thread.

The daemon runs asyncpg under trio-asyncio and reaches it from the store's
synchronous methods through the greenlet bridge (daemon/store/bridge.py).
:class:`PostgresThread` is that arrangement on a thread of its own, holding one
connection, so that a plain test can run a synchronous function there with
``call(fn)``, exactly as the daemon's committer runs a write.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import asyncpg
import outcome
import trio
import trio_asyncio

from daemon.store import bridge
from daemon.store.pg_schema import migrate_postgres

T = TypeVar("T")


class PostgresThread:
    """A Trio thread with trio-asyncio and one asyncpg connection to ``dsn``
    (migrated); :meth:`call` runs a synchronous function there, bridged."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._token: trio.lowlevel.TrioToken | None = None
        self._requests: trio.MemorySendChannel[Any] | None = None
        self.conn: Any = None

    def __enter__(self) -> PostgresThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._requests is not None:
            trio.from_thread.run_sync(self._requests.close, trio_token=self._token)
        self._thread.join(30)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the thread's connection, bridged; its result or error.
        Called from code already running there (a write reading through the
        test's store), it runs at once."""
        if bridge.bridged():
            return fn()
        reply: queue.Queue[outcome.Outcome[T]] = queue.Queue()
        assert self._requests is not None
        trio.from_thread.run_sync(self._requests.send_nowait, (fn, reply), trio_token=self._token)
        return reply.get().unwrap()

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        async with trio_asyncio.open_loop():
            self.conn = await trio_asyncio.aio_as_trio(asyncpg.connect)(self.dsn, timeout=5)
            try:
                await trio_asyncio.aio_as_trio(migrate_postgres)(self.conn)
                # Served by a task of this loop: trio-asyncio's loop is found in
                # its context, which a task started from another thread lacks.
                self._requests, requests = trio.open_memory_channel[Any](100)
                self._token = trio.lowlevel.current_trio_token()
                self._ready.set()
                async for fn, reply in requests:
                    reply.put(await outcome.acapture(bridge.run, self.conn, fn))
            finally:
                await trio_asyncio.aio_as_trio(self.conn.close)()
