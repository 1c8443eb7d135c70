"""Reading and session verbs: ``hello``, ``get``, ``list``, ``status``, ``subscribe``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors import lifecycle as lc
from actors.errors import Refused, invalid, not_found
from actors.limits import JOB_ID_LEN
from daemon import __version__
from daemon.verbs.args import between, name, text
from daemon.verbs.table import ANY, Call, NoArgs, Plan, answer_now, verb
from daemon.verbs.working import _queue_names

if TYPE_CHECKING:
    from daemon.services import Services
    from daemon.store.interface import JobRow

PROTOCOL_VERSION = 1


@attrs.frozen
class HelloArgs:
    token: str | None = None
    client: str | None = attrs.field(default=None, validator=text(200))


@verb("hello", (), HelloArgs)
def hello(core: Services, call: Call, a: HelloArgs) -> Plan:
    """Authenticate the connection (optional in open mode)."""
    session = core.auth.check(a.token)
    # The transport keeps the session object; bind it in place.
    target = call.session
    target.namespace, target.grants, target.queues = (
        session.namespace, session.grants, session.queues,
    )  # fmt: skip
    target.token_name, target.authenticated = session.token_name, True
    return answer_now({**target.describe(), "server": f"sluicegate/{__version__}",
            "protocol": PROTOCOL_VERSION})  # fmt: skip


@attrs.frozen
class GetArgs:
    job_id: str = attrs.field(validator=text(JOB_ID_LEN))


def job_of(core: Services, call: Call, job_id: str) -> JobRow:
    """The caller's job ``job_id``: ``not_found`` if absent or another namespace's,
    ``forbidden`` in a queue outside the token's scope."""
    row = core.store.jobs.get(call.namespace, job_id)
    if row is None:
        raise not_found(f"job {job_id!r}")
    call.scope(row.queue)
    return row


@verb("get", ANY, GetArgs)
def get(core: Services, call: Call, a: GetArgs) -> Plan:
    """One job by id."""
    return answer_now({"job": core.job_wire(job_of(core, call, a.job_id))})


def _status(_inst: Any, attr: attrs.Attribute, value: str | None) -> None:
    if value is not None and value not in lc.STATES:
        raise invalid(attr.name, f"status must be one of {', '.join(lc.STATES)}")


@attrs.frozen
class ListArgs:
    queue: str | None = attrs.field(default=None, validator=name)
    status: str | None = attrs.field(default=None, validator=_status)
    limit: int = attrs.field(default=100, validator=between(1, 1000))
    after: str | None = attrs.field(default=None, validator=text(JOB_ID_LEN))


def page(core: Services, call: Call, queue: str | None, status: str | None, limit: int,
         after: str | None) -> dict[str, Any]:  # fmt: skip
    """A page of jobs in id order, with the cursor of the next page."""
    if queue is not None:
        call.scope(queue)
    rows = core.store.jobs.list_jobs(
        call.namespace, queue=queue, state=status, after=after, limit=limit + 1
    )
    scanned = rows[:limit]
    # The cursor is the last row scanned, not the last one shown: a page whose
    # rows are all outside the token's scope must not end the listing.
    nxt = scanned[-1].id if len(rows) > limit else None
    shown = [r for r in scanned if call.session.in_scope(r.queue)]
    now = core.clock.now_ms()
    return {"jobs": [core.job_wire(r, now) for r in shown], "next": nxt}


@verb("list", ANY, ListArgs)
def list_(core: Services, call: Call, a: ListArgs) -> Plan:
    """Jobs in id order."""
    return answer_now(page(core, call, a.queue, a.status, a.limit, a.after))


def queue_rows(core: Services, call: Call) -> list[dict[str, Any]]:
    """Every queue of the caller's namespace in its scope, with counts."""
    counts = core.counts.namespace(call.namespace)
    names = {q for ns, q in core.known_queues if ns == call.namespace} | set(counts)
    rows = []
    for queue in sorted(names):
        if call.session.in_scope(queue):
            c = counts.get(queue) or dict.fromkeys(lc.STATES, 0)
            rows.append({"queue": queue, **{s: c[s] for s in lc.STATES}})
    return rows


def _quota(core: Services, namespace: str) -> dict[str, Any] | None:
    """``status.quota``: the document in force and usage against its limits, or
    None without one (``{"error"}`` while it cannot be read: fail closed)."""
    actor = core.namespaces.find(namespace)
    if actor.broken is not None:
        return {"error": actor.broken}
    if actor.quota is None:
        return None
    counts = core.counts
    now = core.clock.now_ms()
    quota = actor.quota
    monthly = actor.monthly
    usage: dict[str, Any] = {
        "pending": counts.total(namespace, lc.SCHEDULED) + counts.total(namespace, lc.PENDING),
        "running": counts.total(namespace, lc.RUNNING),
        "completed": counts.total(namespace, lc.COMPLETED),
        "dead": counts.total(namespace, lc.DEAD),
        "enqueue_tokens": None if actor.rate is None else actor.rate.available(now),
        "waiting_claims": actor.waiting,
        "queues": sum(1 for ns, _q in core.known_queues if ns == namespace),
        # The door's buckets now: tokens left (negative: in debt after deliveries).
        "door": core.door.describe(namespace),
        # Measured on ticks: None until the first measurement.
        "retained_bytes": actor.storage.measured,
        "storage_blocked": actor.storage.held and quota.max_retained_bytes is not None,
        "monthly_jobs": monthly.current(now),
        "month": None if monthly.current(now) is None else monthly.month,
        "monthly_blocked": monthly.exhausted(quota.monthly_jobs_quota, now),
    }
    return {**quota.to_dict(), "usage": usage}


@verb("status", ANY, NoArgs)
def status(core: Services, call: Call, _a: NoArgs) -> Plan:
    """The namespace at a glance."""
    return answer_now(
        {
            "namespace": call.namespace,
            "queues": queue_rows(core, call),
            "budgets": [
                b.to_wire(core.clock.now_ms())
                for (ns, _key), b in sorted(core.budgets.items())
                if ns == call.namespace
            ],
            "quota": _quota(core, call.namespace),
            "daemon": core.version_info(),
        }
    )


@attrs.frozen
class SubscribeArgs:
    queues: list[str] = attrs.field(validator=_queue_names)


@verb("subscribe", ("consume",), SubscribeArgs)
def subscribe(core: Services, call: Call, a: SubscribeArgs) -> Plan:
    """Doorbell events for ``queues`` on this connection."""
    if call.events is None:
        raise Refused("invalid_argument", "subscribe needs the socket transport", field="op")
    for queue in a.queues:
        call.scope(queue)
    core.router.subscribe(call.owner, [(call.namespace, q) for q in a.queues], call.events)
    return answer_now({})
