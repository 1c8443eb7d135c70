"""Budgets (grant ``manage``): ``budget_list``, ``budget_get``, ``budget_create``,
``budget_put``, ``budget_patch``, ``budget_delete``, shaped as seed 003.

An update never creates tokens (:meth:`actors.budget.TokenPool.update`), and
may not leave an unfinished bound job costing more than the budget can ever
pay (422, seed 003's text); a budget bound to unfinished jobs cannot be
deleted (409). Every write is audited (``target_kind: "budget"``). Budgets
change in place, inside the write, with an undo: a claim later in the same
transaction sees the new settings, and a rollback restores the old.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from actors import budget as spec_parser
from actors.budget import BudgetSpec, SpecError, Strategy, TokenPool
from actors.budgets import Budget
from actors.errors import Refused, invalid, not_found
from actors.limits import MAX_TOKENS
from actors.shadow import parse_enforce
from daemon.store.interface import Tx
from daemon.verbs.args import between, name
from daemon.verbs.table import Call, NoArgs, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services

ABSENT: Any = object()

#: Seed 003's texts for a refused strategy field ``{f}`` (actors.budget's problems).
_WORDS = {
    spec_parser.NOT_OBJECT: "{f} must be an object",
    spec_parser.BAD_TYPE: "{f} must be while_in_flight or time_based",
    spec_parser.BAD_COUNT: f"{{f}} must be an integer from 1 to {MAX_TOKENS}",
    spec_parser.REQUIRED: "{f} is required for time_based",
    spec_parser.TIME_BASED_ONLY: "{f} applies to time_based budgets only",
}


def strategy_refused(exc: SpecError, base: str = "strategy") -> Refused:
    """``invalid_argument`` for a strategy refused by the parser, its field under ``base``
    (``strategy``, or ``create_with.strategy``)."""
    field = base + exc.field.removeprefix("strategy")
    if exc.problem == spec_parser.UNKNOWN_FIELD:
        parent, _dot, name_ = field.rpartition(".")
        return invalid(field, f"{parent}: unknown field {name_!r}")
    if exc.problem == spec_parser.BAD_RESERVE:
        return invalid(field, exc.detail)
    return invalid(field, _WORDS[exc.problem].format(f=field))


def parse_strategy(value: Any, field: str = "strategy") -> Strategy:
    """A wire strategy object to a :class:`Strategy`, or ``invalid_argument``."""
    try:
        return spec_parser.parse_strategy(value)
    except SpecError as exc:
        raise strategy_refused(exc, field) from None


def checked_spec(allocation: int, strategy: Strategy, enforce: bool = True) -> BudgetSpec:
    """The settings, unless the reservations add up to more than the allocation."""
    try:
        return spec_parser.check_reserve(BudgetSpec(allocation, strategy, enforce))
    except SpecError as exc:
        raise strategy_refused(exc) from None


def _save(tx: Tx, budget: Budget) -> None:
    state = budget.pool.snapshot(tx.now_ms)
    tx.store.budgets.save(
        budget.namespace, budget.key, allocation=budget.spec.allocation,
        strategy=budget.spec.strategy.to_dict(), created_at=budget.created_at,
        updated_at=budget.updated_at, units=state.units, as_of_ms=state.as_of_ms,
        in_flight=state.in_flight, source=budget.source, paused_until=budget.paused_until,
        pause_reason=budget.pause_reason, enforce=budget.spec.enforce,
    )  # fmt: skip


@attrs.frozen
class BudgetKeyArgs:
    key: str = attrs.field(validator=name)


@attrs.frozen
class BudgetSetArgs:
    key: str = attrs.field(validator=name)
    allocation: int = attrs.field(validator=between(1, MAX_TOKENS))
    strategy: Any = None
    #: False: shadow mode (docs/rollout.md); null or absent: true.
    enforce: Any = None

    def spec(self) -> BudgetSpec:
        return checked_spec(
            self.allocation, parse_strategy(self.strategy), parse_enforce(self.enforce)
        )


@attrs.frozen
class BudgetPatchArgs:
    """A JSON merge patch: absent leaves a field, null resets it to its default."""

    key: str = attrs.field(validator=name)
    allocation: Any = ABSENT
    strategy: Any = ABSENT
    enforce: Any = ABSENT


def visible_budget(core: Services, call: Call, key: str) -> Budget:
    """The caller's namespace's budget ``key``; ``not_found`` if there is none."""
    budget = core.budgets.get((call.namespace, key))
    if budget is None:
        raise not_found(f"budget {key!r}")
    return budget


def _writable(budget: Budget) -> None:
    if budget.source == "config":
        raise Refused("conflict", f"budget {budget.key!r} is managed by config file")


def _jobs(n: int) -> str:
    return f"{n} unfinished job" + ("" if n == 1 else "s")


def audited_save(tx: Tx, actor: str, budget: Budget, action: str, before: Any) -> Budget:
    """Write ``budget`` whole and audit ``action`` by ``actor`` (``before``: its wire form)."""
    _save(tx, budget)
    tx.store.audit.record(
        at=tx.now_ms, actor=actor, namespace=budget.namespace, target_kind="budget",
        target=budget.key, action=action, before=before, after=budget.to_wire(tx.now_ms),
    )  # fmt: skip
    return budget


def create_budget(
    core: Services, tx: Tx, actor: str, namespace: str, key: str, spec: BudgetSpec,
    source: str = "api",
) -> Budget:  # fmt: skip
    """Create a budget in ``tx`` (full, as seed 003 says), within ``max_budgets``."""
    limit = core.config.daemon.max_budgets
    count = len(core.budgets)
    if count + 1 > limit:
        raise Refused(
            "quota_exceeded", f"max_budgets exceeded: {count + 1} > {limit}",
            limit="max_budgets", value=count + 1, max=limit,
        )  # fmt: skip
    budget = Budget(namespace, key, TokenPool(spec, tx.now_ms), tx.now_ms, tx.now_ms, source)
    tx.undo(core.budgets.add(budget))
    return audited_save(tx, actor, budget, "create", None)


def payable(budget: Budget, spec: BudgetSpec, bound: dict[int, int]) -> None:
    """Refuse settings under which a bound job (``bound``: cost -> jobs) could never
    be paid (seed 003's 422)."""
    if bound and spec.max_cost() < max(bound):
        raise invalid(
            "allocation",
            f"budget {budget.key!r} cannot allocate {spec.max_cost()}: "
            f"{_jobs(sum(bound.values()))} draw up to {max(bound)} from it. "
            "Raise the allocation, delete them, or wait for them to drain.",
        )


def _update(
    core: Services, tx: Tx, actor: str, budget: Budget, spec: BudgetSpec, source: str = "api"
) -> Budget:
    payable(budget, spec, core.budget_gate.bound(tx, budget))
    before = budget.to_wire(tx.now_ms)
    reserve = budget.reservations
    tx.undo(budget.update(spec, tx.now_ms, source))  # never creates tokens
    core.budget_gate.reserve_changed(tx, budget, reserve)
    if not spec.enforce and budget.parked > 0:
        core.budget_gate.release_now(tx, budget)  # shadowed: holds nothing back from now
    tx.after(lambda: core.budget_gate.settings_changed(budget))
    return audited_save(tx, actor, budget, "update", before)


def provision(core: Services, budgets: dict[str, dict[str, BudgetSpec]]) -> Callable[[Tx], None]:
    """The write that makes the config file's ``[budgets.<ns>.<key>]`` tables true.

    Provisioned budgets are created or updated (never gaining tokens) and
    become read-only through the API; a budget that left the file is kept and
    becomes the API's again.
    """

    def write(tx: Tx) -> None:
        wanted = {(ns, key) for ns, table in budgets.items() for key in table}
        for (ns, key), budget in list(core.budgets.items()):
            if budget.source == "config" and (ns, key) not in wanted:
                _update(core, tx, "config", budget, budget.spec, source="api")
        for ns, table in budgets.items():
            for key, spec in table.items():
                budget = core.budgets.get((ns, key))
                if budget is None:
                    create_budget(core, tx, "config", ns, key, spec, source="config")
                elif budget.spec != spec or budget.source != "config":
                    _update(core, tx, "config", budget, spec, source="config")

    return write


def _answer(core: Services) -> Any:
    return lambda budget: {"budget": budget.to_wire(core.clock.now_ms())}


@verb("budget_list", ("manage",), NoArgs, manage=True)
def budget_list(core: Services, call: Call, _a: NoArgs) -> Plan:
    """Every budget of the namespace, by key."""
    now = core.clock.now_ms()
    return answer_now({"budgets": [b.to_wire(now) for b in core.budgets.of(call.namespace)]})


@verb("budget_get", ("manage",), BudgetKeyArgs, manage=True)
def budget_get(core: Services, call: Call, a: BudgetKeyArgs) -> Plan:
    """One budget."""
    return answer_now({"budget": visible_budget(core, call, a.key).to_wire(core.clock.now_ms())})


@verb("budget_create", ("manage",), BudgetSetArgs, manage=True)
def budget_create(core: Services, call: Call, a: BudgetSetArgs) -> Plan:
    """Create a budget; ``conflict`` if it exists."""
    spec = a.spec()

    def write(tx: Tx) -> Budget:
        if (call.namespace, a.key) in core.budgets:
            raise Refused("conflict", f"budget {a.key!r} already exists")
        return create_budget(core, tx, call.actor, call.namespace, a.key, spec)

    return Plan(write, _answer(core))


@verb("budget_put", ("manage",), BudgetSetArgs, manage=True)
def budget_put(core: Services, call: Call, a: BudgetSetArgs) -> Plan:
    """Create a budget, or replace its settings (keeping its tokens)."""
    spec = a.spec()

    def write(tx: Tx) -> Budget:
        budget = core.budgets.get((call.namespace, a.key))
        if budget is None:
            return create_budget(core, tx, call.actor, call.namespace, a.key, spec)
        _writable(budget)
        return _update(core, tx, call.actor, budget, spec)

    return Plan(write, _answer(core))


def check_patch(a: BudgetPatchArgs) -> None:
    """Refuse a patch whose fields cannot apply to any budget."""
    if a.allocation is not ABSENT and (
        type(a.allocation) is not int or not 1 <= a.allocation <= MAX_TOKENS
    ):
        raise invalid(
            "allocation", f"allocation must be an integer from 1 to {MAX_TOKENS} (no default)"
        )
    if a.strategy is not ABSENT and not isinstance(a.strategy, dict):
        raise invalid("strategy", "strategy must be an object (it has no default)")
    if a.enforce is not ABSENT:
        parse_enforce(a.enforce)  # null: true


def patched_spec(budget: Budget, a: BudgetPatchArgs) -> BudgetSpec:
    """``budget``'s settings with the merge patch ``a`` applied (checked)."""
    strategy = budget.spec.strategy.to_dict()
    if a.strategy is not ABSENT:
        if a.strategy.get("type") not in (None, strategy["type"]):
            strategy = {"type": a.strategy["type"]}  # a type change drops the others
        strategy.update(a.strategy)
        strategy = {k: v for k, v in strategy.items() if v is not None}
    allocation = budget.spec.allocation if a.allocation is ABSENT else a.allocation
    flag = budget.spec.enforce if a.enforce is ABSENT else parse_enforce(a.enforce)
    return checked_spec(allocation, parse_strategy(strategy), flag)


@verb("budget_patch", ("manage",), BudgetPatchArgs, manage=True)
def budget_patch(core: Services, call: Call, a: BudgetPatchArgs) -> Plan:
    """Merge-patch a budget's settings (null resets a field to its default)."""
    check_patch(a)

    def write(tx: Tx) -> Budget:
        budget = visible_budget(core, call, a.key)
        spec = patched_spec(budget, a)
        _writable(budget)
        return _update(core, tx, call.actor, budget, spec)

    return Plan(write, _answer(core))


@verb("budget_delete", ("manage",), BudgetKeyArgs, manage=True)
def budget_delete(core: Services, call: Call, a: BudgetKeyArgs) -> Plan:
    """Delete a budget."""

    def write(tx: Tx) -> dict[str, Any]:
        budget = visible_budget(core, call, a.key)
        _writable(budget)
        bound = core.budget_gate.bound(tx, budget)
        if bound:
            raise Refused(
                "conflict",
                f"budget {a.key!r} is referenced by {_jobs(sum(bound.values()))}. "
                "Delete them or wait for them to finish before deleting it.",
            )
        tx.store.budgets.delete(call.namespace, a.key)
        tx.store.audit.record(
            at=tx.now_ms, actor=call.actor, namespace=call.namespace,
            target_kind="budget", target=a.key, action="delete",
            before=budget.to_wire(tx.now_ms), after=None,
        )  # fmt: skip
        tx.undo(core.budgets.remove(call.namespace, a.key))
        return {}

    return Plan(write)
