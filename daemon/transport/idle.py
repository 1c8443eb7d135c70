"""Idle connections: closed after ``daemon.idle_timeout`` with nothing to do.

One timer for every connection, not a deadline per connection: a request
that moves a cancel scope's deadline pays for trio's deadline bookkeeping
twice (lifted when the request starts, set when it ends), and a client that
makes one request at a time pays it on every request. Here a connection that
becomes idle is appended to an insertion-ordered dict, one that gets work is
removed from it (a dict operation each), and the sweeper sleeps until the
oldest idle connection's instant, closes what is due, and sleeps again. It
never polls: with no idle connection it waits for one.

A connection is idle when it has no request in flight, no waiting claim and
no subscription (a subscriber waits for doorbells: it is never idle).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from actors.clock import monotonic_reader


class IdleSweeper:
    """Closes connections that stay idle for ``timeout_s`` (0: never)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._now = monotonic_reader()  # read at every request's end
        #: Idle connections' close callbacks, oldest first, with when they went idle.
        self._idle: dict[object, tuple[float, Callable[[], None]]] = {}
        self._first = trio.Event()

    def idle(self, conn: object, close: Callable[[], None]) -> None:
        """``conn`` has nothing to do from now: ``close`` it unless it gets work."""
        if self.timeout_s <= 0:
            return
        self._idle.pop(conn, None)  # to the end: the order is the order of idling
        self._idle[conn] = (self._now(), close)
        if len(self._idle) == 1:
            self._first.set()

    def busy(self, conn: object) -> None:
        """``conn`` has work (or is gone): not idle."""
        self._idle.pop(conn, None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Close idle connections as they fall due, until cancelled."""
        task_status.started()
        while True:
            if not self._idle:
                self._first = trio.Event()
                await self._first.wait()
                continue
            conn, (since, close) = next(iter(self._idle.items()))
            due = since + self.timeout_s
            if self._now() < due:
                # Woken early for nothing if ``conn`` gets work meanwhile: at most
                # once per connection per timeout.
                await trio.sleep_until(due)
                continue
            del self._idle[conn]
            close()
