"""A client's link to the daemon, sans I/O: the connection's state and the reconnect rules.

Both clients keep the same facts about their connection: the
:class:`~daemon.sdk.protocol.ClientProtocol` of the current connection, why
it was lost (and whether the daemon said so itself, a :class:`Fatal` error),
requests registered but never sent, whether the caller closed the client or
subscribed, and the last successful ``hello``. :class:`Link` holds them and
says, once for both, when a lost connection may be opened again: only when
nothing the daemon may have read is unanswered, the daemon sent no error of
its own, the client was opened from a socket path, never subscribed
(subscriptions die with their connection) and was not closed. After a
reconnect the last ``hello`` is owed again before any other request.

The I/O (peeking for the daemon's EOF, the Trio reader task) stays in
:mod:`daemon.sdk.sync_connection` and :mod:`daemon.sdk.trio_connection`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from daemon.sdk.errors import ConnectionLost, SluicegateError
from daemon.sdk.protocol import ClientProtocol

#: Why calls fail once the caller closed the client.
CLOSED = "the client closed the connection"
#: What a client hands the daemon's push events (doorbells) to.
EventCallback = Callable[[dict[str, Any]], None]
#: The most bytes a client reads from its connection at once.
RECEIVE_BYTES = 65536


class Link:
    """The state of one client's connection, and when it may be opened again."""

    def __init__(self) -> None:
        #: The protocol of the current connection.
        self.proto = ClientProtocol()
        #: Why the current connection is lost (None while it is up).
        self.lost: SluicegateError | None = None
        #: An error the daemon sent that names no request (it closes after it).
        self.fatal: SluicegateError | None = None
        #: Requests registered with :attr:`proto` whose line never reached the daemon.
        self.unsent = 0
        self.closed = False
        self.subscribed = False
        #: The last successful ``hello``'s arguments, said again on a new connection.
        self.hello_args: dict[str, Any] | None = None
        self.needs_hello = False

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered yet, abandoned ones included."""
        return self.proto.outstanding - self.unsent

    def request(self, op: str, args: Mapping[str, Any]) -> tuple[int, bytes]:
        """Number a request on the current connection; return its id and line.

        A ``subscribe`` marks the link as never to be reopened: the daemon's
        subscription would not follow to a new connection.
        """
        if op == "subscribe":
            self.subscribed = True
        return self.proto.request(op, args)

    def lose(self, why: str | SluicegateError) -> SluicegateError:
        """Record that the connection is lost, unless it already was; return why it was.

        Given words, the daemon's own error (``frame_too_large``) wins over them,
        as it says more than the EOF that followed it.
        """
        if self.lost is None:
            if isinstance(why, str):
                why = self.fatal or ConnectionLost(why)
            self.lost = why
        return self.lost

    def close(self) -> SluicegateError:
        """The caller closed the client: never reopen it; return the error calls get."""
        self.closed = True
        return self.lose(ConnectionLost(CLOSED))

    def reopenable(self, path: Path | None) -> bool:
        """Opened from a socket ``path``, never subscribed, not closed by the caller."""
        return path is not None and not self.subscribed and not self.closed

    def may_reconnect(self, path: Path | None) -> bool:
        """Lost with nothing the daemon may have read unanswered, and no error of its
        own; and :meth:`reopenable`."""
        return (
            self.lost is not None
            and self.fatal is None
            and self.outstanding == 0
            and self.reopenable(path)
        )

    def reopened(self, *, fresh: bool) -> None:
        """A new connection is up: it is not lost, and owes the last ``hello``.

        ``fresh`` starts a new protocol (the Trio client failed every call of
        the old one). Without it the numbering goes on, so the blocking client
        can send again, on the new connection, the line that never reached
        the old one.
        """
        if fresh:
            self.proto = ClientProtocol()
            self.unsent = 0
        self.lost = self.fatal = None
        self.needs_hello = self.hello_args is not None

    def hello_owed(self, op: str) -> dict[str, Any] | None:
        """The ``hello`` arguments to say again before sending ``op``, if one is owed."""
        return self.hello_args if self.needs_hello and op != "hello" else None

    def said_hello(self, args: dict[str, Any]) -> None:
        """A ``hello`` with ``args`` succeeded: remember it for the next connection."""
        self.hello_args = args or None
        self.needs_hello = False
