"""The shapes :mod:`daemon.openapi` describes: error and answer bodies, known free-form fields.

Data only. :data:`FIELD_SCHEMAS` describes argument fields whose attrs type
says too little (``Any``, or a list checked by a verb's own validator);
:data:`RESULTS` the 200 body of ``POST /v1/ops/<verb>`` where it is known;
:data:`ANSWERS` the refusals a verb adds to :data:`COMMON`.
"""

from __future__ import annotations

from typing import Any

from actors.claim_windows import MAX_CLAIMS, MAX_WINDOWS
from actors.errors import STATUS
from actors.lifecycle import STATES
from actors.limits import MAX_TOKENS, NAME_RE, PRIORITY
from actors.window import PERIODS
from daemon.admission.explain import KINDS

Schema = dict[str, Any]

#: Codes an HTTP answer can carry: the contract's, and the transport's own.
CODES = sorted({*STATUS, "unsupported_media_type"})


def ref(component: str) -> Schema:
    """A reference to ``#/components/schemas/<component>``."""
    return {"$ref": f"#/components/schemas/{component}"}


def obj(required: list[str] | None = None, **properties: Schema) -> Schema:
    """An object schema with these properties (others allowed: fields may be added)."""
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


NAME: Schema = {"type": "string", "pattern": NAME_RE.pattern, "minLength": 1, "maxLength": 128}
ERROR: Schema = {
    "type": "object",
    "required": ["error", "code"],
    "properties": {
        "error": {"type": "string", "description": "A message for people."},
        "code": {"type": "string", "enum": CODES},
        "field": {"type": "string", "description": "The argument at fault (invalid_argument)."},
        "limit": {"type": "string", "description": "The limit that refused (429, 403, 413)."},
        "value": {"description": "The value the call would reach."},
        "max": {"description": "The limit's value."},
        "retry_after": {"type": "integer", "description": "Seconds; also Retry-After."},
        "ref": {"type": "string", "description": "The log reference of an internal error."},
    },
    "additionalProperties": True,
}
ANY: Schema = {}
INT = {"type": "integer"}
_NULLABLEINT = {"type": ["integer", "null"]}
OBJECT: Schema = {"type": "object"}
STRATEGY: Schema = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"type": "string", "enum": ["while_in_flight", "time_based"]},
        "duration_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
        "burst": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
    },
    "additionalProperties": False,
}
WINDOW: Schema = {
    "type": "object",
    "required": ["period", "tz", "start"],
    "properties": {
        "period": {"type": "string", "enum": list(PERIODS)},
        "tz": {"type": "string", "description": "An IANA zone, e.g. America/Los_Angeles."},
        "start": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
        "weekday": {"type": "string", "enum": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]},
    },
    "additionalProperties": False,
}
#: One of a policy's stacked ``windows`` (docs/fairness.md, "Stacked windows").
CLAIM_WINDOW: Schema = {
    "type": "object",
    "required": ["max_claims", "period", "tz"],
    "properties": {
        "max_claims": {"type": "integer", "minimum": 0, "maximum": MAX_CLAIMS},
        **WINDOW["properties"],
    },
    "additionalProperties": False,
}
#: ``windows``: one window per period.
CLAIM_WINDOWS: Schema = {
    "type": "array", "items": CLAIM_WINDOW, "minItems": 1, "maxItems": MAX_WINDOWS,
}  # fmt: skip
QUOTA: Schema = {
    "type": "object",
    "description": "The namespace quota document (docs/quotas.md, docs/door.md).",
}


BUDGET_STATE = {
    "type": "object",
    "properties": {
        "available": {"type": "number"},
        "in_flight": INT,
        "parked": INT,
        "next_refill_at": _NULLABLEINT,
        "paused_until": _NULLABLEINT,
        "pause_reason": {"type": ["string", "null"]},
    },
}
#: The verbs ``what_if`` previews (daemon.verbs.what_if.PREVIEWS; a unit test checks).
PREVIEWED = ("quota_set", "policy_set", "budget_put", "budget_patch", "queue_configure")
_BEFORE_AFTER = obj(["before", "after"], before=INT, after=INT)
_TOKENS = {"type": ["number", "null"]}
#: ``what_if``'s answer (PROTOCOL.md, "Foresight").
WHAT_IF: Schema = obj(
    ["op", "now", "flow", "assumptions"],
    op={"type": "string"},
    now=obj(
        ["deferred_jobs", "released_jobs", "shed_next_enqueues", "admissible_now",
         "budget_available", "head_next_eligible_at"],
        deferred_jobs=INT, released_jobs=INT, shed_next_enqueues={"type": "boolean"},
        next_enqueue={"type": "string"}, admissible_now=_BEFORE_AFTER,
        budget_available=obj(["before", "after"], before=_TOKENS, after=_TOKENS),
        head_next_eligible_at=_NULLABLEINT,
    ),
    flow={"type": "array", "minItems": 24, "maxItems": 24,
          "items": obj(["hour_start", "admitted"], hour_start=INT, admitted=INT)},
    assumptions={"type": "array", "items": {"type": "string"}},
)  # fmt: skip

