"""The budget gate's release side: when parked jobs can come back, and bringing them.

A budget's parked jobs come back oldest first, as many as its tokens allow,
when :class:`~actors.due.DueActor` (the budgets' shared waker) reaches the
instant its oldest parked job becomes affordable. Released jobs are reserved
until claimed, so one refill is not promised twice (the mixin of
:class:`~daemon.admission.budget_gate.BudgetGate`).
"""

from __future__ import annotations

import logging

from actors.bindings import cost_for
from actors.budgets import Budget, Budgets
from actors.clock import Clock
from actors.due import DueActor
from daemon.admission.doorbell import Doorbell
from daemon.store.interface import Store, Tx

log = logging.getLogger("sluicegate.budgets")

QueueKey = tuple[str, str]
#: At most this many parked jobs are released per budget per transaction.
RELEASE_BATCH = 1000


class BudgetRelease:
    """Waking on, and releasing, budgets' parked jobs."""

    budgets: Budgets
    #: Budgets with parked jobs: what the waker looks at.
    waiting: set[QueueKey]
    waker: DueActor
    _clock: Clock
    _store: Store
    _doorbell: Doorbell

    def _count_parked(self, tx: Tx, budget: Budget, queue: QueueKey, cost: int, n: int,
                      *, newest: bool = False) -> None:  # fmt: skip
        raise NotImplementedError

    def settings_changed(self, budget: Budget) -> None:
        """A budget was updated (after commit): a raised limit may release jobs."""
        self._wake(budget)

    def _wake(self, budget: Budget) -> None:
        """Something changed a budget's tokens or queue: tell the waker when to look."""
        if budget.parked > 0:
            at = budget.next_release_at(self._clock.now_ms())
            if at is not None:
                self.waker.note(at)
            elif budget.head_cost is None:
                self.waker.note(self._clock.now_ms())  # find the head, then decide

    def earliest(self) -> int | None:
        """The first instant some budget can release its oldest parked job."""
        now = self._clock.now_ms()
        best: int | None = None
        for key in list(self.waiting):
            budget = self.budgets.get(key)
            if budget is None or budget.parked <= 0:
                self.waiting.discard(key)
                continue
            if budget.head_cost is None:
                oldest = self._store.jobs.parked_oldest(key[0], key[1], 1)
                budget.head_is(cost_for(oldest[0][2], key[1]) if oldest else 1)
            at = budget.next_release_at(now)
            if at is not None and (best is None or at < best):
                best = at
        return best

    def release_due(self, tx: Tx) -> None:
        """Release, on every budget that can pay for some, its oldest parked jobs."""
        for key in list(self.waiting):
            budget = self.budgets.get(key)
            if budget is not None:
                self.release_now(tx, budget)

    def release_now(self, tx: Tx, budget: Budget) -> None:
        """Release ``budget``'s parked jobs that it can pay for now, in ``tx`` (a
        resumed pause: claimable when its answer is, not at the waker's next turn)."""
        at = budget.next_release_at(tx.now_ms)
        if at is not None and at <= tx.now_ms:
            self._release(tx, budget)

    def _release(self, tx: Tx, budget: Budget) -> None:
        # Read no more parked rows than the tokens could pay for (plus the one
        # that says where to stop): a release behind a big backlog stays cheap.
        affordable = budget.pool.available(tx.now_ms) - budget.reserved_cost
        enforce = budget.spec.enforce  # a shadowed budget lets every parked job go
        limit = max(1, min(RELEASE_BATCH, int(affordable) + 1)) if enforce else RELEASE_BATCH
        owed_first = self._owed_first(tx, budget) if budget.parked_of else []
        rows = tx.store.jobs.parked_oldest(budget.namespace, budget.key, limit)
        if not rows and not owed_first:  # the count disagrees with the store: trust the store
            log.error("budget %r/%r counted %d parked jobs, the store has none",
                      budget.namespace, budget.key, budget.parked)  # fmt: skip
            budget.park(None, -budget.parked)
            budget.head_is(None)
            self.waiting.discard((budget.namespace, budget.key))
            return
        promised = budget.reserved_cost + sum(c for _i, _q, c in owed_first)
        taken = budget.promised_per_group() if budget.reservations else {}
        for _job_id, _q, cost in owed_first:
            group = budget.group_of[_job_id]
            taken[group] = taken.get(group, 0) + cost
        released: list[tuple[str, str, int]] = list(owed_first)
        head: int | None = None
        first = {job_id for job_id, _q, _c in owed_first}
        for job_id, queue, text in rows:
            if job_id in first:
                continue
            cost = cost_for(text, budget.key)
            if enforce and not budget.pool.can_debit(promised + cost, tx.now_ms):
                head = cost
                break
            group = budget.group_of.get(job_id, "\0")  # "\0": a group reserving nothing
            if enforce and budget.reservations and budget.held_for_others(group, cost, promised,
                                                                          taken):  # fmt: skip
                head, budget.held_head = cost, True
                break
            promised += cost
            taken[group] = taken.get(group, 0) + cost
            released.append((job_id, queue, cost))
        if not released:
            budget.head_is(head)
            return
        tx.store.jobs.unpark([job_id for job_id, _q, _c in released])
        per_queue: dict[str, int] = {}
        for job_id, queue, cost in released:
            self._count_parked(tx, budget, (budget.namespace, queue), cost, -1)
            per_queue[queue] = per_queue.get(queue, 0) + 1
            if budget.group_of:
                tx.undo(budget.left_parked(job_id, promised=True))
        tx.undo(budget.reserve([(job_id, cost) for job_id, _q, cost in released]))
        budget.head_is(head)
        namespace, ring = budget.namespace, self._doorbell.ring
        tx.after(lambda: [ring((namespace, q), n) for q, n in per_queue.items()])

    def _owed_first(self, tx: Tx, budget: Budget) -> list[tuple[str, str, int]]:
        """The parked jobs of groups owed reserved tokens, oldest parked first, as
        many as the tokens pay for and the groups are owed: released before the
        others (no scan: the budget notes its reserving groups' parked jobs)."""
        out: list[tuple[str, str, int]] = []
        promised = budget.reserved_cost
        taken = budget.promised_per_group()
        for group, jobs in budget.parked_of.items():
            for job_id, (queue, cost) in jobs.items():
                if budget.owed(group, taken.get(group, 0)) <= 0:
                    break
                if not budget.pool.can_debit(promised + cost, tx.now_ms):
                    return out
                promised += cost
                taken[group] = taken.get(group, 0) + cost
                out.append((job_id, queue, cost))
        return out
