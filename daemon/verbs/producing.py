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
from actors.bindings import stored
from actors.budget import BudgetSpec, SpecError, parse_spec
from actors.budgets import Budget
from actors.errors import Refused, invalid
from actors.limits import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    LEASE_MS,
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_BINDINGS,
    MAX_DURATION_MS,
    MAX_INSTANT_MS,
    MAX_TOKENS,
    PRIORITY,
    UNIQUE_KEY_LEN,
)
from daemon.store.interface import JobRow, Tx
from daemon.store.rows import as_row, dumps, to_wire
from daemon.verbs.args import (
    between,
    group,
    json_value,
    name,
    text,
)
from daemon.verbs.budgets import create_budget, strategy_refused
from daemon.verbs.fast_checks import fast_enqueue, fast_enqueue_many, register_fast
from daemon.verbs.table import Call, Plan, verb

if TYPE_CHECKING:
    from daemon.services import Services


def _create_spec(value: Any) -> BudgetSpec:
    """``create_with``'s budget, or ``invalid_argument`` in seed 003's words."""
    try:
        return parse_spec(value)
    except SpecError as exc:
        if exc.field.partition(".")[0] == "strategy":
            raise strategy_refused(exc, "create_with.strategy") from None
        if exc.field == "enforce":
            raise invalid("create_with.enforce", "enforce must be true or false") from None
        if exc.field == "allocation":
            raise invalid(
                "create_with.allocation", f"allocation must be an integer from 1 to {MAX_TOKENS}"
            ) from None
        raise invalid(
            "create_with", "create_with must be an object {allocation, strategy}"
        ) from None


def _create_with(_inst: Any, _attr: attrs.Attribute, value: Any) -> None:
    if value is not None:
        _create_spec(value)


@attrs.frozen
class BindingArgs:
    """A job's binding to a budget (seed 003)."""

    key: str = attrs.field(validator=name)
    cost: int = attrs.field(default=1, validator=between(1, MAX_TOKENS))
    create_with: Any = attrs.field(default=None, validator=_create_with)

    def spec(self) -> BudgetSpec:
        """The budget ``create_with`` describes (validated already)."""
        return _create_spec(self.create_with)


def _bindings(_inst: Any, attr: attrs.Attribute, value: list[BindingArgs] | None) -> None:
    if value is None:
        return
    if len(value) > MAX_BINDINGS:
        raise invalid(attr.name, f"a job binds to at most {MAX_BINDINGS} budgets")
    seen: set[str] = set()
    for binding in value:
        if binding.key in seen:
            raise invalid(attr.name, f"budget {binding.key!r} is bound twice")
        seen.add(binding.key)


@attrs.frozen
class EnqueueArgs:
    """One job to enqueue (PROTOCOL.md, Producing)."""

    queue: str = attrs.field(validator=name)
    type: str = attrs.field(validator=name)
    payload: Any = attrs.field(factory=dict, validator=json_value)
    priority: int = attrs.field(default=DEFAULT_PRIORITY, validator=between(*PRIORITY))
    delay_ms: int | None = attrs.field(default=None, validator=between(0, MAX_DURATION_MS))
    ready_at: int | None = attrs.field(default=None, validator=between(0, MAX_INSTANT_MS))
    max_attempts: int = attrs.field(default=DEFAULT_MAX_ATTEMPTS, validator=between(*MAX_ATTEMPTS))
    lease_ms: int | None = attrs.field(default=None, validator=between(*LEASE_MS))
    unique_key: str | None = attrs.field(default=None, validator=text(UNIQUE_KEY_LEN))
    debounce_ms: int | None = attrs.field(default=None, validator=between(0, MAX_DURATION_MS))
    budgets: list[BindingArgs] | None = attrs.field(default=None, validator=_bindings)
    group: str | None = attrs.field(default=None, validator=group)

    def __attrs_post_init__(self) -> None:
        if self.delay_ms is not None and self.ready_at is not None:
            raise invalid("delay_ms", "give delay_ms or ready_at, not both")
        if self.debounce_ms is not None and self.unique_key is None:
            raise invalid("debounce_ms", "debounce_ms needs a unique_key to fold on")


