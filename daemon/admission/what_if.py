"""Foresight: what a proposed limit change would do, read from the daemon's state.

``what_if`` (PROTOCOL.md, "Foresight"; docs/protocol.md) previews a
``quota_set``, ``policy_set``, ``budget_put``/``budget_patch`` or
``queue_configure`` without writing anything. This module reads the state the
change acts on (counts, a policy's window usage, a budget's pool, the
namespace's quota and rate bucket), builds the limits before and after as
:class:`actors.flow.Limits` (copies: nothing live is changed), and answers
from them with :mod:`actors.flow`:

- the scope: a queue (``policy_set``, ``queue_configure``), the namespace
  (``quota_set``) or a budget's waiting jobs (``budget_*``);
- ``admissible_now``: the scope's waiting jobs the limits admit now;
  ``deferred_jobs`` / ``released_jobs``: how many fewer / more that is;
- ``shed_next_enqueues``: whether the namespace's next enqueue would be shed
  (``on_excess = drop``); ``next_enqueue`` says what would happen to it;
- ``head_next_eligible_at``: when the head of the scope may next be admitted;
- ``flow``: the backlog's admissions per hour for 24 hours, after the change.

Every assumption the answer rests on is stated in ``assumptions``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

import attrs

from actors import lifecycle as lc
from actors.budget import BudgetSpec, TokenPool
from actors.budgets import Budget, Budgets
from actors.clock import Clock
from actors.counts import QueueCounts
from actors.errors import Refused
from actors.flow import (
    Limits,
    Meter,
    Slots,
    admissible,
    copy_pool,
    flow,
    next_eligible_at,
)
from actors.history import History
from actors.namespace import NamespaceActor, Namespaces
from actors.policy import Policy, PolicyState
from actors.quota import Quota
from actors.window import HOUR_MS
from daemon.admission.budget_gate import BudgetGate
from daemon.admission.policies import Policies
from daemon.admission.quotas import Quotas
from daemon.store.interface import JobRow, Store

QueueKey = tuple[str, str]


@attrs.frozen
class Sources:
    """What a preview reads (the verb hands the daemon's services)."""

    clock: Clock
    store: Store
    counts: QueueCounts
    namespaces: Namespaces
    policies: Policies
    budgets: Budgets
    budget_gate: BudgetGate
    quotas: Quotas
    history: History
    #: Running jobs' rows by id (the transition step's map).
    running: dict[str, JobRow]


@attrs.define
class Preview:
    """The limits of a scope before and after a change, and what else the answer says."""

    before: Limits
    after: Limits
    now_ms: int
    assumptions: list[str]
    budget_available: tuple[float | None, float | None] = (None, None)
    next_enqueue: str = "admitted"

    def answer(self, op: str) -> dict[str, Any]:
        """The ``what_if`` answer for change ``op``."""
        now = self.now_ms
        before = admissible(self.before.copy(), now)
        after = admissible(self.after.copy(), now)
        run = flow(self.after, now)
        notes = list(self.assumptions)
        if run.cut_at is not None:
            notes.append(f"the flow is cut at {run.cut_at} ms: more events than are simulated")
        if run.stalled:
            notes.append("the backlog then waits for a limit that nothing in the run releases")
        return {
            "op": op,
            "now": {
                "deferred_jobs": max(0, before - after),
                "released_jobs": max(0, after - before),
                "shed_next_enqueues": self.next_enqueue == "shed",
                "next_enqueue": self.next_enqueue,
                "admissible_now": {"before": before, "after": after},
                "budget_available": {
                    "before": self.budget_available[0], "after": self.budget_available[1],
                },
                "head_next_eligible_at": next_eligible_at(self.after.copy(), now),
            },
            "flow": [
                {"hour_start": now + k * HOUR_MS, "admitted": n}
                for k, n in enumerate(run.admitted)
            ],
            "assumptions": notes,
        }  # fmt: skip


_COMMON = (
    "no new arrivals; the hours are [now + k h, now + (k+1) h), k = 0..23",
    "every waiting job is admitted as soon as every limit allows (a worker is always waiting)",
    "a shadowed limit (enforce = false) holds nothing back: previewed as no limit",
)


def _runs(src: Sources, keys: Iterable[QueueKey], notes: list[str], *limits: Limits) -> None:
    """Give ``limits`` the scope's median run time where a completion matters (an
    in-flight cap, a ``while_in_flight`` pool), noted as an assumption."""
    if any(one.slots or (one.pool is not None and not one.pool.time_based) for one in limits):
        median = _duration(src, keys, notes)
        for one in limits:
            one.duration_ms = median


def _duration(src: Sources, keys: Iterable[QueueKey], notes: list[str]) -> int | None:
    """The median run time of the scope's recent completions, noted as an assumption."""
    series = [src.history.durations.median(k) for k in keys]
    found = [m for m in series if m is not None]
    if not found:
        notes.append("no completion observed since the daemon started: running jobs are "
                     "assumed to hold their in-flight slots for the whole 24 hours")  # fmt: skip
        return None
    median = int(statistics.median_low(m for m, _n in found))
    seen = sum(n for _m, n in found)
    source = (
        f"the median run time of the last {seen} completions observed" if len(found) == 1
        else f"the median of {len(found)} queues' median run times ({seen} completions)"
    )  # fmt: skip
    notes.append(f"jobs complete {median} ms after their claim: {source}")
    return median


def _meters(state: PolicyState | None, now_ms: int) -> list[Meter]:
    if state is None or state.policy is None or not state.policy.enforce:
        return []  # a shadowed policy holds nothing back
    state.roll(now_ms)  # what status() does on every read: the current window
    return [Meter(m.limit, m.start, m.end, m.used) for m in state.meters]


def _namespace_slots(actor: NamespaceActor, running: int, quota: Quota | None) -> list[Slots]:
    if quota is None or quota.max_running is None or not quota.enforce:
        return []  # a shadowed quota holds nothing back
    return [Slots(quota.max_running, running + actor.running_extra)]


def _queue_limits(src: Sources, key: QueueKey, state: PolicyState | None,
                  quota: Quota | None, quota_broken: bool, now: int) -> Limits:  # fmt: skip
    """The limits of one queue's waiting jobs under ``state`` and ``quota``."""
    namespace = key[0]
    actor = src.namespaces.find(namespace)
    running = src.counts.get(key, lc.RUNNING)
    slots = _namespace_slots(actor, src.counts.total(namespace, lc.RUNNING), quota)
    policy = state.policy if state is not None else None
    if policy is not None and policy.enforce and policy.max_in_flight is not None:
        assert state is not None
        slots.append(Slots(policy.max_in_flight, running + state.in_flight_delta))
    return Limits(
        backlog=_waiting(src, key), meters=_meters(state, now), slots=slots, held=running,
        broken=quota_broken or (state is not None and state.broken is not None),
    )  # fmt: skip


def _waiting(src: Sources, key: QueueKey) -> int:
    """A queue's pending jobs that are not parked on a budget."""
    parked = sum(src.budget_gate.parked_by_queue.get(key, {}).values())
    return max(0, src.counts.get(key, lc.PENDING) - parked)


def _shadow(src: Sources, key: QueueKey, policy: Policy, now: int) -> PolicyState:
    """The policy state ``policy`` would have, as ``Policies.put`` makes it: a
    window kept keeps counting, a changed one starts with its stored usage."""
    old = src.policies.get(*key)
    state = PolicyState(*key)
    state.policy = policy
    kept = {m.limit.window: m for m in old.meters} if old is not None else {}
    for meter in state.meters:
        if meter.limit.window in kept:
            meter.carry(kept[meter.limit.window])
    state.in_flight_delta = old.in_flight_delta if old is not None else 0
    usage = src.store.policies.usage
    state.roll(now, lambda k, start: usage(key[0], key[1], k, start))
    return state


def preview_policy(src: Sources, namespace: str, queue: str, policy: Policy | None) -> Preview:
    """``policy_set`` of ``policy`` on a queue (None: no change, ``queue_configure``)."""
    now = src.clock.now_ms()
    key = (namespace, queue)
    actor = src.namespaces.find(namespace)
    quota, broken = actor.quota, actor.broken is not None
    old = src.policies.get(namespace, queue)
    before = _queue_limits(src, key, old, quota, broken, now)
    new = old if policy is None else _shadow(src, key, policy, now)
    after = _queue_limits(src, key, new, quota, broken, now)
    notes = [*_COMMON, "the scope is the queue's pending jobs not parked on a budget; "
             "budgets and group shares are not simulated"]  # fmt: skip
    if policy is None:
        notes.append("queue_configure changes retention only: admission is unchanged")
    _runs(src, [key], notes, before, after)
    return Preview(before, after, now, notes, next_enqueue=_enqueue_now(src, namespace, now))


def preview_quota(src: Sources, namespace: str, quota: Quota) -> Preview:
    """``quota_set`` of ``quota`` on a namespace: its pending jobs under ``max_running``,
    and what the next enqueue of one job would meet."""
    now = src.clock.now_ms()
    actor = src.namespaces.find(namespace)
    keys = _queues(src, namespace)
    running = src.counts.total(namespace, lc.RUNNING)
    backlog = sum(_waiting(src, k) for k in keys)

    def limits(q: Quota | None, broken: bool) -> Limits:
        return Limits(backlog=backlog, slots=_namespace_slots(actor, running, q), held=running,
                      broken=broken)  # fmt: skip

    before = limits(actor.quota, actor.broken is not None)
    after = limits(quota, False)
    notes = [*_COMMON, "the scope is the namespace's pending jobs not parked on a budget, "
             "under max_running; queue policies and budgets are not simulated",
             "a quota judges new enqueues: no job already waiting is removed"]  # fmt: skip
    _runs(src, keys, notes, before, after)
    return Preview(before, after, now, notes, next_enqueue=_next_enqueue(src, actor, quota, now))


def _queues(src: Sources, namespace: str) -> list[QueueKey]:
    return [key for key, _c in src.counts if key[0] == namespace]


def _enqueue_now(src: Sources, namespace: str, now: int) -> str:
    """What the next enqueue would meet under the quota in force (a change of no
    quota leaves it as it is)."""
    actor = src.namespaces.find(namespace)
    if actor.broken is not None:
        return "quota_unavailable"
    if actor.quota is None:
        return "admitted"
    return _next_enqueue(src, actor, actor.quota, now)


def _next_enqueue(src: Sources, actor: NamespaceActor, quota: Quota, now: int) -> str:
    """What one more enqueue in the namespace would meet under ``quota``:
    ``admitted``, ``shed``, ``queue_full`` or ``rate_limited``."""
    shadow = NamespaceActor(actor.namespace)
    if actor.rate is not None:  # the bucket keeps its tokens (set_quota updates it)
        shadow.rate = copy_pool(actor.rate)
    shadow.set_quota(quota, now)
    shadow.pending_extra = actor.pending_extra
    try:
        admitted, _undo = shadow.admit(1, src.quotas.pending_now(actor.namespace), "", now)
    except Refused as exc:
        return exc.code
    return "shed" if admitted.live == 0 else "admitted"


def preview_budget(src: Sources, budget: Budget, spec: BudgetSpec) -> Preview:
    """``budget_put``/``budget_patch`` giving ``budget`` the settings ``spec``: its
    waiting bound jobs, each costing the head's cost."""
    now = src.clock.now_ms()
    waiting = max(0, sum(budget.bound.values()) - len(budget.holders))
    cost = budget.head_cost or _usual_cost(budget.bound)
    notes = [*_COMMON, "the scope is the budget's unfinished bound jobs that are not running "
             "(scheduled ones counted as due now); other limits are not simulated",
             f"every waiting job costs {cost} token(s) of this budget"]  # fmt: skip
    pool_before = copy_pool(budget.pool)
    pool_after = copy_pool(budget.pool)
    pool_after.update(spec, now)  # never creates tokens, as the real update
    paused = budget.paused_until if budget.paused(now) else None
    held = len(budget.holders)

    def limits(pool: TokenPool, enforce: bool) -> Limits:
        if not enforce:  # shadowed: it holds nothing back
            return Limits(backlog=waiting, held=held)
        return Limits(backlog=waiting, pool=pool, cost=cost, paused_until=paused, held=held)

    before = limits(pool_before, budget.spec.enforce)
    after = limits(pool_after, spec.enforce)
    parked = src.budget_gate.parked_by_queue.items()
    keys = {k for k, per in parked if k[0] == budget.namespace and budget.key in per}
    keys |= _holder_queues(src, budget)
    _runs(src, sorted(keys), notes, before, after)
    return Preview(before, after, now, notes,
                   (pool_before.available(now), pool_after.available(now)),
                   _enqueue_now(src, budget.namespace, now))  # fmt: skip


def _holder_queues(src: Sources, budget: Budget) -> set[QueueKey]:
    running = src.running
    return {(r.namespace, r.queue) for i in budget.holders if (r := running.get(i)) is not None}


def _usual_cost(bound: dict[int, int]) -> int:
    """The cost most bound jobs have (1 when none is bound)."""
    return max(bound.items(), key=lambda kv: (kv[1], -kv[0]))[0] if bound else 1
