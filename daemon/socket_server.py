"""The unix-socket transport: a thin Trio shell around :mod:`daemon.framing`.

Each connection has a reader (frames in, one task per request, so pipelined
requests share a group commit and a waiting claim never blocks the ones behind
it) and a writer draining an outbox. A client that stops reading while its
answers pile up past ``daemon.max_send_buffer_bytes`` is cut off; nothing it
does can stall another connection. Every exception of a connection ends that
connection only.
"""

from __future__ import annotations

import errno
import logging
import os
import socket as stdsocket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from actors.errors import Refused, internal_error
from daemon.dispatch import dispatch
from daemon.framing import (
    BadFrame,
    FrameTooLarge,
    LineFramer,
    Request,
    encode_error,
    encode_event,
    encode_ok,
)

if TYPE_CHECKING:
    from daemon.core import Core

log = logging.getLogger("sluicegate.socket")
MAX_IN_FLIGHT = 4096  # requests of one connection before its reads pause
RECEIVE_BYTES = 65536
CLOSE_GRACE_S = 5.0  # how long a connection closing on a fatal frame finishes its requests


class Connection:
    """One client connection."""

    def __init__(self, core: Core, stream: trio.SocketStream) -> None:
        self.core = core
        self.stream = stream
        self.session = core.auth.new_session()
        self.framer = LineFramer(core.config.daemon.max_frame_bytes)
        self.outbox: list[bytes] = []
        self.outbox_bytes = 0
        self.limit = core.config.daemon.max_send_buffer_bytes
        self.fd = stream.socket.fileno()
        self.sending = False
        self.has_output = trio.Event()
        self.drained = trio.Event()  # set while nothing is queued or being sent
        self.drained.set()
        self.in_flight = 0
        self.idle = trio.Event()
        self.idle.set()
        self.slots = trio.Semaphore(MAX_IN_FLIGHT)
        self.waiting: set[trio.CancelScope] = set()  # claims waiting for work
        self.scope = trio.CancelScope()
        self.closing = False

    async def serve(self) -> None:
        """Serve until the client leaves, misbehaves, or the daemon stops."""
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write_loop)
                    await self._read_loop(nursery)
                    await self._flush_and_close()
                    nursery.cancel_scope.cancel()
        except Exception as exc:  # a bug in one connection ends it, never the listener
            log.warning("connection ended by an error: %r", exc)
        finally:
            self.core.router.unsubscribe(self)
            # After close the fd number may be reused by another client: no
            # direct write may ever reach it again.
            self.fd = -1
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        while not self.closing:
            try:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            for event in self.framer.feed(data):
                if isinstance(event, Request):
                    # acquire() is a checkpoint; only block (pausing reads) when full,
                    # so the requests of one read start in one round and commit together.
                    try:
                        self.slots.acquire_nowait()
                    except trio.WouldBlock:
                        await self.slots.acquire()
                    self._begin()
                    nursery.start_soon(self._handle, event)
                elif isinstance(event, BadFrame):
                    self.send(encode_error(None, Refused("bad_frame", event.message)))
                elif isinstance(event, FrameTooLarge):
                    self.send(
                        encode_error(
                            None,
                            Refused(
                                "frame_too_large",
                                f"frame exceeds max_frame_bytes {event.limit}",
                                limit="max_frame_bytes",
                                max=event.limit,
                            ),
                        )
                    )
                    self.closing = True
                    return

    def _begin(self) -> None:
        self.in_flight += 1
        if self.idle.is_set():
            self.idle = trio.Event()

    def _end(self) -> None:
        self.in_flight -= 1
        self.slots.release()
        if self.in_flight == 0:
            self.idle.set()

    async def _handle(self, request: Request) -> None:
        scope = trio.CancelScope()
        waits = request.op == "claim_next" and request.args.get("wait_ms")
        if waits:
            self.waiting.add(scope)
        try:
            with scope:
                result = await dispatch(
                    self.core,
                    self.session,
                    request.op,
                    request.args,
                    events=self.send_event,
                    owner=self,
                )
            if scope.cancelled_caught:
                return  # the client hung up while this claim waited
        except Refused as refused:
            self.send(encode_error(request.id, refused))
            if refused.code == "unauthenticated" and request.op == "hello":
                # A wrong token ends the connection, once the answer is out.
                self.closing = True
                with trio.move_on_after(1):
                    await self.drained.wait()
                self.scope.cancel()
        except Exception as exc:
            self.send(encode_error(request.id, internal_error(exc)))
        else:
            self.send(encode_ok(request.id, result))
        finally:
            if waits:
                self.waiting.discard(scope)
            self._end()

    def send_event(self, event: dict[str, Any]) -> None:
        """Push a server event (a doorbell) to this client."""
        self.send(encode_event(event))

    def send(self, frame: bytes) -> None:
        """Queue ``frame``; cut the client off if it lets too much pile up."""
        if self.scope.cancel_called or self.fd < 0:
            return
        if not self.outbox and not self.sending:
            # Nothing queued ahead of it: try the non-blocking socket at once and
            # save the writer task a scheduling round. What does not fit is queued.
            try:
                sent = os.write(self.fd, frame)
            except BlockingIOError:
                sent = 0
            except OSError:
                self.scope.cancel()
                return
            if sent == len(frame):
                return
            frame = frame[sent:]
        self.outbox.append(frame)
        self.outbox_bytes += len(frame)
        if self.outbox_bytes > self.limit:
            log.warning("client not reading: %d bytes unsent; closing it", self.outbox_bytes)
            self.outbox.clear()
            self.scope.cancel()
            return
        if self.drained.is_set():
            self.drained = trio.Event()
        self.has_output.set()

    async def _write_loop(self) -> None:
        while True:
            await self.has_output.wait()
            self.has_output = trio.Event()
            while self.outbox:
                chunk = b"".join(self.outbox)
                self.outbox.clear()
                self.outbox_bytes = 0
                self.sending = True
                try:
                    await self.stream.send_all(chunk)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.scope.cancel()
                    return
                finally:
                    self.sending = False
            self.drained.set()

    async def _flush_and_close(self) -> None:
        """The client is done sending: finish its requests, then flush."""
        if self.closing:
            # A fatal frame: requests before it are answered (within a bound),
            # then the refusal, then the connection closes.
            with trio.move_on_after(CLOSE_GRACE_S):
                await self.idle.wait()
                await self.drained.wait()
            return
        # Nobody is left to hand a waiting claim's jobs to: end those waits now
        # (a claim not yet committed is withdrawn), so no job is claimed for a
        # client that is gone. Other requests finish and are flushed.
        for scope in list(self.waiting):
            scope.cancel()
        await self.idle.wait()
        await self.drained.wait()

    async def drain(self) -> None:
        """Wait until this connection has no request in flight and all is sent."""
        await self.idle.wait()
        await self.drained.wait()


class SocketServer:
    """Accepts connections on the unix socket."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.connections: set[Connection] = set()
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
        conn = Connection(self.core, stream)
        self.connections.add(conn)
        try:
            await conn.serve()
        finally:
            self.connections.discard(conn)

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