COMPONENTS: dict[str, Schema] = {
    "Error": ERROR,
    "WhatIf": WHAT_IF,
    "Job": {
        "type": "object",
        "required": [
            "id",
            "namespace",
            "queue",
            "type",
            "priority",
            "status",
            "attempts",
            "max_attempts",
            "ready_at",
            "created_at",
        ],
        "properties": {
            "id": {"type": "string"},
            "namespace": NAME,
            "queue": NAME,
            "type": NAME,
            "payload": ANY,
            "priority": {"type": "integer", "minimum": PRIORITY[0], "maximum": PRIORITY[1]},
            "status": {"type": "string", "enum": list(STATES)},
            "attempts": INT,
            "max_attempts": INT,
            "lease_ms": INT,
            "ready_at": INT,
            "created_at": INT,
            "updated_at": INT,
            "finished_at": _NULLABLEINT,
            "lease": {"type": ["string", "null"]},
            "lease_expires_at": _NULLABLEINT,
            "budgets": {
                "type": "array",
                "items": {"type": "object", "properties": {"key": NAME, "cost": INT}},
            },
            "costs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": NAME,
                        "reserved": INT,
                        "settled": {"type": ["number", "null"]},
                    },
                },
            },
            "unique_key": {"type": ["string", "null"]},
            "group": {"type": ["string", "null"]},
            "error": {"type": ["string", "null"]},
            "result": ANY,
            "dead": {"type": ["object", "null"]},
            "admission": {"type": ["object", "null"]},
        },
    },
    #: ``answer: "minimal"``'s job object (PROTOCOL.md, "Smaller answers").
    "JobBrief": {
        "type": "object",
        "required": ["id", "status"],
        "properties": {
            "id": {"type": "string"},
            "status": {"type": "string", "enum": list(STATES)},
            "lease": {"type": "string"},
        },
    },
    "Enqueued": {
        "type": "object",
        "required": ["job", "duplicate", "folded", "shed"],
        "properties": {
            "job": {
                "anyOf": [
                    {"$ref": "#/components/schemas/Job"},
                    {"$ref": "#/components/schemas/JobBrief"},
                ]
            },
            "duplicate": {"type": "boolean"},
            "folded": {"type": "boolean"},
            "shed": {"type": "boolean"},
        },
    },
    "Budget": {
        "type": "object",
        "required": ["key", "allocation", "strategy", "created_at", "updated_at"],
        "properties": {
            "key": NAME,
            "allocation": INT,
            "strategy": OBJECT,
            "created_at": INT,
            "updated_at": INT,
            "state": BUDGET_STATE,
            "enforce": {"type": "boolean", "description": "false: shadow mode (shown only then)"},
        },
    },
    "Policy": {
        "type": "object",
        "required": ["queue"],
        "properties": {
            "queue": NAME,
            "max_in_flight": _NULLABLEINT,
            "max_claims_per_window": _NULLABLEINT,
            "window": {"type": ["object", "null"]},
            "windows": CLAIM_WINDOWS,
            "enforce": {"type": "boolean", "description": "false: shadow mode (shown only then)"},
            "source": {"type": "string"},
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["ok", "degraded", "draining", "unavailable"]},
            "problems": {"type": "array", "items": {"type": "string"}},
            "database": {
                "type": "object",
                "required": ["store", "reachable", "host", "name"],
                "properties": {
                    "store": {"type": "string", "enum": ["sqlite", "postgresql"]},
                    "reachable": {"type": "boolean"},
                    "host": {"type": ["string", "null"]},
                    "name": {"type": ["string", "null"]},
                },
            },
        },
    },
}


JOBS_PAGE = obj(
    ["jobs", "next"],
    jobs={"type": "array", "items": ref("Job")},
    next={"type": ["string", "null"]},
)
CLAIMED = obj(["job"], job=ref("Job"), admission={"type": ["object", "null"]})
#: A job object, or its brief form where the call asked ``answer: "minimal"``.
JOB_OR_BRIEF: Schema = {"anyOf": [ref("Job"), ref("JobBrief")]}
#: ``answer``'s values (the verbs of daemon.dispatch.MINIMAL_VERBS take it).
ANSWER_FORM: Schema = {"type": "string", "enum": ["full", "minimal"]}
BUDGET_ANSWER = obj(["budget"], budget=ref("Budget"))
POLICY_ANSWER = obj(["policy"], policy=ref("Policy"))
EMPTY = obj()
ENQUEUED_MANY = obj(["results"], results={"type": "array", "items": ref("Enqueued")})

