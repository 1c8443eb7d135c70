"""Answers while the store is being opened: a daemon is never silent at start.

A PostgreSQL database that does not answer at start is retried with backoff
(:func:`daemon.store.pg_opening.open_postgres`). The unix socket and the HTTP
sockets are bound before that (a bad address fails the start at once), so
without this module a client's connection would sit in the listen backlog,
unanswered, for as long as the database stays away. Meanwhile:

- every socket frame is answered ``unavailable`` (503) with ``retry_after``, the
  message naming the last attempt's cause: ``the database is unavailable:
  <cause>; the daemon is starting; retry later``;
- every HTTP request is answered 503 with the same error (``Retry-After`` set),
  and ``/healthz`` with ``{"status": "unavailable", "problems": [...],
  "database": {"store", "reachable": false, "host", "name"}}``, as while serving.

Once the store is open, :meth:`Starting.stop` stops accepting, closes the
connections it answered (a client reconnects, as after a restart) and ends its
HTTP server; the daemon's own servers then take the same listeners. Until then
SIGTERM or SIGINT stops the start cleanly, and SIGHUP is logged and ignored
(the daemon's own handlers are installed once it serves).
"""

from __future__ import annotations

import logging
import math
import signal
from typing import Any

import orjson
import trio
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from actors.errors import Refused
from daemon.config import DaemonConfig
from daemon.transport.framing import encode_error
from daemon.transport.http_app import Reply, lifespan, refusal_reply, send_reply
from daemon.transport.http_guard import HttpGuard
from daemon.transport.http_server import hypercorn_config
from daemon.transport.socket_server import TOO_MANY

log = logging.getLogger("sluicegate")

#: Bytes read at most per receive (a line over ``max_frame_bytes`` closes the connection).
_CHUNK = 1 << 16


class Starting:
    """The interim answers of a daemon whose store is not open yet."""

    def __init__(self, cfg: DaemonConfig, max_connections: int, database: dict[str, Any]) -> None:
        """``database``: ``/healthz``'s ``database`` section (its store, host and name)."""
        self.cfg = cfg
        self.max_connections = max_connections
        self.database = {**database, "reachable": False}
        self.cause = "not connected yet"
        self.retry_after = 1
        self._accepting = trio.CancelScope()
        self._connections = trio.CancelScope()
        self._open = 0
        self._http_stop = trio.Event()
        self._done = trio.Event()
        self._watching = trio.CancelScope()
        #: The signal that stopped the start (``SIGTERM``, ``SIGINT``), if one did.
        self.signalled: str | None = None

    def failed(self, cause: str, retry_in_s: float) -> None:
        """An attempt to open the store failed with ``cause``; the next in ``retry_in_s``."""
        self.cause = cause
        self.retry_after = max(1, math.ceil(retry_in_s))

    def refusal(self) -> Refused:
        """What every request is answered now."""
        return Refused(
            "unavailable",
            f"the database is unavailable: {self.cause}; the daemon is starting; retry later",
            retry_after=self.retry_after,
        )

    async def run(
        self,
        listener: trio.SocketListener,
        http_sockets: Sockets | None,
        start: trio.CancelScope,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Answer on ``listener`` (and HTTP on ``http_sockets``) until :meth:`stop`.
        SIGTERM or SIGINT meanwhile cancels ``start`` (the store's opening), noted in
        :attr:`signalled`; SIGHUP is ignored, with a log line."""
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._signals, start)
                if http_sockets is not None:
                    await nursery.start(self._serve_http, http_sockets)
                nursery.start_soon(self._accept, listener)
                task_status.started()
        finally:
            self._done.set()

    async def stop(self) -> None:
        """Stop accepting, close what was accepted, end HTTP; return when all is
        done and the listeners are free for the daemon's own servers (and its
        signal handlers installed in their turn)."""
        self._accepting.cancel()
        self._connections.cancel()
        self._watching.cancel()
        self._http_stop.set()
        await self._done.wait()

    async def _signals(
        self, start: trio.CancelScope, *, task_status: trio.TaskStatus[None]
    ) -> None:
        with self._watching:
            stops = (signal.SIGTERM, signal.SIGINT)
            with trio.open_signal_receiver(*stops, signal.SIGHUP) as signals:
                task_status.started()
                async for signum in signals:
                    if signum in stops:
                        self.signalled = signal.Signals(signum).name
                        start.cancel()
                        return
                    log.warning("SIGHUP ignored: the daemon is starting (no database yet)")

    async def _accept(self, listener: trio.SocketListener) -> None:
        async with trio.open_nursery() as connections:
            self._connections = connections.cancel_scope
            with self._accepting:
                while True:
                    stream = await listener.accept()
                    if self._open >= self.max_connections:
                        await _send_and_close(stream, TOO_MANY)
                        continue
                    self._open += 1
                    connections.start_soon(self._answer, stream)

    async def _answer(self, stream: trio.SocketStream) -> None:
        """Answer each line of ``stream`` ``unavailable``, with the request's id if it has one."""
        limit = self.cfg.max_frame_bytes
        pending = b""
        try:
            while True:
                chunk = await stream.receive_some(_CHUNK)
                if not chunk:
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > limit:
                    return  # no line this long is answered while serving either
                answers = b"".join(
                    encode_error(_request_id(line), self.refusal())
                    for line in lines
                    if line.strip()
                )
                if answers:
                    await stream.send_all(answers)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._open -= 1
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve_http(
        self, sockets: Sockets, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> None:
        config = hypercorn_config(self.cfg, self.cfg.http)
        config.graceful_timeout = 0  # the real server takes the sockets at once
        # Duplicates: hypercorn closes the sockets it served, and the real server's
        # are these same listening sockets.
        copies = Sockets(
            [s.dup() for s in sockets.secure_sockets],
            [s.dup() for s in sockets.insecure_sockets],
            [s.dup() for s in sockets.quic_sockets],
        )
        try:
            await worker_serve(
                wrap_app(HttpGuard(_StartingApp(self)), config.wsgi_max_body_size, None),
                config,
                sockets=copies,
                shutdown_trigger=self._http_stop.wait,
                task_status=task_status,
            )
        finally:
            for sock in (*copies.secure_sockets, *copies.insecure_sockets, *copies.quic_sockets):
                sock.close()


def _request_id(line: bytes) -> Any:
    """The ``id`` of a request line, when it is a JSON object with a usable one."""
    try:
        frame = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    req_id = frame.get("id") if isinstance(frame, dict) else None
    return req_id if isinstance(req_id, (int, str)) and not isinstance(req_id, bool) else None


async def _send_and_close(stream: trio.SocketStream, data: bytes) -> None:
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


class _StartingApp:
    """The ASGI app of the start: 503 for everything, ``/healthz`` in its usual shape."""

    def __init__(self, starting: Starting) -> None:
        self.starting = starting

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        refused = self.starting.refusal()
        reply = refusal_reply(refused)
        if scope.get("path") == "/healthz":
            body = {"status": "unavailable", "problems": [refused.message],
                    "database": self.starting.database}  # fmt: skip
            reply = Reply(503, body, reply.headers)
        reply.headers["cache-control"] = "no-store"
        await send_reply(send, reply)
