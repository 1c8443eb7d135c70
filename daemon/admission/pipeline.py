"""Admission: the one entry for enqueue and the one for claim.

Every producer path enqueues through :meth:`Admission.enqueue` (the door,
before the write) and :meth:`Admission.admit` then :meth:`Admission.bind`
(inside it); every claim, by queue or by id, goes through
:meth:`Admission.claim`. They own the order docs/door.md states:

    door -> quota -> policy -> budget

- **door** (:mod:`~daemon.admission.door`): size caps, token buckets, queue
  caps, storage and monthly quotas; refuses with 429 or 403 before anything
  is written. Deliveries debit the message bucket after the claim's commit.
- **quota** (:mod:`~daemon.admission.quotas`): ``max_pending`` and
  ``enqueue_rate`` at enqueue (reject or shed), ``max_running`` at claim.
- **policy** (:mod:`~daemon.admission.policies`): a queue's in-flight cap and
  window budget, at claim (a policy never refuses an enqueue: work waits).
- **budget** (:mod:`~daemon.admission.budget_gate`): bindings counted at
  enqueue (a job parks behind an exhausted budget), debited at claim.

A decision charges what it admits inside the write, undone if the write
rolls back, so two writes of one group commit never both take the last room.
What the admitted rows then do to memory is the transition step's
(:mod:`daemon.admission.views`), never the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from actors import entropy
from actors import lifecycle as lc
from actors.budgets import Budget
from actors.counts import QueueCounts
from actors.errors import Refused
from actors.namespace import Namespaces
from daemon.admission.budget_gate import BudgetGate
from daemon.admission.door import Door
from daemon.admission.groups import Read, group_of
from daemon.admission.policies import Policies
from daemon.admission.quotas import Quotas
from daemon.admission.timers import JobTimers
from daemon.store.interface import JobRow, Tx

if TYPE_CHECKING:
    from daemon.metrics import Metrics

QueueKey = tuple[str, str]


class Claimed(NamedTuple):
    """What a claim took, and each policy queue's headroom after it."""

    rows: list[JobRow]
    headrooms: dict[str, dict[str, Any]]


NOTHING = Claimed([], {})


def new_lease() -> str:
    """A fresh lease token."""
    return entropy.token_hex(8)