_NUMBER_OR_NULL = {"type": ["number", "null"]}
#: ``explain``'s answer (PROTOCOL.md, Foresight; docs/protocol.md).
EXPLAINED = obj(
    ["job_id", "status", "holds", "position"],
    job_id={"type": "string"},
    status={"type": "string", "enum": list(STATES)},
    holds={"type": "array", "items": obj(
        ["limit", "kind", "scope", "used", "max", "holding", "next_eligible_at", "exact"],
        limit={"type": "string"}, kind={"type": "string", "enum": list(KINDS)},
        scope={"type": "object", "additionalProperties": {"type": "string"}},
        used=_NUMBER_OR_NULL, max=_NUMBER_OR_NULL, holding={"type": "boolean"},
        next_eligible_at=_NULLABLEINT, exact={"type": "boolean"},
    )},
    position=obj(["ahead", "approximate"], ahead=_NULLABLEINT,
                 approximate={"type": "boolean"}),
)  # fmt: skip

#: The 200 body of ``POST /v1/ops/<verb>``; a verb not here answers "an object".
RESULTS: dict[str, Schema] = {
    "enqueue": ref("Enqueued"),
    "enqueue_many": ENQUEUED_MANY,
    "dead_replay": obj(
        ["results"],
        results={"type": "array", "items": ref("Enqueued")},
        remaining={"type": "boolean"},
        next={"type": ["string", "null"]},
    ),
    "get": obj(["job"], job=ref("Job")),
    "explain": EXPLAINED,
    "list": JOBS_PAGE,
    "dead_list": JOBS_PAGE,
    "claim_next": obj(
        ["jobs", "empty"],
        jobs={"type": "array", "items": CLAIMED},
        empty={"type": "boolean"},
        deferred={"type": "array", "items": OBJECT},
    ),
    "claim": CLAIMED,
    "heartbeat": obj(["lease_expires_at"], lease_expires_at=INT, job=ref("JobBrief")),
    "complete": obj(["job"], job=JOB_OR_BRIEF),
    "fail": obj(["job"], job=JOB_OR_BRIEF),
    "release": obj(["job"], job=JOB_OR_BRIEF),
    "status": obj(
        ["namespace", "queues"],
        namespace=NAME,
        queues={"type": "array", "items": OBJECT},
        budgets={"type": "array", "items": OBJECT},
        quota={"type": ["object", "null"]},
        daemon=OBJECT,
    ),
    "queue_configure": obj(["queue"], queue=OBJECT),
    "queue_list": obj(["queues"], queues={"type": "array", "items": OBJECT}),
    "budget_list": obj(["budgets"], budgets={"type": "array", "items": ref("Budget")}),
    "budget_get": BUDGET_ANSWER,
    "budget_create": BUDGET_ANSWER,
    "budget_put": BUDGET_ANSWER,
    "budget_patch": BUDGET_ANSWER,
    "budget_delete": EMPTY,
    "budget_pause": BUDGET_ANSWER,
    "budget_resume": BUDGET_ANSWER,
    "quota_get": obj(
        ["quota", "source"],
        quota={"type": ["object", "null"]},
        source={"type": ["string", "null"], "enum": ["api", "config", None]},
        error={"type": "string"},
    ),
    "quota_set": obj(["quota"], quota=OBJECT),
    "quota_clear": EMPTY,
    "policy_get": POLICY_ANSWER,
    "policy_set": POLICY_ANSWER,
    "policy_clear": EMPTY,
    "policy_list": obj(["policies"], policies={"type": "array", "items": ref("Policy")}),
    "admission_status": obj(["queues"], queues={"type": "array", "items": OBJECT}),
    "audit_list": obj(["records"], records={"type": "array", "items": OBJECT}),
    "periodic_list": obj(["periodic"], periodic={"type": "array", "items": OBJECT}),
    "what_if": ref("WhatIf"),
}

#: Statuses every authenticated route can answer: 401 (tokens configured), 403
#: (a grant, another namespace, a cap, a cross-site write), 422, 429 (the door's
#: request bucket), 500, 503 (quota unreadable, draining).
COMMON = (401, 403, 422, 429, 500, 503)
#: ...and every route with a body: 400 (does not decode), 413, 415.
WITH_BODY = (400, 413, 415)
#: Statuses a verb adds: 404 (what it names is absent or not the caller's), 409.
ANSWERS: dict[str, tuple[int, ...]] = {
    "get": (404,),
    "explain": (404,),
    "claim": (404, 409),
    "heartbeat": (404, 409),
    "complete": (404, 409),
    "fail": (404, 409),
    "release": (404, 409),
    "enqueue": (404, 409),
    "enqueue_many": (404, 409),
    "dead_replay": (404, 409),
    "budget_get": (404,),
    "budget_create": (409,),
    "budget_put": (409,),
    "budget_patch": (404, 409),
    "budget_delete": (404, 409),
    "budget_pause": (404,),
    "budget_resume": (404,),
    "policy_get": (404,),
    "policy_set": (404, 409),
    "policy_clear": (404, 409),
    "quota_set": (409,),
    "quota_clear": (409,),
    "queue_configure": (404,),
    "admission_status": (404,),
    "what_if": (404, 409),
}
