"""The unix-socket listener: accepts connections (:mod:`daemon.transport.connection`),
flushes their answers after each commit, and drains them on SIGTERM; plus
binding the socket file safely, or taking it from systemd.

Connections are capped (``daemon.max_connections``, by default derived from the
open-file limit with a reserve kept for the store and HTTP): over the cap a new
connection is answered one ``unavailable`` line and closed, so a flood of idle
clients never takes the descriptors the daemon itself needs. Reaching the cap
and clearing it are one log line each per episode. Should ``accept`` still run
out of descriptors (other processes' fault, or a cap set too high), accepts
back off until a connection closes, with one log line per episode and no
traceback.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as stdsocket
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from actors.errors import Refused
from daemon.startup import StartupError, reason
from daemon.transport.connection import Connection
from daemon.transport.framing import encode_error
from daemon.transport.idle import IdleSweeper

if TYPE_CHECKING:
    from daemon.services import Services

log = logging.getLogger("sluicegate.socket")
#: accept() errors that mean "no descriptor or memory for now", not a broken listener.
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Backoff of accepts that ran out of descriptors: first wait, longest wait (s).
BACKOFF_S = (0.05, 1.0)
TOO_MANY = encode_error(None, Refused("unavailable", "too many connections"))


@attrs.frozen
class ConnectionStats:
    """A snapshot of the socket's connections."""

    open: int
    max_connections: int
    refused_total: int


