"""``what_if {change: {op, ...arguments}}``: preview a limit change, writing nothing.

The change is any of :data:`PREVIEWS`' verbs with its own arguments, checked
as that verb checks them (its argument class, then the same refusals it gives
before writing: ``not_found``, ``conflict`` for a limit the config file
manages, the 422 of a budget that could no longer pay a bound job). An
``invalid_argument`` names the field under ``change.`` (``change.max_pending``,
``change.window.tz``); an unknown or missing ``op`` is ``change.op``. The grant
is the change's own verb's (``quota_set`` needs ``operator``). A preview
writes nothing: no audit record, no usage, and it takes no token of the admin
or policy write limits (it is not a write). The answer is
:mod:`daemon.admission.what_if`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from actors.budget import BudgetSpec, TokenPool
from actors.budgets import Budget
from actors.errors import Refused, invalid
from actors.policy import parse_policy
from actors.quota import parse_quota
from daemon.admission import what_if as foresight
from daemon.verbs import budgets, policies, queues, quotas
from daemon.verbs.args import structure
from daemon.verbs.table import VERBS, Call, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services


@attrs.frozen
class WhatIfArgs:
    change: Any


def _sources(core: Services) -> foresight.Sources:
    return foresight.Sources(
        clock=core.clock, store=core.store, counts=core.counts, namespaces=core.namespaces,
        policies=core.policies, budgets=core.budgets, budget_gate=core.budget_gate,
        quotas=core.quotas, history=core.history, running=core.running,
    )  # fmt: skip


def _quota_set(core: Services, call: Call, a: quotas.QuotaSetArgs) -> foresight.Preview:
    quota = parse_quota(a.quota)
    quotas._writable(core, call.namespace)  # the verb's own checks, as it makes them
    return foresight.preview_quota(_sources(core), call.namespace, quota)


def _policy_set(core: Services, call: Call, a: policies.PolicySetArgs) -> foresight.Preview:
    policy = parse_policy(a.fields())
    old = policies._managed(core, call, a.queue)
    policies._read_only(old, a.queue)
    return foresight.preview_policy(_sources(core), call.namespace, a.queue, policy)


def _budget(core: Services, call: Call, key: str, spec: BudgetSpec) -> foresight.Preview:
    now = core.clock.now_ms()
    budget = core.budgets.get((call.namespace, key))
    if budget is None:  # budget_put creates it: nothing waits on it yet
        made = Budget(call.namespace, key, TokenPool(spec, now), now, now)
        preview = foresight.preview_budget(_sources(core), made, spec)
        preview.budget_available = (None, preview.budget_available[1])
        return preview
    budgets._writable(budget)
    budgets.payable(budget, spec, budget.bound)
    return foresight.preview_budget(_sources(core), budget, spec)


def _budget_put(core: Services, call: Call, a: budgets.BudgetSetArgs) -> foresight.Preview:
    return _budget(core, call, a.key, a.spec())


def _budget_patch(core: Services, call: Call, a: budgets.BudgetPatchArgs) -> foresight.Preview:
    budgets.check_patch(a)
    budget = budgets.visible_budget(core, call, a.key)
    return _budget(core, call, a.key, budgets.patched_spec(budget, a))


def _queue_configure(core: Services, call: Call, a: queues.QueueConfigureArgs) -> foresight.Preview:
    call.scope(a.queue)
    core.door.new_queues(call.namespace, {a.queue})
    ttls = {"completed_ttl_ms": a.completed_ttl_ms, "dead_ttl_ms": a.dead_ttl_ms}
    core.door.retention(call.namespace, ttls)
    return foresight.preview_policy(_sources(core), call.namespace, a.queue, None)


#: The changes ``what_if`` previews: verb -> its preview.
PREVIEWS: dict[str, Callable[[Services, Call, Any], foresight.Preview]] = {
    "quota_set": _quota_set,
    "policy_set": _policy_set,
    "budget_put": _budget_put,
    "budget_patch": _budget_patch,
    "queue_configure": _queue_configure,
}


@verb("what_if", (), WhatIfArgs)
def what_if(core: Services, call: Call, a: WhatIfArgs) -> Plan:
    """What ``change`` would do now and over the next 24 hours; writes nothing."""
    change = a.change
    if not isinstance(change, dict):
        raise invalid("change", "change must be an object {op, ...the verb's arguments}")
    op = change.get("op")
    preview = PREVIEWS.get(op) if isinstance(op, str) else None
    if preview is None:
        raise invalid("change.op", f"change.op must be one of {', '.join(PREVIEWS)}, got {op!r}")
    if "namespace" in change:
        raise invalid("change.namespace", "name the namespace on what_if itself, not in change")
    real = VERBS[op]
    if not call.session.has_any(real.grants):
        raise Refused("forbidden", f"this token is not granted {op!r}")
    args = {k: v for k, v in change.items() if k != "op"}
    try:
        parsed = structure(args, real.args)
        return answer_now(preview(core, call, parsed).answer(op))
    except Refused as exc:
        field = exc.details.get("field")
        if exc.code == "invalid_argument" and isinstance(field, str):
            exc.details["field"] = f"change.{field}" if field else "change"
        raise
