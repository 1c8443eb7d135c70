"""A broken budget gate for the model to catch: it decides from a stale read.

:func:`stale_budget_gate` patches :class:`~daemon.admission.budget_gate.BudgetGate`
so each claim decides whether a budget can pay from the pool as it stood before
the *previous* claim (a cached read that the last claim's debits have since
made stale), then debits anyway. This is the bug a cache of pool state in
front of the claim transaction would bring; issue 17's acceptance asks the
model to catch it ("a budget decided from a stale read over-admits").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakKeyDictionary

import pytest

from actors.budget import TokenPool
from actors.budgets import Budget
from daemon.admission.budget_gate import BudgetGate
from daemon.store.interface import JobRow, Tx

#: A pool's raw state: (units, as of, cost in flight).
Raw = tuple[int, int, int]


@contextmanager
def stale_budget_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While open, every Core's budget gate decides from the pool before the last claim.

    What each gate saw is its own (a restart's new Core starts with nothing
    seen), so an example replays the same way and hypothesis can shrink it.
    """
    #: gate -> id(budget) -> its pool's raw state at the start of the previous claim.
    stale: WeakKeyDictionary[BudgetGate, dict[int, Raw]] = WeakKeyDictionary()
    #: gate -> id(budget) -> its pool's raw state at the start of this claim.
    current: WeakKeyDictionary[BudgetGate, dict[int, Raw]] = WeakKeyDictionary()
    claim = BudgetGate.claim

    def stale_claim(self: BudgetGate, tx: Tx, *args: Any, **kwargs: Any) -> list[JobRow]:
        before, now = stale.setdefault(self, {}), current.setdefault(self, {})
        for budget in self.budgets.values():
            key = id(budget)
            before[key] = now.get(key, budget.pool.raw())
            now[key] = budget.pool.raw()
        return claim(self, tx, *args, **kwargs)

    def stale_debit(self: BudgetGate, tx: Tx, row: JobRow) -> Budget | None:
        now = tx.now_ms
        resolved = self._resolve(row.namespace, row.budgets)
        before = stale.get(self, {})
        for budget, cost in resolved:
            seen = TokenPool(budget.pool.spec, now)
            seen.restore(before.get(id(budget), budget.pool.raw()))
            if not seen.can_debit(cost, now):
                return budget
        for budget, cost in resolved:
            _force_debit(tx, budget, row.id, cost, now)
            self._changed(budget, now)
        return None

    monkeypatch.setattr(BudgetGate, "claim", stale_claim)
    monkeypatch.setattr(BudgetGate, "debit", stale_debit)
    try:
        yield
    finally:
        monkeypatch.undo()


def _force_debit(tx: Tx, budget: Budget, job_id: str, cost: int, now: int) -> None:
    """Debit ``cost`` whether or not the pool can pay (what a stale decision does)."""
    pool = budget.pool
    raw = pool.raw()
    units, as_of, in_flight = raw
    if pool.time_based:
        scale = pool.spec.strategy.duration_ms or 1
        units, as_of = pool._units_at(now) - cost * scale, now
    pool.restore((units, as_of, in_flight + cost))
    budget.holders.add(job_id)

    def undo() -> None:
        pool.restore(raw)
        budget.holders.discard(job_id)

    tx.undo(undo)
