"""Pausing a budget: ``budget_pause`` (a worker told by its upstream to wait)
and ``budget_resume`` (PROTOCOL.md, "Foresight").

``budget_pause {key, until_ms | retry_after_s, reason?}`` stops every debit of
the budget until that instant, whatever its tokens: its jobs park with reason
``budget_paused`` and come back at the pause's end exactly (the budgets'
waker sleeps until then). Exactly one of ``until_ms`` (a wall instant, at
most :data:`~actors.limits.MAX_PAUSE_MS` ahead; one already past pauses
nothing) and ``retry_after_s`` (seconds, more than 0 and at most a week,
fractions allowed: an HTTP ``Retry-After``) is given. A pause never shortens
another: the later instant wins, and a pause that does not lengthen the
current one changes nothing and writes nothing. The drip of a ``time_based``
budget goes on during a pause (up to its burst, as always).

Who may pause: a token with ``manage``, or with ``consume`` on a queue whose
jobs bind the budget (its scope ``*``, a running job of its scope bound to
it, or an unfinished one in the store). ``budget_resume {key}`` (``manage``)
ends a pause now, releasing in its own transaction the parked jobs the budget
can pay for (claimable as soon as it answers). Both are audited (actions
``pause`` and ``resume``, the caller's token as the actor), and a budget shows
its pause in ``state``
(``paused_until``, ``pause_reason``). The pause is stored with the budget, so
a restart keeps it and every daemon sharing the database holds it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from actors.bindings import bindings
from actors.budgets import Budget
from actors.errors import Refused, invalid
from actors.limits import MAX_INSTANT_MS, MAX_PAUSE_MS, PAUSE_REASON_LEN
from daemon.store.interface import Tx
from daemon.verbs.args import between, name, text
from daemon.verbs.budgets import BudgetKeyArgs, audited_save, visible_budget
from daemon.verbs.table import Call, Plan, verb

if TYPE_CHECKING:
    from daemon.services import Services

MAX_PAUSE_S = MAX_PAUSE_MS // 1000


def _seconds(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if (
        type(value) not in (int, float)
        or (type(value) is float and not math.isfinite(value))
        or not 0 < value <= MAX_PAUSE_S
    ):
        raise invalid(
            attr.name, f"{attr.name} must be a number of seconds above 0 and at most "
            f"{MAX_PAUSE_S}, got {value!r}",
        )  # fmt: skip


@attrs.frozen
class BudgetPauseArgs:
    key: str = attrs.field(validator=name)
    until_ms: int | None = attrs.field(default=None, validator=between(0, MAX_INSTANT_MS))
    retry_after_s: Any = attrs.field(default=None, validator=_seconds)
    reason: str | None = attrs.field(default=None, validator=text(PAUSE_REASON_LEN))


def pause_until(a: BudgetPauseArgs, now_ms: int) -> int:
    """The instant the pause asked for ends (``invalid_argument`` unless exactly one
    of ``until_ms`` and ``retry_after_s`` is given, within a week of now)."""
    if (a.until_ms is None) == (a.retry_after_s is None):
        raise invalid("until_ms", "give exactly one of until_ms and retry_after_s")
    if a.retry_after_s is not None:
        return now_ms + math.ceil(a.retry_after_s * 1000)
    if a.until_ms > now_ms + MAX_PAUSE_MS:  # type: ignore[operator]
        raise invalid(
            "until_ms", f"until_ms must be at most {MAX_PAUSE_MS} ms (a week) from now, "
            f"got {a.until_ms - now_ms} ms ahead",  # type: ignore[operator]
        )  # fmt: skip
    return a.until_ms  # type: ignore[return-value]


def may_pause(core: Services, call: Call, tx: Tx, budget: Budget) -> None:
    """``forbidden`` unless the caller has ``manage``, or ``consume`` on a queue
    whose unfinished jobs bind ``budget``."""
    session = call.session
    if session.has("manage") or "*" in session.queues:
        return
    namespace, key = budget.namespace, budget.key
    for row in core.running.values():  # the usual caller holds such a job: no read
        if (row.namespace == namespace and row.budgets is not None
                and session.in_scope(row.queue)
                and any(k == key for k, _c in bindings(row.budgets))):  # fmt: skip
            return
    if any(session.in_scope(q) for q in tx.store.budgets.bound_queues(namespace, key)):
        return
    raise Refused("forbidden", f"this token consumes no queue whose jobs bind budget {key!r}")


def _answer(core: Services) -> Any:
    return lambda budget: {"budget": budget.to_wire(core.clock.now_ms())}


@verb("budget_pause", ("consume", "manage"), BudgetPauseArgs)
def budget_pause(core: Services, call: Call, a: BudgetPauseArgs) -> Plan:
    """Pause a budget until an instant (the later of it and any current pause)."""
    pause_until(a, core.clock.now_ms())  # the arguments' refusals, before any write

    def write(tx: Tx) -> Budget:
        budget = visible_budget(core, call, a.key)
        may_pause(core, call, tx, budget)
        before = budget.to_wire(tx.now_ms)
        undo = budget.pause(pause_until(a, tx.now_ms), a.reason, tx.now_ms)
        if undo is None:
            return budget  # a pause as long already holds: nothing written
        tx.undo(undo)
        audited_save(tx, call.actor, budget, "pause", before)
        key, metrics, doorbell = budget.key, core.metrics, core.doorbell
        tx.after(lambda: (metrics.budget_paused(key), doorbell.limits_changed()))
        return budget

    return Plan(write, _answer(core))


@verb("budget_resume", ("manage",), BudgetKeyArgs, manage=True)
def budget_resume(core: Services, call: Call, a: BudgetKeyArgs) -> Plan:
    """End a budget's pause now (nothing written when it is not paused)."""

    def write(tx: Tx) -> Budget:
        budget = visible_budget(core, call, a.key)
        if not budget.paused(tx.now_ms):
            return budget
        before = budget.to_wire(tx.now_ms)
        tx.undo(budget.resume())
        audited_save(tx, call.actor, budget, "resume", before)
        core.budget_gate.release_now(tx, budget)  # claimable once this answers
        tx.after(lambda: core.budget_gate.settings_changed(budget))
        return budget

    return Plan(write, _answer(core))
