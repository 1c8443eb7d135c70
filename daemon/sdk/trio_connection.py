"""The Trio client's connection: many calls in flight, answers routed by id, reconnects.

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
reader sees the EOF. A client opened with ``TrioClient.connect`` then connects
again by itself at its next call, once, if nothing was outstanding when the
connection was lost (a send that failed counts as not sent: it stops before
the line's newline): it opens the same socket path, restarts the reader, says
the last successful ``hello`` again and sends the call. Nothing that may have
reached the daemon is ever sent again: a connection lost with a call in flight
raises :class:`ConnectionLost`, as does one opened with ``TrioClient.over``,
one that subscribed (its subscriptions die with the connection), or one the
caller closed. The rules are :class:`~daemon.sdk.link.Link`'s.

:class:`~daemon.sdk.trio_client.TrioClient`, built on this, opens it and has the verbs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from daemon.sdk.errors import ConnectionLost, SluicegateError
from daemon.sdk.link import RECEIVE_BYTES, EventCallback, Link
from daemon.sdk.protocol import Answer, Fatal, Orphaned, PushEvent, drop_none
from daemon.sdk.retry import RetryPolicy
from daemon.sdk.verbs import retry_delay

log = logging.getLogger("sluicegate.client")


@attrs.define(eq=False)
class _Slot:
    """Where the reader leaves one call's answer."""

    done: trio.Event = attrs.field(factory=trio.Event)
    answer: Answer | None = None
    error: SluicegateError | None = None


class TrioConnection:
    """The connection under :class:`~daemon.sdk.trio_client.TrioClient`, the class to use.

    It is opened by :meth:`TrioClient.connect <daemon.sdk.trio_client.TrioClient.connect>`
    or :meth:`~daemon.sdk.trio_client.TrioClient.over`, which run its reader.
    """

    def __init__(
        self,
        stream: trio.abc.HalfCloseableStream,
        *,
        retry: RetryPolicy | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        self.stream = stream
        #: The socket ``connect`` opened, opened again after an idle close;
        #: None over a caller's stream (never reopened).
        self.path: Path | None = None
        self.retry = retry or RetryPolicy()
        self.on_event = on_event
        self._link = Link()
        # State of the current connection; a reconnect starts it afresh.
        self._slots: dict[int, _Slot] = {}
        self._reader_done = trio.Event()
        # State of the client.
        self._send_lock = trio.Lock()
        self._restore_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None

    # -- starting and closing ------------------------------------------------

    def _start(self, nursery: trio.Nursery) -> None:
        """Run the reader in ``nursery``, which also hosts reconnects and releases."""
        self._nursery = nursery
        nursery.start_soon(self._read_loop)

    async def aclose(self) -> None:
        """Close the connection; calls still waiting fail with ``ConnectionLost``."""
        self._fail_slots(self._link.close())
        await self.stream.aclose()

    @property
    def reopenable(self) -> bool:
        """Whether :meth:`reconnect` may open this client's connection again: it was
        opened from a socket path, never subscribed, and was not closed."""
        return self._link.reopenable(self.path) and self._nursery is not None

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered yet, abandoned ones included."""
        return self._link.outstanding

    async def hello(self, token: str | None = None, client: str | None = None) -> dict[str, Any]:
        """Authenticate the connection; return ``{namespace, grants, queues, ...}``.

        A reconnect says the last successful ``hello`` again.
        """
        args = drop_none(token=token, client=client)
        answer = await self.call("hello", **args)
        self._link.said_hello(args)
        return answer

    # -- requests ------------------------------------------------------------

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Call verb ``op``; retry 429s per the retry policy; return the result."""
        attempt = 1
        while True:
            try:
                return await self.call_once(op, **args)
            except SluicegateError as exc:
                delay = retry_delay(self.retry, op, args, exc, attempt)
                if delay is None:
                    raise
                await trio.sleep(delay)
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
        link = self._link
        if link.lost is not None:
            raise link.lost
        # A reconnect replaces these; this request belongs to the ones it started on.
        proto, slots, stream = link.proto, self._slots, self.stream
        req_id, line = link.request(op, args)
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
                    link.unsent += 1
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

    # -- reconnecting ----------------------------------------------------------

    async def _restore(self, op: str) -> bool:
        """Before a call of ``op``: reopen a connection the daemon closed while
        nothing was outstanding, and say ``hello`` on it. True if it reopened;
        raises why the connection was lost if it may not reopen it."""
        link = self._link
        if link.lost is None and link.hello_owed(op) is None:
            return False
        async with self._restore_lock:  # one task reopens; the others then use it
            reopened = False
            if link.lost is not None:
                if not self._may_reconnect():
                    raise link.lost
                await self._reopen()
                reopened = True
            hello = link.hello_owed(op)
            if hello is not None:
                await self._exchange("hello", hello)
                link.said_hello(hello)
            return reopened

    async def reconnect(self) -> None:
        """Open the socket again after the connection was lost with calls in
        flight, which :meth:`call` never does by itself: the caller accepts that
        those calls may have been applied. A worker does, for its claims (what a
        lost claim took comes back when its lease lapses). The last ``hello`` is
        said again before the next call. Raises :class:`ConnectionLost` when the
        connection is not lost, cannot be opened again (a client over a caller's
        stream, one that subscribed or was closed), or the socket does not answer.
        """
        link = self._link
        async with self._restore_lock:
            if link.lost is None:
                return  # another task reconnected meanwhile
            if not (self.reopenable and self._reader_done.is_set()):
                raise link.lost
            await self._reopen()

    def _may_reconnect(self) -> bool:
        """:meth:`Link.may_reconnect <daemon.sdk.link.Link.may_reconnect>`, once the
        reader has stopped, in a client that has its nursery."""
        return (
            self._link.may_reconnect(self.path)
            and self._reader_done.is_set()
            and self._nursery is not None
        )

    async def _reopen(self) -> None:
        assert self.path is not None and self._nursery is not None
        try:
            stream = await trio.open_unix_socket(str(self.path))
        except OSError as exc:
            raise ConnectionLost(f"cannot reconnect to {self.path}: {exc}") from exc
        if self._link.closed:  # while it connected
            await stream.aclose()
            raise ConnectionLost("the client closed the connection")
        old, self.stream = self.stream, stream
        self._link.reopened(fresh=True)
        self._slots = {}
        self._reader_done = trio.Event()
        self._nursery.start_soon(self._read_loop)
        log.debug("reconnected to %s", self.path)
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
        raise self._lose("cannot send: the connection is closed")

    def _release(self, orphans: Orphaned) -> None:
        if self._nursery is not None and self._link.lost is None:
            data = self._link.proto.release_orphans(orphans.jobs)
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
                for item in self._link.proto.feed(data):
                    self._route(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            why = f"connection closed: {exc!r}"
        finally:
            self._lose(why)
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
            self._link.fatal = item.error

    def _lose(self, why: str) -> SluicegateError:
        """The connection is lost (the daemon's own error wins over ``why``): every
        call still waiting fails with it."""
        return self._fail_slots(self._link.lose(why))

    def _fail_slots(self, lost: SluicegateError) -> SluicegateError:
        for slot in self._slots.values():
            if slot.answer is None and slot.error is None:
                slot.error = lost
                slot.done.set()
        self._slots.clear()
        return lost
