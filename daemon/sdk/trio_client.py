"""The Trio client: one connection, many calls in flight, answers routed by id.

A reader task owns the receiving side: it feeds the bytes to
:class:`~daemon.sdk.protocol.ClientProtocol` and hands each answer to the call
waiting for its id, so a waiting ``claim_next`` never holds up the calls
behind it. Doorbell events go to ``on_event`` (a plain function; pass a memory
channel's ``send_nowait`` to get a queue). Calls retry 429s as
:class:`~daemon.sdk.retry.RetryPolicy` says, sleeping with ``trio.sleep`` so
tests drive the backoff with a mock clock.

A call cancelled while the daemon still works on it is abandoned: its answer
is dropped when it comes, and jobs a cancelled claim took anyway are released
at once rather than left running until their lease lapses.

The daemon closes a connection that stays idle for ``[daemon] idle_timeout``
(nothing in flight, no waiting claim, no subscription), without a word; the
reader sees the EOF. A client opened with :meth:`TrioClient.connect` then
connects again by itself at its next call, if nothing was outstanding when
the connection was lost (a send that failed counts as not sent: it stops
before the line's newline). It opens the same socket path again, restarts the
reader, says ``hello`` again with the token and client name of the last
successful ``hello``, and sends the call: at most once per call. Nothing that
may have reached the daemon is ever sent again: a connection lost with a call
in flight raises :class:`ConnectionLost`, as does one opened with
:meth:`TrioClient.over`, or one that subscribed (a subscriber is never idle,
and its subscriptions die with the connection), or one the caller closed.

::

    async with TrioClient.connect() as client:
        await client.enqueue("images", "resize", {"id": 7})
        for job in await client.claim_next(["images"], wait_ms=30_000):
            await job.complete()
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Unpack

import attrs
import trio

from daemon.sdk.errors import ConnectionLost, SluicegateError
from daemon.sdk.job import Claimed, TrioJob
from daemon.sdk.paths import resolve_socket, resolve_token
from daemon.sdk.protocol import (
    Answer,
    ClientProtocol,
    Fatal,
    JobOptions,
    Orphaned,
    PushEvent,
    drop_none,
    job_spec,
)
from daemon.sdk.retry import RetryPolicy

log = logging.getLogger("sluicegate.client")
EventCallback = Callable[[dict[str, Any]], None]
RECEIVE_BYTES = 65536


@attrs.define(eq=False)
class _Slot:
    """Where the reader leaves one call's answer."""

    done: trio.Event = attrs.field(factory=trio.Event)
    answer: Answer | None = None
    error: SluicegateError | None = None


def collapse(group: BaseExceptionGroup) -> BaseException:
    """The exception a nursery wrapped alone, else the group itself.

    The SDK's nurseries wrap only their body's error (their helper tasks never
    raise), so callers can catch ``NotFound`` rather than an ``ExceptionGroup``.
    """
    return group.exceptions[0] if len(group.exceptions) == 1 else group


