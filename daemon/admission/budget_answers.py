"""The budget gate's answers: what budgets hold back, and until when.

``claim_next``'s ``deferred`` entries, a pending job's derived ``admission``
(reason ``budget_exhausted``, or ``budget_paused`` with the pause's
``pause_reason`` while a pause holds the budget),
a claimed job's tokens left, the instant a budget can next pay, and whether a
dead job's budgets can still pay for it. Read-only:
they change nothing (the mixin of :class:`~daemon.admission.budget_gate.BudgetGate`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors import lifecycle as lc
from actors.bindings import bindings
from actors.budgets import Budget, Budgets
from actors.errors import Refused
from actors.lending import RESERVED
from daemon.store.interface import JobRow

QueueKey = tuple[str, str]


class BudgetAnswers:
    """What budgets hold back (read by answers and ``explain``)."""

    budgets: Budgets
    #: (namespace, queue) -> {budget key: jobs parked}.
    parked_by_queue: dict[QueueKey, dict[str, int]]
    _running: dict[str, JobRow]

    def _resolve(self, namespace: str, text: str | None) -> list[tuple[Budget, int]]:
        raise NotImplementedError

    def parked_in(self, queue: QueueKey) -> int:
        """How many jobs of ``queue`` are parked."""
        return sum(self.parked_by_queue.get(queue, {}).values())

    def deferred(self, namespace: str, queues: Iterable[str], now_ms: int) -> list[dict[str, Any]]:
        """``claim_next``'s ``deferred`` entries: queues whose pending jobs are parked."""
        out = []
        for queue in queues:
            per_budget = self.parked_by_queue.get((namespace, queue))
            if not per_budget:
                continue
            options = []
            for key in per_budget:
                budget = self.budgets.get((namespace, key))
                if budget is not None:
                    at, exact = self.eligible(budget, budget.head_cost or 1, now_ms)
                    options.append((at is None, at or 0, key, at, exact, budget))
            entry = {"queue": queue, "reason": "budget_exhausted",
                     "pending": sum(per_budget.values()), "next_eligible_at": None,
                     "exact": False, "budget": None}  # fmt: skip
            if options:  # the budget that frees this queue first
                _none, _at, key, at, exact, budget = min(options, key=lambda o: o[:3])
                entry.update(next_eligible_at=at, exact=exact, budget=key,
                             **_paused(budget, now_ms))  # fmt: skip
            out.append(entry)
        return out

    def eligible(self, budget: Budget, cost: int, now_ms: int) -> tuple[int | None, bool]:
        """When ``budget`` can next pay ``cost`` beside what it promised; exact or a hint.

        ``time_based``: the instant the drip makes it affordable (exact).
        ``while_in_flight``: the earliest lease expiry of a job holding it, a
        hint (``exact`` false) like ``in_flight_full``'s. A pause holds either
        until its end at least (exact when the tokens are there already).
        """
        need = cost + budget.reserved_cost
        if budget.pool.time_based:
            at = budget.eligible_at(need, now_ms)
            return (at, at is not None)
        paused = budget.paused(now_ms)
        if budget.pool.can_debit(need, now_ms):
            # The pause's end, exact, with the tokens there already; else a hint.
            return (budget.paused_until, True) if paused else (now_ms, False)
        running = self._running
        expiries = [running[i].lease_expires_at for i in budget.holders if i in running]
        at = min(expiries, default=None)  # type: ignore[type-var]
        if paused and at is not None:
            at = max(at, budget.paused_until)  # type: ignore[type-var]
        return (at, False)

    @staticmethod
    def usage(budget: Budget, now_ms: int) -> tuple[float, int]:
        """(tokens in use, the most the pool holds): ``while_in_flight``, the cost in
        flight of its allocation; ``time_based``, what the drip has still to refill."""
        pool = budget.pool
        if not pool.time_based:
            return pool.in_flight, budget.spec.allocation
        return round(budget.spec.cap - pool.available(now_ms), 3), budget.spec.cap

    def rows_of(self, row: JobRow) -> list[tuple[Budget, int]]:
        """``row``'s budgets and its cost on each, in binding order."""
        return self._resolve(row.namespace, row.budgets)

    def eligible_hint(self, budget: Budget) -> int | None:
        """The earliest lease expiry of a job holding ``budget``'s tokens (a hint)."""
        running = self._running
        return min((running[i].lease_expires_at for i in budget.holders if i in running),
                   default=None)  # type: ignore[type-var]  # fmt: skip

    def admission(self, row: JobRow, now_ms: int) -> dict[str, Any] | None:
        """The derived ``admission`` of a pending job bound to budgets (None otherwise)."""
        if row.state != lc.PENDING or row.budgets is None:
            return None
        namespace = row.namespace
        parked_on = row.parked_on
        for budget, cost in self._resolve(namespace, row.budgets):
            if budget.key == parked_on or (
                parked_on is None
                and budget.spec.enforce  # a shadowed budget holds nothing back
                and (budget.paused(now_ms) or not budget.pool.can_debit(cost, now_ms))
            ):
                at, exact = self.eligible(budget, cost, now_ms)
                if reserved_for_others(budget, row, cost, now_ms):
                    hint = self.eligible_hint(budget)
                    return {"state": "deferred", "reason": RESERVED, "exact": False,
                            "next_eligible_at": hint, "budget": budget.key}  # fmt: skip
                return {"state": "deferred", "reason": "budget_exhausted",
                        "next_eligible_at": at, "exact": exact, "budget": budget.key,
                        **_paused(budget, now_ms)}  # fmt: skip
        return {"state": "admitted", "reason": None, "next_eligible_at": None, "exact": True}

    def claimed_admission(self, row: JobRow, now_ms: int) -> dict[str, Any] | None:
        """``admission`` of a successful claim: each budget's tokens left."""
        resolved = self._resolve(row.namespace, row.budgets)
        if not resolved:
            return None
        return {"budgets": [{"key": b.key, "available": b.pool.available(now_ms)}
                            for b, _c in resolved]}  # fmt: skip

    def check_payable(self, row: JobRow) -> None:
        """Before a dead job comes back: ``conflict`` if a budget of it is gone or
        can no longer pay its cost (it would wait for ever)."""
        namespace, job_id = row.namespace, row.id
        for key, cost in bindings(row.budgets):
            budget = self.budgets.get((namespace, key))
            if budget is None:
                raise Refused(
                    "conflict", f"job {job_id!r} is bound to budget {key!r}, which no longer exists"
                )
            if cost > budget.spec.max_cost():
                raise Refused(
                    "conflict", f"job {job_id!r} costs {cost} on budget {key!r}, "
                    f"which can pay at most {budget.spec.max_cost()}",
                )  # fmt: skip


def reserved_for_others(budget: Budget, row: JobRow, cost: int, now_ms: int) -> bool:
    """Whether ``row`` waits on ``budget`` only for tokens reserved for other groups
    (the budget has them, unpaused, but another group is owed them)."""
    return (
        bool(budget.reservations) and not budget.paused(now_ms)
        and budget.pool.can_debit(cost, now_ms) and budget.held_for_others(row.grp or "", cost)
    )  # fmt: skip


def _paused(budget: Budget, now_ms: int) -> dict[str, Any]:
    """A paused budget's hold: reason ``budget_paused`` and the pause's reason text."""
    if not budget.paused(now_ms):
        return {}
    return {"reason": "budget_paused", "pause_reason": budget.pause_reason}
