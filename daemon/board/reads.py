"""The board's reads: verbs of the verb table, for one signed-in session.

A page calls several reading verbs, and a live stream calls them again on
every change; charging the door's request bucket for each would make an open
board drain a tenant's request rate. So :func:`read` runs a reading verb
through the dispatcher's checks without the door's charge, and the board
charges the door once per HTTP request (:func:`charge`). Writes go
through :func:`daemon.dispatch.dispatch` unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.errors import Refused
from actors.limits import NAME_RE
from daemon.dispatch import answer, dispatch, prepare
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.services import Services

#: The verbs the board reads with; each answers without writing.
READS = frozenset(
    {
        "status",
        "list",
        "get",
        "admission_status",
        "queue_list",
        "policy_list",
        "policy_get",
        "budget_list",
        "budget_get",
        "quota_get",
        "dead_list",
        "what_if",
        "audit_list",
    }
)


def target_namespace(session: Session, namespace: str | None) -> str:
    """The namespace a call names, checked as the dispatcher checks it."""
    if namespace is None or namespace == session.namespace:
        return session.namespace
    if not NAME_RE.match(namespace):
        raise Refused("not_found", f"no namespace {namespace!r}")
    if not session.has("operator"):
        raise Refused("forbidden", "naming another namespace needs the operator grant")
    return namespace


def read(
    core: Services, session: Session, op: str, namespace: str | None = None, **args: Any
) -> dict[str, Any]:
    """Run reading verb ``op`` for ``session`` in ``namespace``; synchronous.

    The dispatcher's own checks, in its order, without the door's charge.
    """
    if op not in READS:
        raise RuntimeError(f"{op} is not a board read")
    if namespace is not None:
        args["namespace"] = namespace
    plan = prepare(core, session, op, args, door=False)
    if plan.write is not None:
        raise RuntimeError(f"{op} planned a write")
    reply = answer(plan, None)
    assert isinstance(reply, dict)
    return reply


def maybe(
    core: Services, session: Session, op: str, namespace: str | None = None, **args: Any
) -> dict[str, Any] | None:
    """:func:`read`, or None when the token may not see it (a page leaves that
    section out rather than failing whole)."""
    try:
        return read(core, session, op, namespace, **args)
    except Refused as refused:
        if refused.code in ("forbidden", "not_found"):
            return None
        raise


def charge(core: Services, session: Session, namespace: str | None) -> None:
    """One board request: one token of the namespace's request bucket."""
    core.door.request(target_namespace(session, namespace))


async def write(
    core: Services, session: Session, op: str, namespace: str, *, client: str | None, **args: Any
) -> dict[str, Any]:
    """A state-changing verb, through the dispatcher like any other request
    (``client``: the HTTP caller's address, for the admin write limit)."""
    if namespace != session.namespace:
        args["namespace"] = namespace
    return await dispatch(core, session, op, args, client=client)