@attrs.frozen
class EnqueueManyArgs:
    """A batch of jobs, admitted as a unit."""

    jobs: list[EnqueueArgs]

    def __attrs_post_init__(self) -> None:
        if not 1 <= len(self.jobs) <= MAX_BATCH:
            raise invalid("jobs", f"jobs must hold 1-{MAX_BATCH} jobs, got {len(self.jobs)}")


register_fast(EnqueueArgs, fast_enqueue)
register_fast(EnqueueManyArgs, fast_enqueue_many)


def resolve_bindings(core: Services, tx: Tx, actor: str, namespace: str,
                     bindings: list[BindingArgs]) -> list[tuple[Budget, int]]:  # fmt: skip
    """Each binding's budget (made from ``create_with`` when missing) and cost.

    An unknown key without ``create_with``, or a cost the budget can never
    pay (above its allocation or its burst), is ``invalid_argument``.
    """
    resolved = []
    for binding in bindings:
        budget = core.budgets.get((namespace, binding.key))
        if budget is None:
            if binding.create_with is None:
                raise invalid(
                    "budgets", f"unknown budget {binding.key!r} (create it, or give create_with)"
                )
            budget = create_budget(core, tx, actor, namespace, binding.key, binding.spec())
        check_cost(budget, binding.cost)
        resolved.append((budget, binding.cost))
    return resolved


def check_cost(budget: Budget, cost: int) -> None:
    """``invalid_argument`` when ``budget`` can never pay ``cost``."""
    spec = budget.spec
    if cost > spec.allocation:
        raise invalid(
            "budgets",
            f"cost {cost} is above the allocation {spec.allocation} of budget {budget.key!r}",
        )
    if cost > spec.cap:
        raise invalid(
            "budgets", f"cost {cost} is above the burst {spec.cap} of budget {budget.key!r}"
        )


