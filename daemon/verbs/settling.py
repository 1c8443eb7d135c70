"""Settling a completion's costs: ``complete``'s ``cost`` (PROTOCOL.md, "Foresight").

A worker may report what a job really cost each ``time_based`` budget it is
bound to (``cost: {key: actual}``, a number from 0 to
:data:`~actors.limits.MAX_TOKENS`). The completion's row then carries the
settled costs (:func:`actors.bindings.with_settled`), and the transition step
settles the pool (:meth:`daemon.admission.budget_gate.BudgetGate.moved`): a
smaller actual refunds the difference, never above the burst; a larger one
takes the extra, which may leave the pool in debt.

Refused as ``invalid_argument`` naming ``cost.<key>``, nothing written: a key
that is no budget of the namespace, a budget the job is not bound to, and a
``while_in_flight`` budget (its cost is held only while the job runs and comes
back whole when it finishes: there is nothing to settle).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from actors.bindings import bindings, with_settled
from actors.budgets import Budgets
from actors.errors import invalid
from actors.limits import MAX_BINDINGS, MAX_TOKENS, NAME_RE, NAME_RULE
from daemon.store.interface import JobRow


def cost_map(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    """``cost``: absent, or an object of budget key -> actual cost (0 to MAX_TOKENS)."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise invalid(attr.name, f"{attr.name} must be an object of budget key -> actual cost")
    if len(value) > MAX_BINDINGS:
        raise invalid(attr.name, f"{attr.name} names at most {MAX_BINDINGS} budgets")
    for key, actual in value.items():
        field = f"{attr.name}.{key}"
        if not isinstance(key, str) or not NAME_RE.match(key):
            raise invalid(attr.name, f"{attr.name}'s keys must be budget keys: {NAME_RULE}")
        if (
            type(actual) not in (int, float)
            or (type(actual) is float and not math.isfinite(actual))
            or not 0 <= actual <= MAX_TOKENS
        ):
            raise invalid(field, f"{field} must be a number from 0 to {MAX_TOKENS}, got {actual!r}")


def settled_bindings(budgets: Budgets, row: JobRow, cost: dict[str, Any] | None) -> str | None:
    """The stored bindings of ``row`` with ``cost`` settled, or None when there is
    nothing to settle; ``invalid_argument`` naming the first key refused."""
    if not cost:
        return None
    bound = {key for key, _cost in bindings(row.budgets)}
    for key in sorted(cost):
        field = f"cost.{key}"
        budget = budgets.get((row.namespace, key))
        if budget is None:
            raise invalid(field, f"cost names budget {key!r}, which does not exist")
        if key not in bound:
            raise invalid(field, f"job {row.id!r} is not bound to budget {key!r}")
        if not budget.pool.time_based:
            raise invalid(
                field,
                f"budget {key!r} is while_in_flight: its cost comes back whole when the job "
                "finishes; only time_based debits are settled",
            )
    return with_settled(row.budgets, cost)  # type: ignore[arg-type]
