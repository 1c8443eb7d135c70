"""The unix-socket listener: accepts connections (:mod:`daemon.connection`),
flushes their answers after each commit, and drains them on SIGTERM; plus
binding the socket file safely, or taking it from systemd.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as stdsocket
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from daemon.connection import Connection

if TYPE_CHECKING:
    from daemon.core import Core

log = logging.getLogger("sluicegate.socket")


class SocketServer:
    """Accepts connections on the unix socket."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.connections: set[Connection] = set()
        self.dirty: set[Connection] = set()
        # Answers settled by a commit go out right after it, one send each.
        core.writer.after_commit.append(self.flush_dirty)
        self._accepting = trio.CancelScope()
        self._conn_scope: trio.CancelScope | None = None

    async def serve(
        self,
        listener: trio.SocketListener,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve ``listener`` until cancelled or drained."""
        async with trio.open_nursery() as nursery:
            self._conn_scope = nursery.cancel_scope
            task_status.started()
            with self._accepting:
                while True:
                    try:
                        stream = await listener.accept()
                    except OSError as exc:
                        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                            log.error("accept failed: %s; pausing accepts", exc)
                            await trio.sleep(0.1)
                            continue
                        raise
                    nursery.start_soon(self._run_connection, stream)
            await listener.aclose()
            # Stay until the connections are drained and cancelled by drain().
            await trio.sleep_forever()

    async def _run_connection(self, stream: trio.SocketStream) -> None:
        conn = Connection(self.core, stream, self.dirty)
        self.connections.add(conn)
        try:
            await conn.serve()
        finally:
            self.connections.discard(conn)

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


def bind_unix_socket(path: Path, mode: int = 0o660) -> trio.SocketListener:
    """Create the socket file with ``mode`` (no window with looser permissions).

    A stale file left by a crash is replaced; a live daemon on it is an error.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        probe = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()
        else:
            raise RuntimeError(f"another daemon is serving {path}")
        finally:
            probe.close()
    sock = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    old = os.umask(0o777 & ~mode)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, mode)
    sock.listen(1024)
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


def listener_from_fd(fd: int) -> trio.SocketListener:
    """A listener on an inherited socket (systemd socket activation)."""
    sock = stdsocket.socket(fileno=fd)
    sock.setblocking(False)
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))
