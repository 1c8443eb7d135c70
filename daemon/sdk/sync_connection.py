"""The blocking client's connection: the stdlib socket, pipelining by request id, reconnects.

``call`` sends a request and waits for its answer, retrying 429s as
:class:`~daemon.sdk.retry.RetryPolicy` says. ``submit`` and ``result`` split
the two halves so many requests can be in flight at once: answers are routed
by id, and the ones that arrive before their caller asks are kept until it
does. Server-push events (doorbells after ``subscribe``) go to ``on_event``,
or into :attr:`SyncConnection.events` when there is no callback.

The daemon closes a connection that stays idle for ``[daemon] idle_timeout``
(nothing in flight, no waiting claim, no subscription), without a word. A
client opened from a socket path then connects again by itself: before it
sends a request with nothing outstanding it peeks for the daemon's EOF
(reading nothing), and a send that fails with a broken pipe while nothing
else was outstanding is treated the same way (a failed send stops before the
line's newline, so the daemon never read it). It reconnects to the same path,
says ``hello`` again with the token and client name of the last successful
``hello``, and sends the request: at most once per request. Nothing that may
have reached the daemon is ever sent again: a connection lost with a request
in flight raises :class:`ConnectionLost`, as does one opened over a caller's
``sock``, one that subscribed (subscriptions die with their connection), or
one the caller closed. The rules are :class:`~daemon.sdk.link.Link`'s.

The verbs are methods of :class:`~daemon.sdk.sync_client.Client`, built on this.
"""

from __future__ import annotations

import logging
import os
import socket as stdsocket
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from daemon.sdk.errors import ConnectionLost, SluicegateError
from daemon.sdk.link import RECEIVE_BYTES, EventCallback, Link
from daemon.sdk.paths import resolve_socket, resolve_token
from daemon.sdk.protocol import Answer, Fatal, Incoming, Orphaned, PushEvent, drop_none
from daemon.sdk.retry import RetryPolicy
from daemon.sdk.verbs import retry_delay

log = logging.getLogger("sluicegate.client")
#: Told of a refused attempt about to be retried: (error, attempt from 1, delay in s).
RetryCallback = Callable[[SluicegateError, int, float], None]
#: ``result``'s default timeout: the client's own.
CLIENT_TIMEOUT: Any = object()