class SocketServer:
    """Accepts connections on the unix socket, at most ``max_connections`` at once."""

    def __init__(self, core: Services, max_connections: int) -> None:
        self.core = core
        self.max_connections = max_connections
        # The cap clears (one log line) once this few are left, so a flood
        # hovering at the cap is one episode, not one line per close.
        self.resume_at = max_connections - max(1, max_connections // 10)
        self.connections: set[Connection] = set()
        self.open = 0  # accepted and not yet closed (counted before their task starts)
        self.dirty: set[Connection] = set()
        # Answers settled by a commit go out right after it, one send each.
        core.writer.after_commit.append(self.flush_dirty)
        #: Closes connections idle for ``daemon.idle_timeout`` (a restart-only key).
        self.sweeper = IdleSweeper(core.config.daemon.idle_timeout / 1000)
        self._accepting = trio.CancelScope()
        self._conn_scope: trio.CancelScope | None = None
        self._freed = trio.Event()  # set when a connection closes
        self._capped = False
        self._refused = 0  # refused in the current episode
        self._refused_total = 0
        core.metrics.registry.register(_ConnectionMetrics(self))

    def statistics(self) -> ConnectionStats:
        """Open connections, the cap, and how many were refused over it."""
        return ConnectionStats(self.open, self.max_connections, self._refused_total)

    async def serve(
        self,
        listener: trio.SocketListener,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve ``listener`` until cancelled or drained."""
        async with trio.open_nursery() as nursery:
            self._conn_scope = nursery.cancel_scope
            await nursery.start(self.sweeper.run)
            task_status.started()
            with self._accepting:
                await self._accept_loop(listener, nursery)
            await listener.aclose()
            # Stay until the connections are drained and cancelled by drain().
            await trio.sleep_forever()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        failures = 0
        delay = BACKOFF_S[0]
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                if failures == 0:
                    log.error("accept failed: %s; pausing accepts", reason(exc))
                failures += 1
                # Wait for a connection of ours to close, or try again later (a
                # descriptor may free elsewhere): no log line and no busy loop.
                freed = self._freed = trio.Event()
                with trio.move_on_after(delay):
                    await freed.wait()
                delay = min(delay * 2, BACKOFF_S[1])
                continue
            if failures:
                log.warning("accepts resumed after %d failed attempts", failures)
                failures, delay = 0, BACKOFF_S[0]
            if self.open >= self.max_connections:
                self._refuse(stream)
                continue
            self.open += 1
            nursery.start_soon(self._run_connection, stream)

    def _refuse(self, stream: trio.SocketStream) -> None:
        """Over the cap: one ``unavailable`` line (if the socket takes it), then close."""
        if not self._capped:
            self._capped = True
            self._refused = 0
            log.warning(
                "connection cap reached: %d open (daemon.max_connections); "
                "refusing new connections",
                self.open,
            )
        self._refused += 1
        self._refused_total += 1
        sock = stream.socket
        try:
            os.write(sock.fileno(), TOO_MANY)  # non-blocking: a fresh socket takes it
        except OSError:
            pass
        sock.close()

    async def _run_connection(self, stream: trio.SocketStream) -> None:
        try:
            conn = Connection(self.core, stream, self.dirty, self.sweeper)
            self.connections.add(conn)
            try:
                await conn.serve()
            finally:
                self.connections.discard(conn)
        finally:
            self.open -= 1
            self._freed.set()
            if self._capped and self.open <= self.resume_at:
                self._capped = False
                log.warning(
                    "connection cap cleared: %d open; %d connections refused",
                    self.open,
                    self._refused,
                )

    def flush_dirty(self) -> None:
        """Flush every connection with queued answers."""
        while self.dirty:
            self.dirty.pop().flush()

    async def drain(self, grace_s: float) -> None:
        """Stop accepting; let requests in flight finish within ``grace_s``; close."""
        self._accepting.cancel()
        with trio.move_on_after(grace_s):
            for conn in list(self.connections):
                await conn.drain()
        if self._conn_scope is not None:
            self._conn_scope.cancel()


class _ConnectionMetrics(Collector):
    """``sluicegate_socket_connections{,_max,_refused_total}`` from :meth:`statistics`."""

    def __init__(self, server: SocketServer) -> None:
        self.server = server

    def collect(self):  # type: ignore[no-untyped-def]
        stats = self.server.statistics()
        yield GaugeMetricFamily(
            "sluicegate_socket_connections", "Open socket connections.", value=stats.open
        )
        yield GaugeMetricFamily(
            "sluicegate_socket_connections_max",
            "The socket's connection cap (daemon.max_connections).",
            value=stats.max_connections,
        )
        yield CounterMetricFamily(
            "sluicegate_socket_connections_refused",
            "Socket connections refused over the cap.",
            value=stats.refused_total,
        )


@attrs.frozen
class SocketFile:
    """The socket file this process bound: removed at stop only if it is still ours.

    Another daemon may have bound the same path after ours was deleted; its
    file has another inode, and removing it would leave that daemon unreachable.
    """

    path: Path
    dev: int
    ino: int

    def is_ours(self) -> bool:
        try:
            st = os.lstat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.dev, self.ino)

    def remove(self) -> bool:
        """Unlink the file if it is still the one we bound; True if removed."""
        if not self.is_ours():
            return False
        try:
            self.path.unlink()
        except OSError:
            return False
        return True


def bind_unix_socket(path: Path, mode: int = 0o660) -> tuple[trio.SocketListener, SocketFile]:
    """Create the socket file with ``mode`` (no window with looser permissions).

    A stale file left by a crash is replaced; a live daemon on it is a
    :class:`StartupError`, as is a path that cannot be bound.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create socket directory {path.parent}: {reason(exc)}") from exc
    if path.exists() or path.is_symlink():
        probe = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            try:
                path.unlink()
            except OSError as exc:
                raise StartupError(f"cannot replace socket {path}: {reason(exc)}") from exc
        else:
            raise StartupError(f"socket {path} is in use by a live daemon")
        finally:
            probe.close()
    sock = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    old = os.umask(0o777 & ~mode)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot bind socket {path}: {reason(exc)}") from exc
    finally:
        os.umask(old)
    os.chmod(path, mode)
    st = os.lstat(path)
    sock.listen(1024)
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    return listener, SocketFile(path, st.st_dev, st.st_ino)


def listener_from_fd(fd: int) -> trio.SocketListener:
    """A listener on an inherited socket (systemd socket activation)."""
    sock = stdsocket.socket(fileno=fd)
    sock.setblocking(False)
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))