class TrioClient:
    """A connection to the daemon for Trio programs. Open it with :meth:`connect`."""

    def __init__(
        self,
        stream: trio.abc.HalfCloseableStream,
        *,
        retry: RetryPolicy | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        self.stream = stream
        #: The socket :meth:`connect` opened, opened again after an idle close;
        #: None over a caller's stream (never reopened).
        self.path: Path | None = None
        self.retry = retry or RetryPolicy()
        self.on_event = on_event
        # State of the current connection; a reconnect starts it afresh.
        self._proto = ClientProtocol()
        self._slots: dict[int, _Slot] = {}
        self._lost: SluicegateError | None = None
        self._fatal: SluicegateError | None = None
        self._reader_done = trio.Event()
        #: Requests registered with ``_proto`` whose line never reached the daemon.
        self._unsent = 0
        # State of the client.
        self._send_lock = trio.Lock()
        self._restore_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._subscribed = False
        #: The last successful ``hello``'s arguments, said again on a new connection.
        self._hello_args: dict[str, Any] | None = None
        self._needs_hello = False

    # -- opening and closing ---------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        socket: str | os.PathLike[str] | None = None,
        *,
        token: str | None = None,
        config: str | os.PathLike[str] | None = None,
        client_name: str | None = None,
        retry: RetryPolicy | None = None,
        on_event: EventCallback | None = None,
    ) -> AsyncIterator[TrioClient]:
        """Connect to the daemon's socket (resolved as :mod:`daemon.sdk.paths` says)."""
        path = resolve_socket(socket, config)
        stream = await trio.open_unix_socket(str(path))
        async with cls.over(
            stream, token=token, client_name=client_name, retry=retry, on_event=on_event
        ) as client:
            client.path = path
            yield client

    @classmethod
    @asynccontextmanager
    async def over(
        cls,
        stream: trio.abc.HalfCloseableStream,
        *,
        token: str | None = None,
        client_name: str | None = None,
        retry: RetryPolicy | None = None,
        on_event: EventCallback | None = None,
    ) -> AsyncIterator[TrioClient]:
        """A client over an already open ``stream`` (tests use in-memory streams)."""
        client = cls(stream, retry=retry, on_event=on_event)
        try:
            async with trio.open_nursery() as nursery:
                client._nursery = nursery
                nursery.start_soon(client._read_loop)
                try:
                    token = resolve_token(token)
                    if token or client_name:
                        await client.hello(token=token, client=client_name)
                    yield client
                finally:
                    nursery.cancel_scope.cancel()
                    # Shielded: a Cancelled here would replace the body's own error.
                    with trio.CancelScope(shield=True):
                        await client.aclose()
        except BaseExceptionGroup as group:
            raise collapse(group) from None

    async def aclose(self) -> None:
        """Close the connection; calls still waiting fail with ``ConnectionLost``."""
        self._closed = True
        self._lose(ConnectionLost("the client closed the connection"))
        await self.stream.aclose()

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered yet, abandoned ones included."""
        return self._proto.outstanding - self._unsent

    # -- requests ------------------------------------------------------------

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Call verb ``op``; retry 429s per the retry policy; return the result."""
        waiting = op == "claim_next" and bool(args.get("wait_ms"))
        attempt = 1
        while True:
            try:
                return await self.call_once(op, **args)
            except SluicegateError as exc:
                if not self.retry.should_retry(exc, attempt, waiting=waiting):
                    raise
                await trio.sleep(self.retry.delay(attempt, exc.retry_after))
                attempt += 1

    async def call_once(self, op: str, **args: Any) -> dict[str, Any]:
        """Call verb ``op`` once, without retries.

        A connection the daemon closed while nothing was outstanding is opened
        again first, once (see the module docstring).
        """
        reopened = await self._restore(op)
        try:
            return await self._exchange(op, args)
        except ConnectionLost:
            if reopened or not self._may_reconnect():
                raise
        await self._restore(op)
        return await self._exchange(op, args)

    async def _exchange(self, op: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request on the current connection and wait for its answer."""
        if self._lost is not None:
            raise self._lost
        if op == "subscribe":
            self._subscribed = True  # server state that a new connection would not have
        # A reconnect replaces these; this request belongs to the ones it started on.
        proto, slots, stream = self._proto, self._slots, self.stream
        req_id, line = proto.request(op, args)
        slot = slots[req_id] = _Slot()
        sent = False
        try:
            await self._send(line, stream)
            sent = True
            await slot.done.wait()
        except BaseException:
            slots.pop(req_id, None)
            if not sent:
                # Cancelled before its turn to send, or the send failed (it stops
                # before the line's last byte, its newline): the daemon never read it.
                if stream is self.stream:
                    self._unsent += 1
            elif slot.answer is not None:
                # Answered, but this caller was cancelled before it saw it.
                orphans = proto.salvage(slot.answer, op)
                if orphans is not None:
                    self._release(orphans)
            elif slot.error is None:
                proto.abandon(req_id)
            raise
        if slot.error is not None:
            raise slot.error
        assert slot.answer is not None
        return slot.answer.result()

    # -- verbs ---------------------------------------------------------------

    async def hello(self, token: str | None = None, client: str | None = None) -> dict[str, Any]:
        """Authenticate the connection; return ``{namespace, grants, queues, ...}``.

        A reconnect says the last successful ``hello`` again.
        """
        args = drop_none(token=token, client=client)
        answer = await self.call("hello", **args)
        self._hello_args = args or None
        self._needs_hello = False
        return answer

    async def enqueue(
        self, queue: str, type: str, payload: Any = None, **options: Unpack[JobOptions]
    ) -> dict[str, Any]:
        """Enqueue one job; return ``{job, duplicate, folded, shed}``."""
        return await self.call("enqueue", **job_spec(queue, type, payload, **options))

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Enqueue a batch as a unit (see :func:`~daemon.sdk.protocol.job_spec`)."""
        return (await self.call("enqueue_many", jobs=[dict(j) for j in jobs]))["results"]

    async def complete_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Complete many claimed jobs (``{job_id, lease, result?}`` each) in one call;
        each result is ``{job_id, state}`` or ``{job_id, error}``, in order."""
        return (await self.call("complete_many", jobs=[dict(j) for j in jobs]))["results"]

    async def claim_next(
        self,
        queues: Sequence[str],
        *,
        max: int = 1,
        wait_ms: int = 0,
        lease_ms: int | None = None,
    ) -> Claimed:
        """Claim up to ``max`` jobs, waiting up to ``wait_ms`` for work; job handles."""
        answer = await self.call(
            "claim_next",
            **drop_none(queues=list(queues), max=max, wait_ms=wait_ms, lease_ms=lease_ms),
        )
        jobs = [
            TrioJob(self, item["job"], item.get("admission"), lease_ms) for item in answer["jobs"]
        ]
        return Claimed(jobs, answer.get("deferred"))

    async def claim(self, job_id: str, *, lease_ms: int | None = None) -> TrioJob:
        """Claim one pending job by id."""
        answer = await self.call("claim", **drop_none(job_id=job_id, lease_ms=lease_ms))
        return TrioJob(self, answer["job"], answer.get("admission"), lease_ms)

    async def get(self, job_id: str) -> dict[str, Any]:
        """One job object by id."""
        return (await self.call("get", job_id=job_id))["job"]

    async def list(
        self,
        queue: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict[str, Any]:
        """A page of jobs in id order: ``{jobs, next}``."""
        args = drop_none(queue=queue, status=status, limit=limit, after=after)
        return await self.call("list", **args)

    async def status(self) -> dict[str, Any]:
        """The namespace at a glance: queues and their counts, the daemon."""
        return await self.call("status")

    async def subscribe(self, queues: Sequence[str]) -> None:
        """Receive a doorbell event (``on_event``) each time a queue becomes claimable.

        A subscribed client is never reconnected: if its connection is lost,
        calls raise ``ConnectionLost`` and the subscription must be made again
        on a new client.
        """
        await self.call("subscribe", queues=list(queues))

    async def dead_list(
        self, queue: str | None = None, limit: int | None = None, after: str | None = None
    ) -> dict[str, Any]:
        """A page of dead letters: ``{jobs, next}``."""
        return await self.call("dead_list", **drop_none(queue=queue, limit=limit, after=after))

    async def dead_replay(
        self,
        job_ids: Sequence[str] | None = None,
        *,
        all: bool = False,
        queue: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict[str, Any]:
        """Replay dead letters by id, or ``all`` (a batch after ``after``);
        ``{results, remaining, next}``."""
        return await self.call(
            "dead_replay",
            **drop_none(
                job_ids=None if job_ids is None else list(job_ids),
                all=True if all else None,
                queue=queue,
                limit=limit,
                after=after,
            ),
        )

    # -- reconnecting ----------------------------------------------------------

    async def _restore(self, op: str) -> bool:
        """Before a call of ``op``: reopen a connection the daemon closed while
        nothing was outstanding, and say ``hello`` on it. True if it reopened;
        raises why the connection was lost if it may not reopen it."""
        if self._lost is None and not (self._needs_hello and op != "hello"):
            return False
        async with self._restore_lock:  # one task reopens; the others then use it
            reopened = False
            if self._lost is not None:
                if not self._may_reconnect():
                    raise self._lost
                await self._reopen()
                reopened = True
            if self._needs_hello and op != "hello":
                assert self._hello_args is not None
                await self._exchange("hello", self._hello_args)
                self._needs_hello = False
            return reopened

    def _may_reconnect(self) -> bool:
        """Lost with nothing the daemon may have read unanswered, and no error of its
        own; opened from a path, not subscribed, not closed by the caller."""
        return (
            self._lost is not None
            and self._fatal is None
            and self.outstanding == 0
            and self._reader_done.is_set()
            and self.path is not None
            and self._nursery is not None
            and not self._subscribed
            and not self._closed
        )

    async def _reopen(self) -> None:
        assert self.path is not None and self._nursery is not None
        try:
            stream = await trio.open_unix_socket(str(self.path))
        except OSError as exc:
            raise ConnectionLost(f"cannot reconnect to {self.path}: {exc}") from exc
        if self._closed:  # while it connected
            await stream.aclose()
            raise ConnectionLost("the client closed the connection")
        old, self.stream = self.stream, stream
        self._proto = ClientProtocol()
        self._slots = {}
        self._lost = self._fatal = None
        self._reader_done = trio.Event()
        self._unsent = 0
        self._needs_hello = self._hello_args is not None
        self._nursery.start_soon(self._read_loop)
        log.debug("reconnected to %s: the daemon closed the idle connection", self.path)
        await old.aclose()

    # -- I/O -----------------------------------------------------------------

    async def _send(self, data: bytes, stream: trio.abc.Stream) -> None:
        """Send ``data`` on ``stream``, the connection it was made for, if still current."""
        async with self._send_lock:
            if stream is not self.stream:
                # Its connection was replaced while this waited: the frame is for it.
                raise ConnectionLost("the connection this request was for is closed")
            # A send cut short would leave half a frame on the wire and break every
            # later request, so it is shielded; frames are small and the daemon reads.
            with trio.CancelScope(shield=True):
                try:
                    await stream.send_all(data)
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
        # The connection is gone. An error the daemon sent before closing it
        # (frame_too_large) says why better than the broken pipe: let the reader get it.
        with trio.move_on_after(1):
            await self._reader_done.wait()
        raise self._lose(self._fatal or ConnectionLost("cannot send: the connection is closed"))

    def _release(self, orphans: Orphaned) -> None:
        if self._nursery is not None and self._lost is None:
            data = self._proto.release_orphans(orphans.jobs)
            self._nursery.start_soon(self._send_quietly, data, self.stream)

    async def _send_quietly(self, data: bytes, stream: trio.abc.Stream) -> None:
        try:
            await self._send(data, stream)
        except SluicegateError as exc:
            log.debug("could not release orphaned jobs: %s", exc)

    async def _read_loop(self) -> None:
        why = "the daemon closed the connection"
        stream = self.stream
        try:
            while True:
                data = await stream.receive_some(RECEIVE_BYTES)
                if not data:
                    break
                for item in self._proto.feed(data):
                    self._route(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            why = f"connection closed: {exc!r}"
        finally:
            self._lose(self._fatal or ConnectionLost(why))
            self._reader_done.set()

    def _route(self, item: object) -> None:
        if isinstance(item, Answer):
            slot = self._slots.pop(item.req_id, None)
            if slot is not None:
                slot.answer = item
                slot.done.set()
        elif isinstance(item, PushEvent):
            if self.on_event is not None:
                try:
                    self.on_event(item.frame)
                except Exception:  # a broken callback must not end the connection
                    log.exception("on_event callback failed for %r", item.frame)
        elif isinstance(item, Orphaned):
            self._release(item)
        elif isinstance(item, Fatal):
            self._fatal = item.error

    def _lose(self, error: SluicegateError) -> SluicegateError:
        if self._lost is None:
            self._lost = error
        for slot in self._slots.values():
            if slot.answer is None and slot.error is None:
                slot.error = self._lost
                slot.done.set()
        self._slots.clear()
        return self._lost
