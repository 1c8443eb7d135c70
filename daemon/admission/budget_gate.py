"""The budget gate: the claim gate, parking, and releasing parked jobs.

A job bound to budgets is claimed only if every one of them can debit its
cost now; the debits are made in memory inside the claim's transaction (undone
if it rolls back) and the pools' state is written in the same transaction.
Otherwise the job is *parked* on the first budget that cannot pay, or that
is paused (``budget_pause``: no debit before its end, whatever the tokens): it keeps
status ``pending`` but leaves the ready index (``parked_on``), so no later
claim reads it, and the search goes on.

A budget's parked jobs come back oldest first, as many as its tokens allow,
when :class:`~actors.due.DueActor` (the budgets' shared waker) reaches the
instant its oldest parked job becomes affordable: exact for ``time_based``,
at once after a credit for ``while_in_flight``. Released jobs are *reserved*
until claimed, so one refill is not promised twice; the debit at claim stays
authoritative, so a budget is never over-spent, across restarts included.

Every change of a budget's memory made inside a write is undone with the
write (:meth:`~daemon.store.database.Tx.undo`), so a rolled-back claim,
enqueue or completion leaves no trace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING

from actors import lifecycle as lc
from actors.bindings import SETTLED_MARK, bindings, cost_for, settled
from actors.budgets import Budget, Budgets
from actors.clock import Clock
from actors.due import Due, DueActor
from actors.shadow import ALLOWED, BLOCKED, BUDGET, WOULD_BLOCK
from daemon import failpoints
from daemon.admission.budget_answers import BudgetAnswers
from daemon.admission.budget_groups import BudgetGroups
from daemon.admission.budget_release import BudgetRelease
from daemon.admission.door import log_decision
from daemon.admission.doorbell import Doorbell
from daemon.store.interface import Committer, JobRow, Store, Tx

if TYPE_CHECKING:
    from daemon.metrics import Metrics

log = logging.getLogger("sluicegate.budgets")

QueueKey = tuple[str, str]
#: At most this many jobs are parked by one claim: a flood of unaffordable jobs
#: in the ready index is parked over several transactions, never in one stall.
PARK_PER_CLAIM = 1000
#: Resolutions of bindings kept (distinct kinds of bound job; bounded).
RESOLVED_KEPT = 4096

UNFINISHED = (lc.SCHEDULED, lc.PENDING, lc.RUNNING)


class BudgetGate(BudgetAnswers, BudgetRelease, BudgetGroups):
    """The budgets' side of enqueue, claim and finishing, for one daemon."""

    def __init__(
        self, *, budgets: Budgets, clock: Clock, store: Store, committer: Committer,
        running: dict[str, JobRow], metrics: Metrics, doorbell: Doorbell,
    ) -> None:  # fmt: skip
        self.budgets = budgets
        self._clock = clock
        self._store = store
        #: Running jobs' rows (the transition step's map): leases for hints.
        self._running = running
        self._metrics = metrics
        self._doorbell = doorbell
        #: (namespace, queue) -> {budget key: jobs parked}.
        self.parked_by_queue: dict[QueueKey, dict[str, int]] = {}
        #: Budgets with parked jobs: what the waker looks at.
        self.waiting: set[QueueKey] = set()
        #: Other daemons share the store (daemon.admission.cluster): credits are
        #: written with the pool, since they read pools back (one daemon alone
        #: recovers them at start), and bound jobs are counted in the store,
        #: since memory counts only the jobs this daemon saw bound.
        self.shared = False
        #: (namespace, stored bindings) -> (budgets.version, resolved): _resolve's.
        self._resolved: dict[tuple[str, str | None], tuple[int, list[tuple[Budget, int]]]] = {}
        #: Pools the open transaction changed, as of when (written at flush).
        #: A rolled-back transaction leaves them here: written at the next
        #: commit as memory (restored by the undo) stands then, which is harmless.
        self._unsaved: dict[tuple[str, str], tuple[Budget, int]] = {}
        self.waker = DueActor(
            clock, Due(self.earliest, lambda _now: committer.write(self.release_due))
        )
        #: Set by a claim that parked its limit of jobs: there may be more.
        self.parks_left = PARK_PER_CLAIM

    def _resolve(self, namespace: str, text: str | None) -> list[tuple[Budget, int]]:
        """A job's bindings as (budget, cost): kept per kind of job until a budget
        is added or removed (a bound job is resolved at each of its moves)."""
        budgets = self.budgets
        kept = self._resolved.get((namespace, text))
        if kept is not None and kept[0] == budgets.version:
            return kept[1]
        out = []
        for key, cost in bindings(text):
            budget = budgets.get((namespace, key))
            if budget is None:  # not possible while bound jobs block deletion
                log.warning("job bound to missing budget %r/%r: ignored", namespace, key)
                continue
            out.append((budget, cost))
        if text is not None and SETTLED_MARK in text:
            return out  # one job's completed text: not kept
        if len(self._resolved) >= RESOLVED_KEPT:
            self._resolved.clear()
        self._resolved[(namespace, text)] = (budgets.version, out)
        return out

    # -- start-up -------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild parked counts, bound costs and in-flight costs from the store."""
        jobs = self._store.jobs
        self.parked_by_queue.clear()
        self.waiting.clear()
        for budget in self.budgets.values():
            budget.reset()
        for namespace, queue, key, n in jobs.parked_counts():
            budget = self.budgets.get((namespace, key))
            if budget is None:
                log.warning("%d job(s) parked on missing budget %r/%r", n, namespace, key)
                continue
            budget.park(None, n)
            per_queue = self.parked_by_queue.setdefault((namespace, queue), {})
            per_queue[key] = per_queue.get(key, 0) + n
            self.waiting.add((namespace, key))
        for job_id, namespace, state, text in jobs.unfinished_bindings():
            for budget, cost in self._resolve(namespace, text):
                budget.bind(cost)
                if state == lc.RUNNING:
                    budget.recover_running(job_id, cost)
        self.recount_groups(self._store, [b for b in self.budgets.values() if b.reservations])

    # -- enqueue ----------------------------------------------------------------

    def bind_new(self, tx: Tx, queue: QueueKey, resolved: list[tuple[Budget, int]],
                 pending: bool, group: str = "") -> str | None:  # fmt: skip
        """A new job of ``group`` binds to ``resolved``: count it; return the budget
        to park it on (its id is the job's: ``noted`` later by :meth:`noted_new`).

        A pending job is parked at once when a budget already has parked jobs
        (it queues behind them, unless its group is owed reserved tokens), cannot
        afford it beside what it promised, or keeps its tokens for other groups.
        """
        for budget, cost in resolved:
            _change_bound(tx, budget, cost, 1)
        if not pending:
            return None
        now = tx.now_ms
        for budget, _cost in resolved:
            tx.undo(budget.counted(group, 1, 0))
        for budget, cost in resolved:
            behind = budget.parked > 0 and not budget.owed(group)
            if budget.spec.enforce and (behind or budget.paused(now)
                    or not budget.pool.can_debit(cost + budget.reserved_cost, now)
                    or budget.held_for_others(group, cost, budget.reserved_cost)):  # fmt: skip
                self._count_parked(tx, budget, queue, cost, 1, newest=True)
                return budget.key
        return None

    # -- claim ------------------------------------------------------------------

    def claim(
        self, tx: Tx, namespace: str, queues: list[str], limit: int, lease: str,
        lease_ms: int | None, caps: dict[str, int] | None = None,
        read: Callable[[int, dict[str, int] | None], list[JobRow]] | None = None,
    ) -> list[JobRow]:  # fmt: skip
        """Claim up to ``limit`` jobs of ``queues`` (at most ``caps[queue]`` of a
        capped queue): the ready ones whose budgets pay. ``read`` reads the
        candidates when some queue counts groups (daemon.admission.groups).

        Parks the others and reads on, so a parked job never holds back the
        jobs behind it. The work is what is claimed plus what is parked (each
        job is parked once), never the parked backlog.
        """
        jobs, now = tx.store.jobs, tx.now_ms
        claimed: list[JobRow] = []
        parks_left = PARK_PER_CLAIM
        caps = dict(caps) if caps else None
        while True:
            want = limit - len(claimed)
            rows = jobs.ready(namespace, queues, want, caps) if read is None else read(want, caps)
            admitted = []
            parked = 0
            for row in rows:
                if row.budgets is None:
                    admitted.append(row)
                    continue
                blocker = self.debit(tx, row)
                if blocker is None:
                    if failpoints.ARMED:
                        failpoints.hit("budget_debit_before_claim")
                    admitted.append(row)
                elif parks_left > 0:
                    self.park(tx, row, blocker)
                    parks_left -= 1
                    parked += 1
            claimed += jobs.mark_running(admitted, lease, lease_ms, now)
            if caps is not None:
                for row in admitted:
                    if row.queue in caps:
                        caps[row.queue] -= 1
            # A short read means the ready index is spent, unless a queue's
            # cap (its window's claims left) cut it: then read on past the parked.
            if not parked or parks_left <= 0 or (len(rows) < want and caps is None):
                self.parks_left = parks_left
                return claimed

    def debit(self, tx: Tx, row: JobRow) -> Budget | None:
        """Debit every budget of ``row`` at once, or none: the first that cannot pay.

        A shadowed budget that cannot pay lets the job through: its cost is held
        in flight, no token is taken, and the decision is logged and counted.
        """
        now = tx.now_ms
        resolved = self._resolve(row.namespace, row.budgets)
        group = row.grp or ""
        shadowed: list[Budget] = []
        for budget, cost in resolved:
            if (not budget.pool.can_debit(cost, now) or budget.paused(now)
                    or (budget.reservations and budget.held_for_others(group, cost))):  # fmt: skip
                if budget.spec.enforce:
                    return budget
                shadowed.append(budget)
        job_id = row.id
        for budget, cost in resolved:
            if shadowed and budget in shadowed:
                tx.undo(budget.hold(job_id, cost))
            else:
                tx.undo(budget.debit(job_id, cost, now))
            if budget.reservations:
                tx.undo(budget.counted(group, -1, cost))
                tx.after(lambda b=budget: self._wake(b))  # a group's work may have ended
            self._changed(budget, now)
        tx.after(lambda: self._debited(row.namespace, resolved, shadowed))
        return None

    def _debited(self, namespace: str, resolved: list[tuple[Budget, int]],
                 shadowed: list[Budget]) -> None:  # fmt: skip
        """A claim's debits committed: counted (those a shadowed budget would have
        refused as ``would_block``, logged)."""
        metrics = self._metrics
        for budget, cost in resolved:
            if shadowed and budget in shadowed:
                log_decision(namespace, BUDGET, False, budget=budget.key)
                metrics.admission_decision(BUDGET, WOULD_BLOCK)
            else:
                metrics.budget_debited(budget.key, cost)
                metrics.admission_decision(BUDGET, ALLOWED)

    def park(self, tx: Tx, row: JobRow, budget: Budget) -> None:
        """Park ``row`` on ``budget``: out of the ready index until released."""
        job_id = row.id
        tx.store.jobs.park([(budget.key, job_id)])
        queue = (row.namespace, row.queue)
        cost = cost_for(row.budgets, budget.key)
        self._count_parked(tx, budget, queue, cost, 1)
        # A released job that comes back no longer holds its promise.
        for other, _cost in self._resolve(row.namespace, row.budgets):
            undo = other.unreserve(job_id)
            if undo is not None:
                tx.undo(undo)
                tx.after(lambda o=other: self._wake(o))
        if budget.reservations:
            tx.undo(budget.parked_reserved(row.grp or "", job_id, row.queue, cost))

    def _count_parked(self, tx: Tx, budget: Budget, queue: QueueKey, cost: int, n: int,
                      *, newest: bool = False) -> None:  # fmt: skip
        """``n`` jobs of ``queue`` were parked on ``budget`` (released, if negative).

        ``newest``: the parked job is younger than every other parked on it
        (a new job), so the head stays; a job parked by a claim may be older.
        """
        undo_park = budget.park(cost, n, newest=newest)
        key = (budget.namespace, budget.key)
        was_waiting = key in self.waiting
        if budget.parked > 0:
            self.waiting.add(key)
        else:
            self.waiting.discard(key)

        def undo() -> None:
            undo_park()
            if was_waiting:
                self.waiting.add(key)
            else:
                self.waiting.discard(key)

        def effect() -> None:
            # Per queue only after commit, beside the queue counts it offsets.
            per_queue = self.parked_by_queue.setdefault(queue, {})
            per_queue[budget.key] = per_queue.get(budget.key, 0) + n
            if per_queue[budget.key] <= 0:
                del per_queue[budget.key]
                if not per_queue:
                    del self.parked_by_queue[queue]
            if n > 0:
                self._wake(budget)
                log_decision(budget.namespace, BUDGET, True, budget=budget.key, jobs=n)
                self._metrics.admission_decision(BUDGET, BLOCKED, n)

        tx.undo(undo)
        tx.after(effect)

    # -- jobs leaving running, finishing, coming back ---------------------------

    def moved(self, tx: Tx, source: str, after: JobRow) -> None:
        """A bound job went from ``source`` to ``after``'s state."""
        resolved = self._resolve(after.namespace, after.budgets)
        target = after.state
        job_id = after.id
        self._regrouped(tx, source, after, resolved)
        if source == lc.RUNNING and target != lc.RUNNING:
            for budget, cost in resolved:
                tx.undo(budget.credit(job_id, cost))
                if self.shared:
                    self._changed(budget, tx.now_ms)
            if target == lc.COMPLETED:
                self._settle(tx, job_id, resolved, settled(after.budgets))
            tx.after(lambda: [self._wake(b) for b, _c in resolved])
        was, now = source in UNFINISHED, target in UNFINISHED
        if was != now:
            for budget, cost in resolved:
                _change_bound(tx, budget, cost, 1 if now else -1)

    def _settle(self, tx: Tx, job_id: str, resolved: list[tuple[Budget, int]],
                actual: dict[str, Fraction]) -> None:  # fmt: skip
        """A completion settled ``time_based`` debits to the ``actual`` costs its
        row carries (the verb refused any other): refund or extra, in the pool."""
        if not actual:
            return
        now, metrics = tx.now_ms, self._metrics
        for budget, cost in resolved:
            spent = actual.get(budget.key)
            if spent is not None and budget.pool.time_based:
                tx.undo(budget.settle(job_id, cost, spent, now))
                self._changed(budget, now)
                tx.after(lambda k=budget.key, c=spent: metrics.budget_settled(k, float(c)))

    # -- pools written once per transaction (the group commit's Pending) ----------

    def _changed(self, budget: Budget, now_ms: int) -> None:
        """A write changed ``budget``'s pool: it is written before the COMMIT."""
        self._unsaved[(budget.namespace, budget.key)] = (budget, now_ms)

    def flush(self, store: Store) -> None:
        """Write each pool the transaction's writes changed, once, as it stands
        after all of them (a claim of 100 bound jobs: one statement, not 100)."""
        for budget, now_ms in self._unsaved.values():
            store.budgets.save_pool(budget.namespace, budget.key, budget.pool.snapshot(now_ms))

    def committed(self) -> None:
        """The pools are written."""
        self._unsaved.clear()

    def bound(self, tx: Tx, budget: Budget) -> dict[int, int]:
        """The unfinished jobs bound to ``budget`` as cost -> jobs, every daemon's."""
        if self.shared:
            return tx.store.budgets.bound(budget.namespace, budget.key)
        return budget.bound

    def unparked_by_fold(self, tx: Tx, before: JobRow) -> None:
        """A parked job was folded (debounce) back to scheduled: it is no longer parked."""
        key = before.parked_on
        budget = self.budgets.get((before.namespace, key))
        if budget is not None:
            cost = cost_for(before.budgets, key)
            queue = (before.namespace, before.queue)
            self._count_parked(tx, budget, queue, cost, -1)
            budget.head_is(None)


def _change_bound(tx: Tx, budget: Budget, cost: int, n: int) -> None:
    tx.undo(budget.bind(cost, n))