class Admission:
    """The admission pipeline of one daemon."""

    def __init__(
        self, *, door: Door, quotas: Quotas, policies: Policies, budget_gate: BudgetGate,
        timers: JobTimers, counts: QueueCounts, namespaces: Namespaces, metrics: Metrics,
    ) -> None:  # fmt: skip
        self.door = door
        self.quotas = quotas
        self.policies = policies
        self.budget_gate = budget_gate
        self.timers = timers
        self._counts = counts
        self._namespaces = namespaces
        self._metrics = metrics

    # -- enqueue: door, then (in the write) quota, then budgets ---------------------

    def enqueue(self, namespace: str, payloads: list[Any], queues: set[str]) -> list[str] | None:
        """The door's checks of an enqueue call, before its write: the payloads'
        JSON texts when the size cap measured them."""
        if self._namespaces.unlimited(namespace):
            return None  # no door limit to measure or count against
        texts = self.door.enqueue(namespace, payloads)
        self.door.new_queues(namespace, queues)
        return texts

    def admit(self, tx: Tx, namespace: str, n: int, queue: str) -> tuple[int, str | None]:
        """The quota's check of ``n`` new jobs: how many are written live (the first
        ones) and why the rest are shed; ``reject`` refuses the call. A queue
        policy admits every enqueue (its limits are the claim's)."""
        return self.quotas.admit(tx, namespace, n, queue)

    def bind(self, tx: Tx, queue: QueueKey, resolved: list[tuple[Budget, int]],
             pending: bool, group: str = "") -> str | None:  # fmt: skip
        """The budgets' step of a new job of ``group``: its bindings counted; the
        budget it parks on, if it cannot run yet."""
        return self.budget_gate.bind_new(tx, queue, resolved, pending, group)

    # -- claim: quota, policy, budget, then the store --------------------------------

    def claim(
        self, tx: Tx, namespace: str, queues: list[str], want: int, lease_ms: int | None,
        job_id: str | None = None,
    ) -> Claimed:  # fmt: skip
        """Claim up to ``want`` jobs of ``queues`` (or the job ``job_id``, which the
        caller found in ``namespace``), as the namespace's quota, the queues'
        policies and the jobs' budgets allow.

        First whatever the timers are about to do is done (promotions, reaps).
        Claiming by id refuses ``conflict`` for a job that is not pending and
        ``deferred`` when admission holds it back; a claim of queues takes what
        it may and parks what its budgets cannot pay.
        """
        self.timers.catch_up(tx)
        job = None
        if job_id is not None:
            job = tx.store.jobs.get(namespace, job_id)
            if job is None or job.state != lc.PENDING:
                state = job.state if job is not None else "gone"
                raise Refused("conflict", f"job {job_id!r} is {state}", job_status=state)
            queues = [job.queue]
        # Without a quota the namespace's room is ``want``, and nothing is counted.
        limited = not self._namespaces.unlimited(namespace)
        room = self.quotas.claim_room(namespace, want) if limited else want
        policies = self.policies
        # Policy queues admit what their windows and slots allow; the others are
        # uncapped (and pay one dictionary lookup each).
        caps = policies.rooms(namespace, queues, tx.now_ms) if policies.states else {}
        if job is not None:
            rows = self._claim_job(tx, job, room, caps, lease_ms)
        else:
            for queue in queues:
                if caps.get(queue) == 0 and self._counts.get((namespace, queue), lc.PENDING):
                    policies.refused((namespace, queue))
            open_queues = [q for q in queues if caps.get(q) != 0]
            if not (room and open_queues):
                return NOTHING
            read = self._group_read(tx, namespace, open_queues) if policies.groups.rings else None
            rows = self.budget_gate.claim(
                tx, namespace, open_queues, room, new_lease(), lease_ms, caps, read
            )
        if not rows:
            return NOTHING
        if limited:
            self.quotas.claimed(tx, namespace, len(rows))
        headrooms = policies.claimed(tx, rows) if caps or policies.shadows else {}
        if limited:  # deliveries debit the message bucket after the fact
            n, door = len(rows), self.door
            tx.after(lambda: door.delivered(namespace, n))
        return Claimed(rows, headrooms)

    def _group_read(self, tx: Tx, namespace: str, queues: list[str]) -> Read | None:
        """The claim's read when some of ``queues`` counts groups (else None)."""
        policies = self.policies
        states = policies.states
        free = {}
        for queue in queues:
            state = states.get((namespace, queue))
            if state is not None and state.ring is not None and not state.shadowed:
                free[queue] = state.free(policies.running(state.key))
        return policies.groups.reader(tx, namespace, queues, free) if free else None

    def _claim_job(self, tx: Tx, row: JobRow, room: int, caps: dict[str, int],
                   lease_ms: int | None) -> list[JobRow]:  # fmt: skip
        """``claim`` by id: the job, or ``deferred`` saying what holds it back."""
        if not room or caps.get(row.queue) == 0 or self._group_held(row, tx.now_ms):
            held = self.status(row, tx.now_ms) or {}
            self._metrics.admission_refused(row.queue, held.get("reason") or "")
            raise deferred_refusal(row.id, row.queue, held)
        if row.budgets is not None:
            gate = self.budget_gate
            held = gate.admission(row, tx.now_ms)
            if row.parked_on is not None or gate.debit(tx, row) is not None:
                raise deferred_refusal(row.id, row.queue, held or {})
        return tx.store.jobs.mark_running([row], new_lease(), lease_ms, tx.now_ms)

    def _group_held(self, row: JobRow, now_ms: int) -> bool:
        policies = self.policies
        if not policies.groups.rings or (row.namespace, row.queue) not in policies.groups.rings:
            return False
        status = policies.job_status((row.namespace, row.queue), group_of(row), now_ms)
        return status is not None and status.state == "deferred"

    def claimed_admission(self, row: JobRow, headrooms: dict[str, dict[str, Any]],
                          now_ms: int) -> dict[str, Any] | None:  # fmt: skip
        """A claimed job's ``admission``: its policy's headroom, its budgets'
        tokens left, or None when nothing limits it."""
        admission = headrooms.get(row.queue) if headrooms else None
        if row.budgets is not None:
            held = self.budget_gate.claimed_admission(row, now_ms)
            admission = {**(admission or {}), **(held or {})}
        return admission

    # -- what holds work back ----------------------------------------------------------

    def status(self, row: JobRow, now_ms: int) -> dict[str, Any] | None:
        """A pending job's derived ``admission``: budgets first, then its namespace's
        hold (``max_running`` reached, or a quota that cannot be read), then its
        queue's policy."""
        held = self.budget_gate.admission(row, now_ms) if row.budgets is not None else None
        if held is not None and held["state"] == "deferred":
            return held
        namespace = row.namespace
        hold = self.quotas.hold(namespace)
        if hold is not None:
            at = self.timers.reaper.target if hold == "running_full" else None
            return {"state": "deferred", "reason": hold, "next_eligible_at": at, "exact": False}
        policy = self.policies.job_status((namespace, row.queue), group_of(row), now_ms)
        if policy is not None and (policy.state == "deferred" or held is None):
            return policy.to_dict()
        quota = self._namespaces.get(namespace).quota
        if held is None and quota is not None and quota.max_running is not None:
            return {"state": "admitted", "reason": None, "next_eligible_at": None, "exact": True}
        return held

    def deferred(self, namespace: str, queues: Sequence[str], now_ms: int) -> list[dict[str, Any]]:
        """``claim_next``'s ``deferred`` entries when nothing was claimable: the
        namespace's hold first, then policies, then budgets, one entry per queue."""
        deferred = []
        hold = self.quotas.hold(namespace)
        if hold is not None:
            deferred = self.quotas.held_back(namespace, hold, list(queues))
        listed = {d["queue"] for d in deferred}
        deferred += self.policies.deferred(namespace, [q for q in queues if q not in listed])
        listed = {d["queue"] for d in deferred}
        rest = [q for q in queues if q not in listed]
        deferred += self.budget_gate.deferred(namespace, rest, now_ms)
        return deferred


def deferred_refusal(job_id: str, queue: str, held: dict[str, Any]) -> Refused:
    """``claim`` of a job admission holds back: ``deferred``, nothing changed."""
    details = {"queue": queue, "reason": held["reason"],
               "next_eligible_at": held["next_eligible_at"], "exact": held["exact"]}  # fmt: skip
    if held.get("budget"):
        details["budget"] = held["budget"]
    if "pause_reason" in held:
        details["pause_reason"] = held["pause_reason"]
    if held.get("window"):
        details["window"] = held["window"]
    return Refused(
        "deferred",
        f"job {job_id!r} is deferred: {held['reason']}"
        + (f" on budget {held['budget']!r}" if held.get("budget") else ""),
        **details,
    )
