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
        self.retry = retry or RetryPolicy()
        self.on_event = on_event
        self._proto = ClientProtocol()
        self._slots: dict[int, _Slot] = {}
        self._send_lock = trio.Lock()
        self._lost: SluicegateError | None = None
        self._fatal: SluicegateError | None = None
        self._nursery: trio.Nursery | None = None
        self._reader_done = trio.Event()

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
        self._lose(ConnectionLost("the client closed the connection"))
        await self.stream.aclose()

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered yet, abandoned ones included."""
        return self._proto.outstanding

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
        """Call verb ``op`` once, without retries."""
        if self._lost is not None:
            raise self._lost
        req_id, line = self._proto.request(op, args)
        slot = self._slots[req_id] = _Slot()
        try:
            await self._send(line)
            await slot.done.wait()
        except BaseException:
            self._slots.pop(req_id, None)
            if slot.answer is not None:
                # Answered, but this caller was cancelled before it saw it.
                orphans = self._proto.salvage(slot.answer, op)
                if orphans is not None:
                    self._release(orphans)
            elif slot.error is None:
                self._proto.abandon(req_id)
            raise
        if slot.error is not None:
            raise slot.error
        assert slot.answer is not None
        return slot.answer.result()

    # -- verbs ---------------------------------------------------------------

    async def hello(self, token: str | None = None, client: str | None = None) -> dict[str, Any]:
        """Authenticate the connection; return ``{namespace, grants, queues, ...}``."""
        return await self.call("hello", **drop_none(token=token, client=client))

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
        """Receive a doorbell event (``on_event``) each time a queue becomes claimable."""
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

    # -- I/O -----------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        async with self._send_lock:
            # A send cut short would leave half a frame on the wire and break every
            # later request, so it is shielded; frames are small and the daemon reads.
            with trio.CancelScope(shield=True):
                try:
                    await self.stream.send_all(data)
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
            self._nursery.start_soon(self._send_quietly, self._proto.release_orphans(orphans.jobs))

    async def _send_quietly(self, data: bytes) -> None:
        try:
            await self._send(data)
        except SluicegateError as exc:
            log.debug("could not release orphaned jobs: %s", exc)

    async def _read_loop(self) -> None:
        why = "the daemon closed the connection"
        try:
            while True:
                data = await self.stream.receive_some(RECEIVE_BYTES)
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
