"""Dead letters: ``dead_list`` and ``dead_replay``.

A replay puts the same job (same id) back to pending with ``attempts`` 0, in
one transaction for the whole call. A replayed job whose ``unique_key`` is now
held by another live job is answered as that job's duplicate and stays dead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors import lifecycle as lc
from actors.errors import Refused, invalid, not_found
from actors.limits import JOB_ID_LEN
from daemon.store.interface import JobRow, Tx
from daemon.store.rows import to_wire
from daemon.verbs.args import between, name, text
from daemon.verbs.reading import page
from daemon.verbs.table import Call, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services

MAX_REPLAY = 1000


@attrs.frozen
class DeadListArgs:
    queue: str | None = attrs.field(default=None, validator=name)
    limit: int = attrs.field(default=100, validator=between(1, 1000))
    after: str | None = attrs.field(default=None, validator=text(JOB_ID_LEN))


@verb("dead_list", ("manage",), DeadListArgs)
def dead_list(core: Services, call: Call, a: DeadListArgs) -> Plan:
    """Dead letters in id order."""
    return answer_now(page(core, call, a.queue, lc.DEAD, a.limit, a.after))


def _ids(_inst: Any, attr: attrs.Attribute, value: list[str] | None) -> None:
    if value is not None:
        if not 1 <= len(value) <= MAX_REPLAY:
            raise invalid(attr.name, f"job_ids must hold 1-{MAX_REPLAY} ids")
        for job_id in value:
            text(JOB_ID_LEN)(_inst, attr, job_id)


@attrs.frozen
class DeadReplayArgs:
    job_ids: list[str] | None = attrs.field(default=None, validator=_ids)
    all: bool = False
    queue: str | None = attrs.field(default=None, validator=name)
    limit: int = attrs.field(default=MAX_REPLAY, validator=between(1, MAX_REPLAY))
    #: With ``all``: continue after this id (the ``next`` of the previous answer).
    after: str | None = attrs.field(default=None, validator=text(JOB_ID_LEN))

    def __attrs_post_init__(self) -> None:
        if (self.job_ids is None) == (not self.all):
            raise invalid("job_ids", "give job_ids or all: true")


@verb("dead_replay", ("manage", "produce"), DeadReplayArgs)
def dead_replay(core: Services, call: Call, a: DeadReplayArgs) -> Plan:
    """Replay dead letters; ``all`` replays up to ``limit`` after ``after`` and says
    whether more remain (``remaining``, with the cursor ``next``)."""
    if a.queue is not None:
        call.scope(a.queue)
    namespace = call.namespace

    def write(tx: Tx) -> dict[str, Any]:
        if a.all:
            ids = tx.store.jobs.dead_ids(namespace, a.queue, a.after, a.limit + 1)
            remaining = len(ids) > a.limit
            ids = ids[: a.limit]
        else:
            ids, remaining = list(dict.fromkeys(a.job_ids or [])), False
        rows = []
        for job_id in ids:
            row = tx.store.jobs.get(namespace, job_id)
            if row is None:
                raise not_found(f"job {job_id!r}")
            call.scope(row.queue)
            if row.state != lc.DEAD:
                raise Refused(
                    "conflict", f"job {job_id!r} is {row.state}, not dead",
                    job_status=row.state,
                )  # fmt: skip
            rows.append(row)
        # A replay is an enqueue: the door's blocks, then quota admission (drop:
        # the over-quota ones stay dead and are answered shed).
        if rows:
            core.door.blocks(namespace)
        queue = a.queue or _first_queue(rows)
        live, _reason = core.admission.admit(tx, namespace, len(rows), queue)
        results = []
        for i, row in enumerate(rows):
            if i >= live:
                results.append({"job": to_wire(row), "duplicate": False, "folded": False,
                                "shed": True})  # fmt: skip
                continue
            key = row.unique_key
            live_job = key and tx.store.jobs.find_live_unique(namespace, row.queue, key)
            if live_job:
                results.append({"job": to_wire(live_job), "duplicate": True, "folded": False,
                                "shed": False})  # fmt: skip
                continue
            if row.budgets is not None:
                core.budget_gate.check_payable(row)
            grouped = (namespace, row.queue) in core.policies.groups.rings
            after = tx.store.jobs.replay(row, tx.now_ms, grouped)
            job = core.job_wire(after, tx.now_ms)
            results.append({"job": job, "duplicate": False, "folded": False, "shed": False})
        # A dead letter that stays dead (its unique key is held) would come
        # back first in every batch; the cursor moves past it.
        return {"results": results, "remaining": remaining, "next": ids[-1] if remaining else None}

    if core.draining:
        raise Refused("shutting_down", "the daemon is shutting down")
    return Plan(write)


def _first_queue(rows: list[JobRow]) -> str:
    return rows[0].queue if rows else ""
