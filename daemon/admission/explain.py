"""Explain: every limit that applies to one job, in the order admission evaluates
them, and whether each holds the job back now (the ``explain`` verb).

Nothing here decides anything of its own: each entry asks the gate that owns
the limit the same read-only questions the claim and a pending job's derived
``admission`` ask (:meth:`Quotas.hold`, the policy's window meters and free
slots, :meth:`GroupRing.held`, a budget's pause, its pool's ``can_debit`` and
:meth:`BudgetAnswers.eligible`, the namespace actor's storage and monthly
blocks). So the first holding entry names what ``admission.reason`` names.

The order, per the job's status:

- ``pending``: the derived ``admission``'s order: the job's budgets (the one
  it is parked on first, then binding order; a paused budget's pause before
  its tokens), since a budget that cannot pay takes the job out of the ready
  index whatever else holds it; then the namespace's ``max_running``, then the
  queue policy (its windows in the policy's order, ``max_in_flight``), then
  the job's group.
- ``scheduled``: the same limits, as they would judge it were it due now.
- ``running``: the same limits, which it holds (its slot, its tokens):
  ``holding`` false.
- ``dead``: a replay is an enqueue: the door's blocks (storage, monthly,
  :meth:`Door.blocks`) and the quota's ``max_pending`` and ``enqueue_rate``
  first, then the claim's. The door holds only what enters the namespace: a
  job already in it lists none of its limits.
- ``completed``: none.

Shadow mode: a limit that is not enforced is listed with ``holding`` false
(:func:`_held`): the door's (``daemon.enforce``, or the namespace's quota
``enforce``), a budget's, a queue policy's and a quota's own ``enforce``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors import lifecycle as lc
from actors.group_ring import GROUP_CAP, RESERVED
from actors.namespace import Namespaces
from daemon.admission.groups import group_of
from daemon.store.interface import JobRow, JobStore

if TYPE_CHECKING:
    from daemon.admission.pipeline import Admission

#: Kinds of limit (PROTOCOL.md, Foresight).
KINDS = ("door", "quota", "policy_window", "policy_in_flight", "group", "budget",
         "budget_paused")  # fmt: skip
#: ``position`` counts at most this many jobs ahead; more is ``approximate``.
AHEAD_MAX = 10_000


@attrs.frozen
class Hold:
    """One limit that applies to a job: its usage now, and whether it holds it back."""

    limit: str
    kind: str
    scope: dict[str, str]
    used: float | None
    max: float | None
    holding: bool
    next_eligible_at: int | None = None
    exact: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The ``holds`` entry on the wire."""
        return attrs.asdict(self)


def _held(over: bool, enforced: bool = True) -> bool:
    """A limit that is over holds the job back only where it is enforced."""
    return over and enforced


