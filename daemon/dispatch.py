"""Calling a verb: the checks every call passes, in PROTOCOL.md's order.

1. naming another namespace without ``operator``: ``forbidden``;
2. a verb the session is not granted: ``forbidden``;
3. arguments structured strictly (``invalid_argument`` naming the field);
4. the verb itself checks queue scope and ownership of what it names;
5. an admin write, once planned, takes a token of its caller's admin write
   bucket (:mod:`daemon.admission.admin_limit`);
6. ``answer: "minimal"`` (the verbs of :data:`MINIMAL_VERBS`) shrinks the
   answer's job object to ``{id, status, lease?}``.

:func:`prepare` does the checks and plans the call; :func:`dispatch` runs the
plan to its answer (HTTP); the socket runs plans itself, submitting their writes
with a callback. An unexpected exception becomes an ``internal`` refusal with a
logged reference, never a dead connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors import lifecycle as lc
from actors.errors import Refused, internal_error, invalid
from actors.limits import NAME_RE, NAME_RULE
from daemon.admission.admin_limit import ADMIN_WRITES
from daemon.session import Session
from daemon.verbs import VERBS, Call
from daemon.verbs.args import structure
from daemon.verbs.table import Later, Plan

if TYPE_CHECKING:
    from actors.router import EventSink
    from daemon.services import Services


def prepare(
    core: Services,
    session: Session,
    op: Any,
    args: dict[str, Any],
    *,
    events: EventSink | None = None,
    owner: object = None,
    client: str | None = None,
    door: bool = True,
) -> Plan:
    """Check a call and plan verb ``op`` with ``args`` (without ``id``/``op``).

    Synchronous: every refusal that needs no write is raised here. ``client``
    names an HTTP caller in open mode (its address), for the admin write limit.
    ``door=False`` skips the request bucket: the board charges one token per
    page, not one per verb it reads with.
    """
    verb = VERBS.get(op) if isinstance(op, str) else None
    if verb is None:
        if op is None:
            raise invalid("op", "op is required")
        raise invalid("op", f"unknown op {op!r}" if isinstance(op, str) else "op must be a string")
    if verb.name != "hello" and not session.authenticated:
        raise Refused("unauthenticated", "say hello with a token first")
    namespace = session.namespace
    if "namespace" in args:
        target = args.pop("namespace")
        if not isinstance(target, str) or not NAME_RE.match(target):
            raise invalid("namespace", f"namespace must be {NAME_RULE}")
        if target != namespace:
            if not session.has("operator"):
                raise Refused("forbidden", "naming another namespace needs the operator grant")
            namespace = target
    if door and verb.name != "hello":
        core.door.request(namespace)  # one token per authenticated request
    if verb.grants and not session.has_any(verb.grants):
        raise Refused("forbidden", f"this token is not granted {verb.name!r}")
    small = _minimal_asked(verb.name, args)
    parsed = structure(args, verb.args)
    try:
        plan = verb.plan(core, Call(session, namespace, events, owner), parsed)
    except Refused:
        raise
    except Exception as exc:
        raise internal_error(exc) from exc
    if small:
        plan = _minimal(plan, parsed)
    if verb.name in ADMIN_WRITES:
        core.admin_writes.charge(session, client)
        plan = _announced(plan, core)
    return plan


#: Verbs that take ``answer: "minimal"`` (PROTOCOL.md, "Smaller answers").
MINIMAL_VERBS = frozenset({"enqueue", "complete", "fail", "heartbeat", "release"})
ANSWER_FORMS = ("full", "minimal")


def _minimal_asked(verb: str, args: dict[str, Any]) -> bool:
    """Whether the call asks for the minimal answer (``answer`` taken out of
    ``args``; another verb keeps it, and its strict structuring refuses it)."""
    if verb not in MINIMAL_VERBS or "answer" not in args:
        return False
    form = args.pop("answer")
    if form not in ANSWER_FORMS:
        raise invalid("answer", 'answer must be "full" or "minimal"')
    return form == "minimal"


def _minimal(plan: Plan, parsed: Any) -> Plan:
    """``plan`` answering ``{job: {id, status, lease?}}`` and its other top-level
    fields, instead of the whole job object."""
    full = plan.answer

    def small(result: Any) -> Any:
        out = full(result)
        job = out.get("job")
        if job is None:  # heartbeat answers no job: its arguments name it, still leased
            brief = {"id": parsed.job_id, "status": lc.RUNNING, "lease": parsed.lease}
        else:
            brief = {"id": job["id"], "status": job["status"]}
            if job.get("lease") is not None:
                brief["lease"] = job["lease"]
        return {**out, "job": brief}

    return attrs.evolve(plan, answer=small)


def _announced(plan: Plan, core: Services) -> Plan:
    """``plan`` telling the other daemons, once its write committed, that a
    limit's settings changed (its answer runs after the commit, and only then)."""
    full = plan.answer

    def told(result: Any) -> Any:
        core.doorbell.limits_changed()
        return full(result)

    return Plan(plan.write, told)


def answer(plan: Plan, result: Any) -> dict[str, Any] | Later:
    """The plan's answer to its write's ``result``; a bug becomes ``internal``."""
    try:
        return plan.answer(result)
    except Refused:
        raise
    except Exception as exc:
        raise internal_error(exc) from exc


async def dispatch(
    core: Services,
    session: Session,
    op: Any,
    args: dict[str, Any],
    *,
    events: EventSink | None = None,
    owner: object = None,
    client: str | None = None,
) -> dict[str, Any]:
    """Run verb ``op`` for ``session`` to its answer (the HTTP transport, tests)."""
    plan = prepare(core, session, op, args, events=events, owner=owner, client=client)
    result = await core.writer.write(plan.write, plan.free) if plan.write is not None else None
    reply = answer(plan, result)
    if isinstance(reply, Later):
        try:
            return await reply.run()
        except Refused:
            raise
        except Exception as exc:
            raise internal_error(exc) from exc
    return reply
