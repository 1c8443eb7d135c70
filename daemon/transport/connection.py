"""One client connection of the unix socket: a thin Trio shell around
:mod:`daemon.transport.framing`.

A connection has one reader task and one writer task, and no task per request:
the reader plans each request at once (:func:`daemon.dispatch.prepare`) and
submits its write to the group commit with a callback that encodes the answer.
Pipelined requests thus share a transaction, and answers are flushed once per
connection per commit (or per read, for answers that need no write). Only an
answer that has to wait (a ``claim_next`` with ``wait_ms`` that found nothing)
gets a task, so it never blocks the requests behind it.

A client that stops reading while its answers pile up past
``daemon.max_send_buffer_bytes`` is cut off; nothing it does can stall another
connection. Every exception of a connection ends that connection only.

A connection with no request in flight, no waiting claim and no subscription
for ``daemon.idle_timeout`` is closed by the server's one idle sweeper
(:mod:`daemon.transport.idle`): told when the last request ends and when the
next one starts, a dict operation each.
"""

from __future__ import annotations

import logging
import os
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from actors.errors import Refused, internal_error
from daemon import failpoints
from daemon.dispatch import answer, prepare
from daemon.transport.framing import (
    BadFrame,
    FrameTooLarge,
    LineFramer,
    Request,
    encode_error,
    encode_event,
    encode_ok,
)
from daemon.transport.idle import IdleSweeper
from daemon.verbs.table import Later, Plan

if TYPE_CHECKING:
    from daemon.services import Services

log = logging.getLogger("sluicegate.socket")
MAX_IN_FLIGHT = 4096  # requests of one connection before its reads pause
RECEIVE_BYTES = 65536
STEP_BUDGET_S = 0.002  # planning requests of one read yields after this long
CLOSE_GRACE_S = 5.0  # how long a connection closing on a fatal frame finishes its requests
CLAIMS = frozenset({"claim", "claim_next"})  # verbs of the claim failpoint (daemon.failpoints)


