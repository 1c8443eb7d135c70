"""Argument fields whose schema the attrs classes do not show, for the OpenAPI
document (:mod:`daemon.openapi`): free-form objects, lists, enums, and the
bounds of fields checked in the verb rather than by a validator.
"""

from __future__ import annotations

from actors.lifecycle import STATES
from actors.limits import MAX_BINDINGS, MAX_PAUSE_MS, MAX_TOKENS, NAME_RE
from daemon.openapi_shapes import CLAIM_WINDOWS, NAME, PREVIEWED, QUOTA, STRATEGY, WINDOW, Schema


def _group_map(lo: int, hi: int) -> Schema:
    """A policy's ``{group: integer}`` map."""
    return {
        "type": ["object", "null"], "maxProperties": 1000,
        "additionalProperties": {"type": "integer", "minimum": lo, "maximum": hi},
    }  # fmt: skip


#: Schemas of free-form or list fields whose shape the argument class does not
#: show, by ``<class name>.<field>``.
FIELD_SCHEMAS: dict[str, Schema] = {
    # what_if's change: a verb and its own arguments (checked as that verb checks them).
    "WhatIfArgs.change": {
        "type": "object",
        "required": ["op"],
        "properties": {"op": {"type": "string", "enum": list(PREVIEWED)}},
    },
    "BudgetSetArgs.strategy": STRATEGY,
    "BudgetPatchArgs.allocation": {
        "type": ["integer", "null"],
        "minimum": 1,
        "maximum": MAX_TOKENS,
    },
    "BudgetPatchArgs.strategy": {"type": ["object", "null"]},
    # Shadow mode (docs/rollout.md): null or absent is true.
    "BudgetSetArgs.enforce": {"type": ["boolean", "null"]},
    "BudgetPatchArgs.enforce": {"type": ["boolean", "null"]},
    "PolicySetArgs.enforce": {"type": ["boolean", "null"]},
    "CompleteArgs.cost": {
        "type": ["object", "null"],
        "maxProperties": MAX_BINDINGS,
        "propertyNames": {"pattern": NAME_RE.pattern},
        "additionalProperties": {"type": "number", "minimum": 0, "maximum": MAX_TOKENS},
    },
    "BudgetPauseArgs.retry_after_s": {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "maximum": MAX_PAUSE_MS // 1000,
    },
    "BindingArgs.create_with": {
        "type": ["object", "null"],
        "required": ["allocation", "strategy"],
        "properties": {
            "allocation": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
            "strategy": STRATEGY,
            "enforce": {"type": ["boolean", "null"]},
        },
        "additionalProperties": False,
    },
    "PolicySetArgs.max_in_flight": {"type": ["integer", "null"], "minimum": 0, "maximum": 10_000},
    "PolicySetArgs.max_claims_per_window": {
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": 1_000_000,
    },
    "PolicySetArgs.window": {"anyOf": [WINDOW, {"type": "null"}]},
    "PolicySetArgs.windows": {"anyOf": [CLAIM_WINDOWS, {"type": "null"}]},
    # The group fields (docs/fairness.md).
    "PolicySetArgs.fairness": {"type": ["string", "null"], "enum": ["fifo", "round_robin", None]},
    "PolicySetArgs.weights": _group_map(1, 10_000),
    "PolicySetArgs.default_weight": {"type": ["integer", "null"], "minimum": 1, "maximum": 10_000},
    "PolicySetArgs.max_in_flight_per_group": {
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": 10_000,
    },
    "PolicySetArgs.group_limits": _group_map(0, 10_000),
    "PolicySetArgs.min_in_flight": _group_map(0, 10_000),
    "EnqueueArgs.group": {"type": ["string", "null"], "minLength": 1, "maxLength": 128},
    "QuotaSetArgs.quota": QUOTA,
    "ClaimNextArgs.queues": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 100},
    "SubscribeArgs.queues": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 100},
    "ListArgs.status": {"type": ["string", "null"], "enum": [*STATES, None]},
    "DeadReplayArgs.job_ids": {
        "type": ["array", "null"],
        "minItems": 1,
        "items": {"type": "string", "minLength": 1, "maxLength": 64},
    },
}
