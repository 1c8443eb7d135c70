"""Producing: ``enqueue`` and ``enqueue_many``, the one path every producer takes.

A call is one store transaction: every job of it lands or none does. A
``unique_key`` held by a live job returns that job (``duplicate``) and writes
nothing; with ``debounce_ms`` a waiting duplicate is folded instead (payload
replaced, ``ready_at`` pushed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from actors import lifecycle as lc
from actors.errors import Refused, invalid
from daemon.store import jobs as sql
from daemon.store.database import Tx
from daemon.verbs.table import Call, Plan, verb
from daemon.wire import between, json_value, name, text

if TYPE_CHECKING:
    from daemon.core import Core

DEFAULT_PRIORITY = 32768
DEFAULT_MAX_ATTEMPTS = 25
MAX_BATCH = 1000


@attrs.frozen
class EnqueueArgs:
    """One job to enqueue (PROTOCOL.md, Producing)."""

    queue: str = attrs.field(validator=name)
    type: str = attrs.field(validator=name)
    payload: Any = attrs.field(factory=dict, validator=json_value)
    priority: int = attrs.field(default=DEFAULT_PRIORITY, validator=between(0, 65535))
    delay_ms: int | None = attrs.field(default=None, validator=between(0))
    ready_at: int | None = attrs.field(default=None, validator=between(0))
    max_attempts: int = attrs.field(default=DEFAULT_MAX_ATTEMPTS, validator=between(1, 100_000))
    lease_ms: int | None = attrs.field(default=None, validator=between(1, 86_400_000))
    unique_key: str | None = attrs.field(default=None, validator=text(255))
    debounce_ms: int | None = attrs.field(default=None, validator=between(0))
    budgets: list[Any] | None = None

    def __attrs_post_init__(self) -> None:
        if self.delay_ms is not None and self.ready_at is not None:
            raise invalid("delay_ms", "give delay_ms or ready_at, not both")
        if self.debounce_ms is not None and self.unique_key is None:
            raise invalid("debounce_ms", "debounce_ms needs a unique_key to fold on")
        if self.budgets:
            # Budgets arrive with the budgets feature; until then no key exists.
            raise invalid("budgets", f"unknown budget {_budget_key(self.budgets[0])!r}")


def _budget_key(binding: Any) -> str:
    return binding.get("key", "?") if isinstance(binding, dict) else "?"


@attrs.frozen
class EnqueueManyArgs:
    """A batch of jobs, admitted as a unit."""

    jobs: list[EnqueueArgs]

    def __attrs_post_init__(self) -> None:
        if not 1 <= len(self.jobs) <= MAX_BATCH:
            raise invalid("jobs", f"jobs must hold 1-{MAX_BATCH} jobs, got {len(self.jobs)}")


def _enqueue_one(
    core: Core, tx: Tx, namespace: str, a: EnqueueArgs, new_rows: list[sql.Row]
) -> dict[str, Any]:
    """Enqueue one job of a call; new rows without a unique key are inserted later,
    all at once, by the caller (rows with one go in at once, so a later job of
    the same call sees the key)."""
    now = tx.now_ms
    payload = sql.dumps(a.payload)
    if a.unique_key is not None:
        live = sql.find_live_unique(tx.conn, namespace, a.queue, a.unique_key)
        if live is not None:
            if a.debounce_ms is not None and live[sql.STATE] in (lc.SCHEDULED, lc.PENDING):
                lc.check("fold", live[sql.STATE], lc.SCHEDULED)
                folded = sql.fold(tx.conn, live, payload, now + a.debounce_ms, now)
                core.moved(tx, live, folded)
                return _result(folded, a.payload, duplicate=False, folded=True)
            # The stored payload, not this call's: a duplicate writes nothing.
            return {"job": sql.to_wire(live), "duplicate": True, "folded": False, "shed": False}
    if a.debounce_ms is not None:
        ready_at = now + a.debounce_ms
    elif a.delay_ms is not None:
        ready_at = now + a.delay_ms
    elif a.ready_at is not None:
        ready_at = a.ready_at
    else:
        ready_at = now
    row = (
        core.ids.mint(now), namespace, a.queue, a.type, payload, a.priority,
        lc.arrival_state(ready_at, now), 0, a.max_attempts,
        a.lease_ms or core.config.daemon.lease, ready_at, now, now, None, None, None,
        a.unique_key, None, None, None, None,
    )  # fmt: skip
    if a.unique_key is not None:
        sql.insert(tx.conn, [row])
    new_rows.append(row)
    core.ensure_queue(tx, namespace, a.queue)
    return _result(row, a.payload, duplicate=False, folded=False)


def _result(row: sql.Row, payload: Any, *, duplicate: bool, folded: bool) -> dict[str, Any]:
    job = sql.to_wire(row, payload)
    return {"job": job, "duplicate": duplicate, "folded": folded, "shed": False}


def enqueue_write(core: Core, call: Call, jobs: list[EnqueueArgs]) -> Callable[[Tx], list]:
    """The write that enqueues ``jobs`` in one transaction; every producer path uses it."""
    for job in jobs:
        call.scope(job.queue)
    if core.draining:
        raise Refused("shutting_down", "the daemon is shutting down")
    namespace = call.namespace

    def write(tx: Tx) -> list[dict[str, Any]]:
        new_rows: list[sql.Row] = []
        results = [_enqueue_one(core, tx, namespace, job, new_rows) for job in jobs]
        sql.insert(tx.conn, [r for r in new_rows if r[sql.UNIQUE_KEY] is None])
        core.added(tx, new_rows)
        return results

    return write


@verb("enqueue", ("produce",), EnqueueArgs)
def enqueue(core: Core, call: Call, a: EnqueueArgs) -> Plan:
    """Enqueue one job."""
    return Plan(enqueue_write(core, call, [a]), lambda results: results[0])


@verb("enqueue_many", ("produce",), EnqueueManyArgs)
def enqueue_many(core: Core, call: Call, a: EnqueueManyArgs) -> Plan:
    """Enqueue a batch; all of it lands or none does."""
    return Plan(enqueue_write(core, call, a.jobs), lambda results: {"results": results})