class Connection:
    """One client connection."""

    def __init__(self, core: Services, stream: trio.SocketStream, dirty: set[Connection],
                 sweeper: IdleSweeper) -> None:  # fmt: skip
        self.core = core
        self.stream = stream
        self.session = core.auth.new_session()
        self.framer = LineFramer(core.config.daemon.max_frame_bytes)
        self.outbox: list[bytes] = []
        self.outbox_bytes = 0
        self.limit = core.config.daemon.max_send_buffer_bytes
        self.fd = stream.socket.fileno()
        self.dirty = dirty  # the server's set of connections with answers to flush
        self.sending = False
        self.has_output = trio.Event()
        self.in_flight = 0
        # Made only when a task waits (drain, close, backpressure): the request
        # path then creates and sets no Event, where it would make two a request.
        self._drained: trio.Event | None = None  # set when nothing is queued or being sent
        self._idle: trio.Event | None = None  # set when no request is in flight
        self._room: trio.Event | None = None  # set when fewer than MAX_IN_FLIGHT are
        self._close_me = self.close  # one bound method for every idle notice
        self.waiting: set[trio.CancelScope] = set()  # answers waiting (claims)
        self.scope = trio.CancelScope()
        # Set with the scope's cancel (close()): a plain attribute, where the
        # scope's ``cancel_called`` reads the clock on every answer.
        self.closed = False
        self.nursery: trio.Nursery | None = None
        self.closing = False
        self.sweeper = sweeper
        self.subscribed = False  # a subscriber waits for doorbells: never idle

    async def serve(self) -> None:
        """Serve until the client leaves, misbehaves, or the daemon stops."""
        try:
            self.sweeper.idle(self, self._close_me)
            with self.scope:
                async with trio.open_nursery() as nursery:
                    self.nursery = nursery
                    nursery.start_soon(self._write_loop)
                    await self._read_loop()
                    await self._flush_and_close()
                    nursery.cancel_scope.cancel()
        except Exception as exc:  # a bug in one connection ends it, never the listener
            log.warning("connection ended by an error: %r", exc)
        finally:
            self.sweeper.busy(self)
            self.core.router.unsubscribe(self)
            for scope in list(self.waiting):
                scope.cancel()
            # After close the fd number may be reused by another client: no
            # direct write may ever reach it again.
            self.fd = -1
            self.dirty.discard(self)
            for waiting in (self._idle, self._drained):  # a drain() from outside ends too
                if waiting is not None:
                    waiting.set()
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _read_loop(self) -> None:
        while not self.closing:
            data = await self._receive()
            if not data:
                return
            # The budget is timed from the read's second request on: a read of
            # one request (most of them) never reads the clock.
            step_ends = None
            for event in self.framer.feed(data):
                if isinstance(event, Request):
                    while self.in_flight >= MAX_IN_FLIGHT:  # backpressure: pause reads
                        self.flush()
                        self._room = trio.Event()
                        await self._room.wait()
                    if step_ends is None:
                        step_ends = 0.0
                    elif not step_ends:
                        step_ends = time.perf_counter() + STEP_BUDGET_S
                    elif time.perf_counter() > step_ends:
                        # A read full of big batches: let the loop breathe between them.
                        self.flush()
                        await trio.lowlevel.checkpoint()
                        step_ends = time.perf_counter() + STEP_BUDGET_S
                    self._start(event)
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
                    break
            self.flush()

    async def _receive(self) -> bytes:
        """The next bytes from the client (b"" at its end).

        Waits for readability first, then reads: a client that waits for each
        answer before its next request (most of them) has nothing to read yet,
        so trying first would cost a failed read every time.
        """
        while True:
            try:
                await trio.lowlevel.wait_readable(self.fd)  # the int: no fileno() call
                return os.read(self.fd, RECEIVE_BYTES)
            except BlockingIOError:
                continue
            except (OSError, trio.ClosedResourceError):
                return b""  # reset, or closed under us: the client is gone

    # -- one request: plan, write, answer ----------------------------------------

    def _start(self, request: Request) -> None:
        self.in_flight += 1
        if self.in_flight == 1:
            self.sweeper.busy(self)  # not idle until the last one ends
        try:
            if request.refused is not None:  # refused by the framer (daemon.transport.wide_ints)
                raise request.refused
            plan = prepare(
                self.core,
                self.session,
                request.op,
                request.args,
                events=self.send_event,
                owner=self,
            )
            if plan.write is None:
                self._reply(request, plan, None)
            else:
                self.core.writer.submit(
                    plan.write, partial(self._settled, request, plan), plan.free
                )
        except Refused as refused:
            self._refuse(request, refused)
        except Exception as exc:
            self._refuse(request, internal_error(exc))

    def _settled(
        self, request: Request, plan: Plan, result: Any, error: BaseException | None
    ) -> None:
        """The group commit's callback: the write committed, or was refused."""
        if error is not None:
            refused = error if isinstance(error, Refused) else internal_error(error)
            self._refuse(request, refused)
        else:
            if failpoints.ARMED and request.op in CLAIMS:
                failpoints.hit("claim_after_commit_before_send")
            self._reply(request, plan, result)

    def _reply(self, request: Request, plan: Plan, result: Any) -> None:
        try:
            reply = answer(plan, result)
        except Refused as refused:
            self._refuse(request, refused)
            return
        if isinstance(reply, Later):
            if self.nursery is None or self.closed or self.fd < 0:
                reply.abandon()
                self._end()
            else:
                self.nursery.start_soon(self._later, request, reply)
            return
        if request.op == "subscribe":
            self.subscribed = True
        self.send(encode_ok(request.id, reply))
        self._end()

    async def _later(self, request: Request, later: Later) -> None:
        scope = trio.CancelScope()
        self.waiting.add(scope)
        try:
            with scope:
                reply = await later.run()
                if failpoints.ARMED and request.op in CLAIMS:
                    failpoints.hit("claim_after_commit_before_send")
                self.send(encode_ok(request.id, reply))
        except Refused as refused:
            self.send(encode_error(request.id, refused))
        except Exception as exc:
            self.send(encode_error(request.id, internal_error(exc)))
        finally:
            self.waiting.discard(scope)
            self._end()
            self.flush()

    def _refuse(self, request: Request, refused: Refused) -> None:
        self.send(encode_error(request.id, refused))
        self._end()
        if refused.code == "unauthenticated" and request.op == "hello" and not self.closing:
            # A wrong token ends the connection, once the answer is out.
            self.closing = True
            if self.nursery is not None:
                self.nursery.start_soon(self._close_soon)

    async def _close_soon(self) -> None:
        self.flush()
        with trio.move_on_after(1):
            await self._until_drained()
        self.close()

    def _end(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            if self._idle is not None:
                self._idle.set()
                self._idle = None
            if not self.subscribed:
                self.sweeper.idle(self, self._close_me)
        if self._room is not None and self.in_flight < MAX_IN_FLIGHT:
            self._room.set()
            self._room = None

    async def _until_idle(self) -> None:
        """Wait until no request is in flight."""
        if self.in_flight:
            if self._idle is None:
                self._idle = trio.Event()
            await self._idle.wait()

    async def _until_drained(self) -> None:
        """Wait until nothing is queued or being sent."""
        if self.outbox or self.sending:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    def _now_drained(self) -> None:
        if self._drained is not None:
            self._drained.set()
            self._drained = None

    def close(self) -> None:
        """End this connection: its tasks are cancelled and nothing more is sent."""
        self.closed = True
        self.scope.cancel()

    # -- output --------------------------------------------------------------------

    def send_event(self, event: dict[str, Any]) -> None:
        """Push a server event (a doorbell) to this client."""
        self.send(encode_event(event))

    def send(self, frame: bytes) -> None:
        """Queue ``frame`` for the next flush; cut the client off if it lets too
        much pile up."""
        if self.closed or self.fd < 0:
            return
        self.outbox.append(frame)
        self.outbox_bytes += len(frame)
        if self.outbox_bytes > self.limit:
            log.warning("client not reading: %d bytes unsent; closing it", self.outbox_bytes)
            self.outbox.clear()
            self.close()
            return
        self.dirty.add(self)

    def flush(self) -> None:
        """Send what is queued: at once if the socket takes it, else by the writer."""
        self.dirty.discard(self)
        if not self.outbox or self.sending or self.fd < 0:
            return
        data = b"".join(self.outbox) if len(self.outbox) > 1 else self.outbox[0]
        try:
            sent = os.write(self.fd, data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.close()
            return
        if sent == len(data):
            self.outbox.clear()
            self.outbox_bytes = 0
            self._now_drained()
            return
        # The socket is full: the writer task waits for it to drain.
        self.outbox = [data[sent:]]
        self.outbox_bytes = len(data) - sent
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
                    self.close()
                    return
                finally:
                    self.sending = False
            self._now_drained()

    async def _flush_and_close(self) -> None:
        """The client is done sending (or sent a fatal frame): finish up, flush."""
        # Nobody is left to hand a waiting claim's jobs to: end those waits now
        # (a claim not yet committed is withdrawn), so no job is claimed for a
        # client that is gone. Other requests finish and are flushed.
        for scope in list(self.waiting):
            scope.cancel()
        grace = CLOSE_GRACE_S if self.closing else None
        with trio.move_on_after(grace if grace is not None else float("inf")):
            await self._until_idle()
            self.flush()
            await self._until_drained()

    async def drain(self) -> None:
        """Wait until this connection has no request in flight and all is sent."""
        await self._until_idle()
        self.flush()
        await self._until_drained()