class Explainer:
    """Gathers a job's holds from the admission pipeline's gates (read-only)."""

    def __init__(self, admission: Admission, namespaces: Namespaces) -> None:
        self._admission = admission
        self._namespaces = namespaces

    def holds(self, row: JobRow, now_ms: int) -> list[Hold]:
        """Every limit that applies to ``row`` now, in evaluation order."""
        state = row.state
        if state == lc.COMPLETED:
            return []
        out = self._entry(row.namespace, now_ms) if state == lc.DEAD else []
        parked = row.parked_on if state == lc.PENDING else None
        out += self._budgets(row, parked, now_ms)
        out += self._quota(row.namespace)
        out += self._policy(row, now_ms)
        if state == lc.RUNNING:  # what it holds, not what holds it
            out = [attrs.evolve(h, holding=False, next_eligible_at=None, exact=False)
                   for h in out]  # fmt: skip
        return out

    # -- enqueue: what a replay meets ------------------------------------------------

    def _entry(self, namespace: str, now_ms: int) -> list[Hold]:
        """The door's blocks and the quota's enqueue limits (a dead job's replay)."""
        actor = self._namespaces.find(namespace)
        quota, scope = actor.quota, {"namespace": namespace}
        if quota is None:
            return []
        out = []
        enforcing = self._admission.door.enforces(namespace)
        if quota.max_retained_bytes is not None:
            out.append(Hold("max_retained_bytes", "door", scope, actor.storage.measured,
                            quota.max_retained_bytes,
                            _held(actor.storage.held, enforcing)))  # fmt: skip
        monthly = quota.monthly_jobs_quota
        if monthly is not None:
            over = _held(actor.monthly.exhausted(monthly, now_ms), enforcing)
            at = actor.monthly.until_ms if over else None  # the next UTC month
            used = actor.monthly.current(now_ms)
            out.append(Hold("monthly_jobs_quota", "door", scope, used, monthly, over, at, over))
        if quota.max_pending is not None:
            pending = self._admission.quotas.pending_now(namespace)
            out.append(Hold("max_pending", "quota", scope, pending, quota.max_pending,
                            _held(pending + 1 > quota.max_pending, quota.enforce)))  # fmt: skip
        rate = actor.rate
        if rate is not None:
            over = _held(not rate.can_debit(1, now_ms), quota.enforce)
            cap, at = rate.spec.cap, rate.eligible_at(1, now_ms) if over else None
            used = round(cap - rate.available(now_ms), 3)
            out.append(Hold("enqueue_rate", "quota", scope, used, cap, over, at, over))
        return out

    # -- claim ------------------------------------------------------------------------

    def _quota(self, namespace: str) -> list[Hold]:
        """The namespace's ``max_running`` (or its unreadable document)."""
        quotas, scope = self._admission.quotas, {"namespace": namespace}
        hold = quotas.hold(namespace)
        if hold == "quota_unavailable":
            return [Hold("quota", "quota", scope, None, None, True)]
        use = quotas.running_use(namespace)
        if use is None:
            return []
        over = hold == "running_full"
        at = self._admission.timers.reaper.target if over else None
        return [Hold("max_running", "quota", scope, use[0], use[1], over, at)]

    def _policy(self, row: JobRow, now_ms: int) -> list[Hold]:
        """The queue policy's windows and in-flight cap, then the job's group."""
        policies = self._admission.policies
        key = (row.namespace, row.queue)
        state = policies.get(*key)
        if state is None:
            return []
        scope = {"queue": row.queue}
        if state.broken is not None or state.policy is None:
            return [Hold("policy", "policy_window", scope, None, None, True)]
        policy = state.policy
        enforced = policy.enforce
        running = policies.running(key)
        state.roll(now_ms)  # the windows of now, as the claim reads them
        out = []
        for meter in state.meters:
            cap, over = meter.limit.max_claims, _held(meter.exhausted, enforced)
            at = meter.end if over and cap > 0 else None  # 0: paused, nothing frees it
            out.append(Hold(meter.key, "policy_window", scope, meter.used, cap, over, at,
                            at is not None))  # fmt: skip
        if policy.max_in_flight is not None:
            in_flight = running + state.in_flight_delta
            over = _held(state.free(running) == 0, enforced)
            at = policies.lease_hint(key) if over and policy.max_in_flight > 0 else None
            out.append(Hold("max_in_flight", "policy_in_flight", scope, in_flight,
                            policy.max_in_flight, over, at))  # fmt: skip
        ring = state.ring
        if ring is None:
            return out
        group = group_of(row)
        scope = {"queue": row.queue, "group": group}
        held = ring.held(group, state.free(running))
        cap = ring.policy.cap(group)
        if cap is not None:
            name = (
                "group_limits" if group in ring.policy.group_limits else "max_in_flight_per_group"
            )
            over = _held(held == GROUP_CAP, enforced)
            out.append(Hold(name, "group", scope, ring.in_flight.get(group, 0), cap, over,
                            policies.lease_hint(key) if over else None))  # fmt: skip
        if ring.policy.min_in_flight:
            over = _held(held == RESERVED, enforced)
            out.append(Hold("min_in_flight", "group", scope, ring.owed_total(),
                            state.free(running), over,
                            policies.lease_hint(key) if over else None))  # fmt: skip
        return out

    def _budgets(self, row: JobRow, parked: str | None, now_ms: int) -> list[Hold]:
        """Each bound budget: its pause while it lasts, then its tokens."""
        if row.budgets is None:
            return []
        gate = self._admission.budget_gate
        out = []
        # The budget a job is parked on first: it took the job out of the ready index.
        bound = sorted(gate.rows_of(row), key=lambda b: b[0].key != parked)
        for budget, cost in bound:
            scope, enforced = {"budget": budget.key}, budget.spec.enforce
            if budget.paused(now_ms):
                held = _held(True, enforced)
                out.append(Hold(budget.key, "budget_paused", scope, None, None, held,
                                budget.paused_until if held else None, held))  # fmt: skip
            over = budget.key == parked or _held(not budget.pool.can_debit(cost, now_ms), enforced)
            at, exact = gate.eligible(budget, cost, now_ms) if over else (None, False)
            used, most = gate.usage(budget, now_ms)
            out.append(Hold(budget.key, "budget", scope, used, most, over, at, exact))
        return out


def position(jobs: JobStore, row: JobRow, fair: bool) -> dict[str, Any]:
    """Where a pending job stands among the claimable jobs of its queue: how many
    are ahead of it in claim order, counted in the ready index up to
    :data:`AHEAD_MAX` + 1 (``approximate`` beyond: at least that many), and
    ``approximate`` in a queue whose claims depend on groups (``fair``: turns
    and caps reorder it). Not pending: ``ahead`` null."""
    if row.state != lc.PENDING:
        return {"ahead": None, "approximate": False}
    ahead = jobs.ahead(row, AHEAD_MAX + 1)
    return {"ahead": ahead, "approximate": ahead > AHEAD_MAX or fair}
