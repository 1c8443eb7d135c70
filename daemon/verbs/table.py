"""The one verb table, served by both transports.

A verb is an async function ``handler(core, call, args)`` registered with
:func:`verb`, the grants that may call it, and an attrs class for its
arguments. :mod:`daemon.dispatch` authenticates, checks grants and scope in the
order of PROTOCOL.md, structures the arguments and calls it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from actors.errors import Refused
from actors.router import EventSink
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.core import Core

Handler = Callable[["Core", "Call", Any], Awaitable[dict[str, Any]]]


@attrs.define
class Call:
    """One call: who makes it, in which namespace, through which transport."""

    session: Session
    namespace: str
    #: Where server-push events go (the socket connection), or None (HTTP).
    events: EventSink | None = None
    #: Identifies the connection for subscriptions.
    owner: object = None

    def scope(self, queue: str) -> None:
        """Refuse a queue outside the session's scope, revealing nothing."""
        if not self.session.in_scope(queue):
            raise Refused("forbidden", "queue is outside this token's scope")


@attrs.frozen
class Verb:
    """A verb: its name, who may call it, its argument class and handler."""

    name: str
    grants: tuple[str, ...]
    args: type
    handler: Handler
    #: Management verbs hide what the caller may not manage as not_found.
    manage: bool = False


VERBS: dict[str, Verb] = {}

#: Reading verbs accept any grant in the namespace.
ANY = ("produce", "consume", "manage", "set_admission_policy", "clear_admission_policy")


def verb(name: str, grants: tuple[str, ...], args: type, *, manage: bool = False):
    """Register ``handler`` as verb ``name``."""

    def register(handler: Handler) -> Handler:
        if name in VERBS:
            raise RuntimeError(f"verb {name!r} registered twice")
        VERBS[name] = Verb(name, grants, args, handler, manage)
        return handler

    return register


@attrs.frozen
class NoArgs:
    """Arguments of a verb that takes none."""