class SyncConnection:
    """A blocking connection to the daemon's unix socket; not thread-safe.

    The constructor's arguments are described on
    :class:`~daemon.sdk.sync_client.Client`, the class to use.
    """

    def __init__(
        self,
        socket: str | os.PathLike[str] | None = None,
        *,
        token: str | None = None,
        config: str | os.PathLike[str] | None = None,
        client_name: str | None = None,
        timeout: float | None = 30.0,
        retry: RetryPolicy | None = None,
        on_event: EventCallback | None = None,
        sleep: Callable[[float], None] = time.sleep,
        sock: stdsocket.socket | None = None,
        on_retry: RetryCallback | None = None,
    ) -> None:
        self.path: Path | None = None
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.on_event = on_event
        #: Events received while no ``on_event`` callback is set (the newest 1000).
        self.events: deque[dict[str, Any]] = deque(maxlen=1000)
        self._sleep = sleep
        self._on_retry = on_retry
        self._link = Link()
        self._answers: dict[int, Answer] = {}
        if sock is None:
            self.path = resolve_socket(socket, config)
            sock = _open(self.path, timeout)
        self._sock = sock
        token = resolve_token(token)
        if token or client_name:
            try:
                self.hello(token=token, client=client_name)
            except BaseException:
                self.close()
                raise

    # -- connection ----------------------------------------------------------

    def close(self) -> None:
        """Close the connection (answers still owed are dropped)."""
        self._link.close()
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered yet, abandoned ones included."""
        return self._link.outstanding

    def hello(self, token: str | None = None, client: str | None = None) -> dict[str, Any]:
        """Authenticate the connection; return ``{namespace, grants, queues, ...}``.

        A reconnect says the last successful ``hello`` again.
        """
        args = drop_none(token=token, client=client)
        answer = self.call("hello", **args)
        self._link.said_hello(args)
        return answer

    # -- requests ------------------------------------------------------------

    def submit(self, op: str, **args: Any) -> int:
        """Send a request without waiting; return its id for :meth:`result`.

        A connection the daemon closed while nothing was outstanding is opened
        again first (see the module docstring).
        """
        reopened = self._restore(op)
        req_id, line = self._link.request(op, args)
        error = self._try_send(line)
        if error is not None:
            if isinstance(error, BrokenPipeError | ConnectionResetError):
                # A send that fails stops before the line's last byte, its newline:
                # the daemon never read this request.
                self._link.unsent += 1
            lost = self._lose(f"cannot send: {error}")
            if reopened or not self._link.may_reconnect(self.path):
                raise lost
            self._restore(op)
            self._send(line)
            self._link.unsent -= 1
        return req_id

    def result(self, req_id: int, timeout: float | None = CLIENT_TIMEOUT) -> dict[str, Any]:
        """Wait for the answer to ``req_id``; return the verb's result or raise its error.

        ``timeout`` defaults to the client's; on expiry the request is abandoned
        (a late answer is dropped, and jobs a late claim took are released) and
        :class:`TimeoutError` is raised.
        """
        timeout = self.timeout if timeout is CLIENT_TIMEOUT else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while req_id not in self._answers:
            if self._link.lost is not None:
                raise self._link.lost
            try:
                self._receive(deadline)
            except TimeoutError:
                self._link.proto.abandon(req_id)
                raise TimeoutError(f"no answer to request {req_id} within {timeout} s") from None
        return self._answers.pop(req_id).result()

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Call verb ``op``; retry 429s per the retry policy; return the result."""
        timeout = self.timeout
        if timeout is not None and op == "claim_next":
            timeout += args.get("wait_ms", 0) / 1000
        attempt = 1
        while True:
            try:
                return self.result(self.submit(op, **args), timeout)
            except SluicegateError as exc:
                delay = retry_delay(self.retry, op, args, exc, attempt)
                if delay is None:
                    raise
                if self._on_retry is not None:
                    self._on_retry(exc, attempt, delay)
                self._sleep(delay)
                attempt += 1

    def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next server-push event (needs no ``on_event``); None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.events:
            if self._link.lost is not None:
                raise self._link.lost
            try:
                self._receive(deadline)
            except TimeoutError:
                return None
        return self.events.popleft()

    # -- reconnecting ----------------------------------------------------------

    def _restore(self, op: str) -> bool:
        """Before sending ``op``: reopen a connection the daemon closed while nothing
        was outstanding, and say ``hello`` on it. True if it reopened; raises why the
        connection was lost if it may not reopen it."""
        link = self._link
        reopened = False
        if (
            link.lost is None
            and link.outstanding == 0
            and link.reopenable(self.path)
            and self._peer_closed()
        ):
            self._lose("the daemon closed the connection")
        if link.lost is not None:
            if not link.may_reconnect(self.path):
                raise link.lost
            self._reopen()
            reopened = True
        hello = link.hello_owed(op)
        if hello is not None:
            self.hello(**hello)
        return reopened

    def _peer_closed(self) -> bool:
        """Whether the daemon's EOF waits to be read; reads nothing (data means open)."""
        try:
            self._sock.settimeout(0)
            return not self._sock.recv(1, stdsocket.MSG_PEEK | stdsocket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True
        except OSError:
            return False  # the send will say what is wrong

    def _reopen(self) -> None:
        assert self.path is not None
        try:
            sock = _open(self.path, self.timeout)
        except OSError as exc:
            raise ConnectionLost(f"cannot reconnect to {self.path}: {exc}") from exc
        self._sock.close()
        self._sock = sock
        self._link.reopened(fresh=False)
        log.debug("reconnected to %s: the daemon closed the idle connection", self.path)

    # -- I/O -----------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        error = self._try_send(data)
        if error is not None:
            raise self._lose(f"cannot send: {error}")

    def _try_send(self, data: bytes) -> OSError | None:
        """Send ``data``; return why it failed, after routing the daemon's last words."""
        try:
            self._sock.settimeout(self.timeout)
            self._sock.sendall(data)
        except OSError as exc:
            self._read_last_words()
            return exc
        return None

    def _read_last_words(self) -> None:
        """After a failed send: route what the daemon said before it closed the connection.

        A daemon that refuses a frame as too large answers ``frame_too_large`` and
        closes; that answer says more than the broken pipe.
        """
        try:
            self._sock.settimeout(1.0)
            while data := self._sock.recv(RECEIVE_BYTES):
                self._route(self._link.proto.feed(data))
        except OSError:
            pass

    def _receive(self, deadline: float | None) -> None:
        """Read once and route what arrived; TimeoutError at ``deadline``."""
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._sock.settimeout(remaining)
        else:
            self._sock.settimeout(None)
        try:
            data = self._sock.recv(RECEIVE_BYTES)
        except TimeoutError:
            raise
        except OSError as exc:
            raise self._lose(f"cannot receive: {exc}") from None
        if not data:
            raise self._lose("the daemon closed the connection")
        self._route(self._link.proto.feed(data))

    def _route(self, items: list[Incoming]) -> None:
        for item in items:
            if isinstance(item, Answer):
                self._answers[item.req_id] = item
            elif isinstance(item, PushEvent):
                if self.on_event is not None:
                    self.on_event(item.frame)
                else:
                    self.events.append(item.frame)
            elif isinstance(item, Orphaned):
                try:  # best effort: an unreleased job comes back when its lease lapses
                    self._send(self._link.proto.release_orphans(item.jobs))
                except SluicegateError:
                    pass
            elif isinstance(item, Fatal):
                self._link.fatal = item.error

    def _lose(self, why: str) -> SluicegateError:
        return self._link.lose(why)


def _open(path: Path, timeout: float | None) -> stdsocket.socket:
    """A socket connected to the daemon at ``path``."""
    sock = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
    except BaseException:
        sock.close()
        raise
    return sock