def _enqueue_one(
    core: Services, tx: Tx, call: Call, a: EnqueueArgs, new_rows: list[JobRow],
    text: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Enqueue one job of a call; new rows without a unique key are inserted later,
    all at once, by the caller (rows with one go in at once, so a later job of
    the same call sees the key)."""
    now = tx.now_ms
    namespace = call.namespace
    payload = dumps(a.payload) if text is None else text
    if a.unique_key is not None:
        live = tx.store.jobs.find_live_unique(namespace, a.queue, a.unique_key)
        if live is not None:
            if a.debounce_ms is not None and live.state in (lc.SCHEDULED, lc.PENDING):
                lc.check("fold", live.state, lc.SCHEDULED)
                if live.parked_on is not None:
                    core.budget_gate.unparked_by_fold(tx, live)
                folded = tx.store.jobs.fold(live, payload, now + a.debounce_ms, now)
                return _result(folded, a.payload, duplicate=False, folded=True)
            # The stored payload, not this call's: a duplicate writes nothing.
            job = core.job_wire(live, now)
            return {"job": job, "duplicate": True, "folded": False, "shed": False}
    if a.debounce_ms is not None:
        ready_at = now + a.debounce_ms
    elif a.delay_ms is not None:
        ready_at = now + a.delay_ms
    elif a.ready_at is not None:
        ready_at = a.ready_at
    else:
        ready_at = now
    state = lc.arrival_state(ready_at, now)
    rings = core.policies.groups.rings  # a queue counting groups stores the default as ''
    bound: str | None = None
    parked_on: str | None = None
    if a.budgets:
        resolved = resolve_bindings(core, tx, call.actor, namespace, a.budgets)
        bound = stored(tuple((b.key, cost) for b, cost in resolved))
        parked_on = core.admission.bind(tx, (namespace, a.queue), resolved, state == lc.PENDING,
                                        a.group or "")  # fmt: skip
    # JobRow's fields in order (as_row: a keyword call costs an enqueue 3 µs more).
    row = as_row((
        core.ids.mint(now), namespace, a.queue, a.type, payload, a.priority, state, 0,
        a.max_attempts, a.lease_ms or core.config.daemon.lease, ready_at, now, now, None, None,
        None, a.unique_key, bound, None, None, None, parked_on,
        a.group if a.group is not None or not rings or (namespace, a.queue) not in rings else "",
    ))  # fmt: skip
    if a.unique_key is not None:
        tx.store.jobs.insert([row])
    new_rows.append(row)
    ensure_queue(core.known_queues, tx, namespace, a.queue)
    return _result(row, a.payload, duplicate=False, folded=False, core=core, now=now)


def ensure_queue(known: set[tuple[str, str]], tx: Tx, namespace: str, queue: str) -> None:
    """Record a queue at its first enqueue."""
    key = (namespace, queue)
    if key not in known:
        tx.store.queues.ensure(namespace, queue, tx.now_ms)
        # Known at once, so the batch's other jobs of the queue do not record it
        # again; forgotten if the write is rolled back.
        known.add(key)
        tx.undo(lambda: known.discard(key))


def _result(row: JobRow, payload: Any, *, duplicate: bool, folded: bool,
            core: Services | None = None, now: int = 0) -> dict[str, Any]:  # fmt: skip
    job = to_wire(row, payload)
    if core is not None and row.budgets is not None:
        job["admission"] = core.budget_gate.admission(row, now)
    return {"job": job, "duplicate": duplicate, "folded": folded, "shed": False}


def enqueue_write(core: Services, call: Call, jobs: list[EnqueueArgs]) -> Callable[[Tx], list]:
    """The write that enqueues ``jobs`` in one transaction; every producer path uses it."""
    for job in jobs:
        call.scope(job.queue)
    if core.draining:
        raise Refused("shutting_down", "the daemon is shutting down")
    admission = core.admission
    texts = admission.enqueue(call.namespace, [job.payload for job in jobs],
                              {job.queue for job in jobs})  # fmt: skip

    def write(tx: Tx) -> list[dict[str, Any]]:
        # Quota admission first: before dedup, so a duplicate is refused (or
        # shed) while the namespace is over quota, as seed 000 says.
        live, reason = admission.admit(tx, call.namespace, len(jobs), jobs[0].queue)
        new_rows: list[JobRow] = []
        results = [
            _enqueue_one(core, tx, call, job, new_rows, texts[i] if texts else None) if i < live
            else _shed_one(core, tx, call, job, reason or "", new_rows)
            for i, job in enumerate(jobs)
        ]  # fmt: skip
        tx.store.jobs.insert([r for r in new_rows if r.unique_key is None])
        return results

    return write


def _shed_one(core: Services, tx: Tx, call: Call, a: EnqueueArgs, reason: str,
              new_rows: list[JobRow]) -> dict[str, Any]:  # fmt: skip
    """``on_excess = "drop"``: the job is written dead at once, shed by the quota.

    Never live, so no worker sees it and nothing retries it; it holds no
    unique or debounce key, so it blocks no later enqueue of the same work.
    Its bindings are kept as given (none is resolved or created), for a replay.
    """
    now = tx.now_ms
    namespace = call.namespace
    bound = None
    if a.budgets:
        bound = stored(tuple((b.key, b.cost) for b in a.budgets))
    error = f"quota: namespace '{namespace}' over {core.quotas.limit_text(namespace, reason)}"
    dead = dumps({"at": now, "reason": "shed", "shed": "quota", "limit": reason})
    row = as_row((
        core.ids.mint(now), namespace, a.queue, a.type, dumps(a.payload), a.priority,
        lc.DEAD, 0, a.max_attempts, a.lease_ms or core.config.daemon.lease, now, now, now, now,
        None, None, None, bound, error, None, dead, None, a.group,
    ))  # fmt: skip
    new_rows.append(row)
    ensure_queue(core.known_queues, tx, namespace, a.queue)
    result = _result(row, a.payload, duplicate=False, folded=False)
    result["shed"] = True
    return result


@verb("enqueue", ("produce",), EnqueueArgs)
def enqueue(core: Services, call: Call, a: EnqueueArgs) -> Plan:
    """Enqueue one job."""
    return Plan(enqueue_write(core, call, [a]), lambda results: results[0],
                core.limit_free.enqueue(call.namespace, [a]))  # fmt: skip


@verb("enqueue_many", ("produce",), EnqueueManyArgs)
def enqueue_many(core: Services, call: Call, a: EnqueueManyArgs) -> Plan:
    """Enqueue a batch; all of it lands or none does."""
    return Plan(enqueue_write(core, call, a.jobs), lambda results: {"results": results},
                core.limit_free.enqueue(call.namespace, a.jobs))  # fmt: skip
