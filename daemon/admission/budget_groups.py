"""The budget gate's groups: what a budget's ``reserve`` decides on.

While a ``while_in_flight`` budget reserves tokens for groups
(:mod:`actors.lending`), it counts per group the pending jobs bound to it and
their cost in flight, and notes the parked jobs of the reserving groups
(:class:`~actors.budgets.Budget`). Every move of a bound job keeps them (inside
its transaction, undone with it); they are counted again from the store at
start and when a reservation is set (a scan of the unfinished bound jobs,
never at a claim). The mixin of :class:`~daemon.admission.budget_gate.BudgetGate`.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors import lifecycle as lc
from actors.bindings import bindings, cost_for
from actors.budgets import Budget, Budgets
from daemon.store.interface import JobRow, Store, Tx


class BudgetGroups:
    """Group counts of the budgets that reserve tokens."""

    budgets: Budgets

    def _resolve(self, namespace: str, text: str | None) -> list[tuple[Budget, int]]:
        raise NotImplementedError

    def _wake(self, budget: Budget) -> None:
        raise NotImplementedError

    def recount_groups(self, store: Store, budgets: list[Budget]) -> None:
        """Count ``budgets``' jobs per group again from the store, for their
        reservations (at start, and when a reservation is set: a scan of the
        unfinished bound jobs, never at a claim)."""
        if not budgets:
            return
        by_key = {(b.namespace, b.key): b for b in budgets}
        for budget in budgets:
            budget.group_cost.clear()
            budget.group_pending.clear()
            budget.parked_of.clear()
            budget.group_of.clear()
            budget.held_head = False
        for (
            job_id,
            namespace,
            queue,
            state,
            group,
            parked_on,
            text,
        ) in store.jobs.unfinished_bound_groups():
            for key, cost in bindings(text):
                budget = by_key.get((namespace, key))
                if budget is None:
                    continue
                if state == lc.PENDING:
                    budget.counted(group, 1, 0)
                    if parked_on == key:
                        budget.parked_reserved(group, job_id, queue, cost)
                elif state == lc.RUNNING:
                    budget.counted(group, 0, cost)

    def reserve_changed(self, tx: Tx, budget: Budget, before: dict[str, int]) -> None:
        """A write changed ``budget``'s reservations: count its groups again (undone
        with the write)."""
        if before == budget.reservations:
            return
        parked = {g: dict(j) for g, j in budget.parked_of.items()}
        kept = (dict(budget.group_cost), dict(budget.group_pending), parked, dict(budget.group_of))
        self.recount_groups(tx.store, [budget])

        def undo() -> None:
            budget.group_cost, budget.group_pending, budget.parked_of, budget.group_of = kept

        tx.undo(undo)

    def noted_new(self, tx: Tx, row: JobRow) -> None:
        """A new job was parked: a reserving group's is noted on its budget."""
        budget = self.budgets.get((row.namespace, row.parked_on))
        if budget is not None and budget.reservations:
            cost = cost_for(row.budgets, budget.key)
            tx.undo(budget.parked_reserved(row.grp or "", row.id, row.queue, cost))

    def _regrouped(self, tx: Tx, source: str | None, after: JobRow,
                   resolved: list[tuple[Budget, int]]) -> None:  # fmt: skip
        """A bound job moved: the group counts of budgets that reserve tokens."""
        group, target = after.grp or "", after.state
        pending = (target == lc.PENDING) - (source == lc.PENDING)
        running = source == lc.RUNNING and target != lc.RUNNING
        for budget, cost in resolved:
            if budget.reservations:
                tx.undo(budget.counted(group, pending, -cost if running else 0))
                if source == lc.PENDING and target != lc.PENDING:
                    tx.undo(budget.left_parked(after.id))
                tx.after(lambda b=budget: self._wake(b))

    def promoted(self, tx: Tx, rows: Sequence[JobRow]) -> None:
        """Scheduled bound jobs became pending: work of their groups."""
        for row in rows:
            if row.budgets is not None:
                self._regrouped(tx, lc.SCHEDULED, row, self._resolve(row.namespace, row.budgets))
