"""The one verb table, served by both transports.

A verb is a synchronous function ``plan(core, call, args) -> Plan`` registered
with :func:`verb`, the grants that may call it, and an attrs class for its
arguments. It checks what it can at once and returns a :class:`Plan`: at most
one write, run in a group transaction, and how to answer from the write's
result. An answer that has to wait (a ``claim_next`` with ``wait_ms``) is a
:class:`Later`. :mod:`daemon.dispatch` runs plans for HTTP; the socket submits
their writes with a callback, so a request costs no task of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from actors.errors import Refused
from actors.router import EventSink
from daemon.session import Session
from daemon.store.interface import Tx

if TYPE_CHECKING:
    from daemon.services import Services

Answer = dict[str, Any]


@attrs.frozen
class Later:
    """An answer that is not ready yet: await ``run()`` for it.

    A transport that will not run it (the client is gone) calls ``abandon()``
    instead, so whatever it holds (a registered waiter) is let go.
    """

    run: Callable[[], Awaitable[Answer]]
    abandon: Callable[[], None] = lambda: None


def _as_is(result: Any) -> Answer | Later:
    return result  # type: ignore[no-any-return]


@attrs.frozen
class Plan:
    """What a call does: ``write`` (or None) and how to ``answer`` from its result;
    ``free``, when its write decides no limit (:mod:`daemon.admission.limit_free`)."""

    write: Callable[[Tx], Any] | None = None
    answer: Callable[[Any], Answer | Later] = _as_is
    free: Callable[[], bool] | None = None


def answer_now(answer: Answer) -> Plan:
    """A plan that writes nothing and answers ``answer``."""
    return Plan(None, lambda _none: answer)


Planner = Callable[["Services", "Call", Any], Plan]


@attrs.define
class Call:
    """One call: who makes it, in which namespace, through which transport."""

    session: Session
    namespace: str
    #: Where server-push events go (the socket connection), or None (HTTP).
    events: EventSink | None = None
    #: Identifies the connection for subscriptions.
    owner: object = None

    @property
    def actor(self) -> str:
        """Who the audit trail names: the token's name, or ``open``."""
        return self.session.token_name or "open"

    def scope(self, queue: str) -> None:
        """Refuse a queue outside the session's scope, revealing nothing."""
        session = self.session
        if "*" not in session.queues and not session.in_scope(queue):  # "*": every queue
            raise Refused("forbidden", "queue is outside this token's scope")


@attrs.frozen
class Verb:
    """A verb: its name, who may call it, its argument class and planner."""

    name: str
    grants: tuple[str, ...]
    args: type
    plan: Planner
    #: Management verbs hide what the caller may not manage as not_found.
    manage: bool = False


VERBS: dict[str, Verb] = {}

#: Reading verbs accept any grant in the namespace.
ANY = ("produce", "consume", "manage", "set_admission_policy", "clear_admission_policy")


def verb(name: str, grants: tuple[str, ...], args: type, *, manage: bool = False):
    """Register a planner as verb ``name``."""

    def register(plan: Planner) -> Planner:
        if name in VERBS:
            raise RuntimeError(f"verb {name!r} registered twice")
        VERBS[name] = Verb(name, grants, args, plan, manage)
        return plan

    return register


@attrs.frozen
class NoArgs:
    """Arguments of a verb that takes none."""
