"""``GET /openapi.json``: the HTTP surface as an OpenAPI 3.1 document, built from the verb table.

Every verb the HTTP transport serves appears as ``POST /v1/ops/<verb>`` with a
request body schema made from its argument class (:func:`args_schema`): attrs
field types give the JSON types, a field without a default is required, the
argument validators give bounds (:func:`daemon.verbs.args.between`), lengths
(:func:`daemon.verbs.args.text`) and the name pattern
(:func:`daemon.verbs.args.name`), and unknown keys are refused
(``additionalProperties: false``, as the strict converter does). A new verb
therefore appears without editing anything here; :mod:`daemon.openapi_shapes`
gives its answer a shape where one is known.

The REST faces (jobs, budgets, admission policies, the quota), ``/healthz``,
``/metrics`` and this document are listed in :func:`_rest_paths`, their bodies
drawn from the same argument classes. Every error body is ``Error``.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

import attrs

from actors.lifecycle import STATES
from actors.limits import NAME_RE
from daemon import __version__
from daemon.dispatch import MINIMAL_VERBS
from daemon.openapi_fields import FIELD_SCHEMAS
from daemon.openapi_shapes import (
    ANSWER_FORM,
    ANSWERS,
    COMMON,
    COMPONENTS,
    ENQUEUED_MANY,
    JOBS_PAGE,
    NAME,
    OBJECT,
    POLICY_ANSWER,
    QUOTA,
    RESULTS,
    WITH_BODY,
    Schema,
    obj,
    ref,
)
from daemon.verbs import VERBS
from daemon.verbs.args import between, json_value, name, text

#: Verbs the HTTP transport refuses (they need a connection of their own).
SOCKET_ONLY = frozenset({"hello", "subscribe"})
_DESCRIPTIONS = {
    200: "Done.", 201: "Created.", 204: "Done, no body.", 400: "The body does not decode.",
    401: "No or wrong bearer token.", 403: "Forbidden, over a cap, or a cross-site write.",
    404: "Absent, or not the caller's to see.", 409: "Conflict with the current state.",
    413: "Body too large.", 415: "The body is not JSON or msgpack.",
    422: "A malformed argument (field names it).", 429: "Later (retry_after, Retry-After).",
    500: "A bug (the log has the reference).", 503: "Quota unreadable, or the daemon drains.",
}  # fmt: skip


# -- argument classes to schemas ---------------------------------------------------------


def _validator_schema(validator: Any) -> Schema:
    """What an argument validator adds to a field's schema (a verb's own check: nothing)."""
    if validator is None or validator is json_value:
        return {}
    if validator is name:
        return {"pattern": NAME_RE.pattern, "minLength": 1, "maxLength": 128}
    inner = getattr(validator, "_validators", None)  # attrs.validators.and_()
    if inner is not None:
        merged: Schema = {}
        for one in inner:
            merged.update(_validator_schema(one))
        return merged
    qualname = getattr(validator, "__qualname__", "")
    if qualname.startswith(between.__qualname__ + ".<locals>"):
        bounds = inspect.getclosurevars(validator).nonlocals
        schema: Schema = {"minimum": bounds["lo"]}
        if bounds.get("hi") is not None:
            schema["maximum"] = bounds["hi"]
        return schema
    if qualname.startswith(text.__qualname__ + ".<locals>"):
        return {"minLength": 1, "maxLength": inspect.getclosurevars(validator).nonlocals["max_len"]}
    return {}


def _type_schema(tp: Any, components: dict[str, Schema]) -> Schema:
    """The JSON schema of a resolved annotation; attrs classes go to ``components``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:
            inner = _type_schema(kinds[0], components)
        else:
            inner = {"anyOf": [_type_schema(k, components) for k in kinds]}
        if type(None) not in args:
            return inner
        if isinstance(inner.get("type"), str):
            return {**inner, "type": [inner["type"], "null"]}
        return {"anyOf": [inner, {"type": "null"}]}
    if origin in (list, tuple) or tp in (list, tuple):
        return {"type": "array", "items": _type_schema(args[0], components) if args else {}}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object"}
    if tp in simple or origin is dict:
        return {"type": simple.get(tp, "object")}
    if isinstance(tp, type) and attrs.has(tp):
        if tp.__name__ not in components:
            components[tp.__name__] = {}  # placeholder: a class may refer to itself
            components[tp.__name__] = args_schema(tp, components)
        return ref(tp.__name__)
    return {}  # Any, or a type JSON cannot name


def args_schema(
    cls: type, components: dict[str, Schema], *, drop: frozenset[str] = frozenset()
) -> Schema:
    """The body schema of an attrs argument class, fields in ``drop`` left out.

    Nested attrs classes are added to ``components`` and referred to.
    """
    attrs.resolve_types(cls)
    properties: Schema = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if field.name in drop:
            continue
        override = FIELD_SCHEMAS.get(f"{cls.__name__}.{field.name}")
        # Bounds and patterns apply to their own JSON type only, so a nullable
        # field keeps them without refusing null.
        properties[field.name] = (
            dict(override)
            if override is not None
            else {**_type_schema(field.type, components), **_validator_schema(field.validator)}
        )
        if field.default is attrs.NOTHING:
            required.append(field.name)
    body: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        body["required"] = required
    return body


# -- operations --------------------------------------------------------------------------


def _content(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}, "application/msgpack": {"schema": schema}}


def _operation(
    summary: str,
    ok: dict[int, Schema | None],
    errors: tuple[int, ...],
    *,
    body: Schema | None = None,
    params: list[Schema] | None = None,
    tag: str,
) -> Schema:
    """One operation: its 2xx answers, its error statuses, its body and parameters."""
    responses: Schema = {}
    for status, schema in ok.items():
        responses[str(status)] = {"description": _DESCRIPTIONS[status]}
        if schema is not None:
            responses[str(status)]["content"] = _content(schema)
    for status in sorted(set(errors)):
        responses[str(status)] = {"$ref": f"#/components/responses/Error{status}"}
    operation: Schema = {"summary": summary, "tags": [tag], "responses": responses}
    if params:
        operation["parameters"] = params
    if body is not None:
        operation["requestBody"] = {"required": True, "content": _content(body)}
    return operation


def _error_responses() -> Schema:
    """One shared response per error status: the ``Error`` body, Retry-After on 429."""
    shared: Schema = {}
    for status, description in _DESCRIPTIONS.items():
        if status < 400:
            continue
        answer: Schema = {"description": description, "content": _content(ref("Error"))}
        if status == 429:
            answer["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
        shared[f"Error{status}"] = answer
    return shared


def _param(param: str, where: str, schema: Schema) -> Schema:
    return {"name": param, "in": where, "required": where == "path", "schema": schema}


def _ops_paths(components: dict[str, Schema]) -> Schema:
    paths: Schema = {}
    for verb_name, verb in sorted(VERBS.items()):
        if verb_name in SOCKET_ONLY:
            continue
        body = args_schema(verb.args, components)
        body["properties"]["namespace"] = NAME  # every verb: popped by the dispatcher
        if verb_name in MINIMAL_VERBS:  # popped by the dispatcher too
            body["properties"]["answer"] = ANSWER_FORM
        components[f"{verb_name}_call"] = body
        operation = _operation(
            (verb.plan.__doc__ or verb_name).strip().splitlines()[0],
            {200: RESULTS.get(verb_name, OBJECT)},
            (*COMMON, *WITH_BODY, *ANSWERS.get(verb_name, ())),
            body=ref(f"{verb_name}_call"),
            tag="verbs",
        )
        operation["operationId"] = verb_name
        # No grant of its own: the verb checks those of what it names (what_if's change).
        grants = ", ".join(verb.grants) or "those of the verb its arguments name"
        operation["description"] = f"Grants: {grants}."
        paths[f"/v1/ops/{verb_name}"] = {"post": operation}
    return paths


def _rest_paths(components: dict[str, Schema]) -> Schema:
    """The REST faces of the verbs, and the routes that are no verb."""
    ns = _param("namespace", "query", NAME)
    key, queue = _param("key", "path", NAME), _param("queue", "path", NAME)
    job_id = _param("id", "path", {"type": "string", "minLength": 1, "maxLength": 64})
    page = [
        _param("queue", "query", NAME),
        _param("status", "query", {"type": "string", "enum": list(STATES)}),
        _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}),
        _param("after", "query", {"type": "string", "minLength": 1, "maxLength": 64}),
        ns,
    ]
    flags = {k: {"type": "boolean"} for k in ("duplicate", "folded", "shed")}
    flat_job = {"anyOf": [{"allOf": [ref(kind), obj(list(flags), **flags)]}
                          for kind in ("Job", "JobBrief")]}  # fmt: skip
    one_or_many = {"anyOf": [ref("enqueue_call"), ref("enqueue_many_call")]}
    budget_set = args_schema(VERBS["budget_put"].args, components, drop=frozenset({"key"}))
    budget_patch = args_schema(VERBS["budget_patch"].args, components, drop=frozenset({"key"}))
    budget_pause = args_schema(VERBS["budget_pause"].args, components, drop=frozenset({"key"}))
    policy = args_schema(VERBS["policy_set"].args, components, drop=frozenset({"queue"}))
    body = (*COMMON, *WITH_BODY)
    op = _operation
    return {
        "/jobs": {
            "post": op("Enqueue one job, or a batch ({jobs: [...]})",
                       {200: flat_job, 201: {"anyOf": [flat_job, ENQUEUED_MANY]}},
                       (*body, 404, 409), body=one_or_many, tag="jobs"),
            "get": op("Jobs in id order", {200: JOBS_PAGE}, COMMON, params=page, tag="jobs"),
        },
        "/jobs/{id}": {"get": op("One job", {200: ref("Job")}, (*COMMON, 404),
                                 params=[job_id, ns], tag="jobs")},
        "/api/v1/jobs/{id}/explain": {"get": op(
            "Every limit that applies to one job, and its position", {200: RESULTS["explain"]},
            (*COMMON, 404), params=[job_id, ns], tag="jobs")},
        "/budgets": {"get": op("Every budget of the namespace", {200: RESULTS["budget_list"]},
                               COMMON, params=[ns], tag="budgets")},
        "/budgets/{key}": {
            "get": op("One budget", {200: ref("Budget")}, (*COMMON, 404), params=[key, ns],
                      tag="budgets"),
            "post": op("Create a budget", {201: ref("Budget")}, (*body, 409), body=budget_set,
                       params=[key, ns], tag="budgets"),
            "put": op("Create or replace a budget", {200: ref("Budget")}, (*body, 409),
                      body=budget_set, params=[key, ns], tag="budgets"),
            "patch": op("Merge-patch a budget", {200: ref("Budget")}, (*body, 404, 409),
                        body=budget_patch, params=[key, ns], tag="budgets"),
            "delete": op("Delete a budget", {204: None}, (*COMMON, 404, 409), params=[key, ns],
                         tag="budgets"),
        },
        "/budgets/{key}/pause": {"post": op(
            "Pause a budget (consume on a queue binding it, or manage)", {200: ref("Budget")},
            (*body, 404), body=budget_pause, params=[key, ns], tag="budgets")},
        "/budgets/{key}/resume": {"post": op(
            "End a budget's pause (manage)", {200: ref("Budget")}, (*body, 404),
            params=[key, ns], tag="budgets")},
        "/api/v1/quota": {
            "get": op("The namespace's quota document", {200: RESULTS["quota_get"]}, COMMON,
                      params=[ns], tag="quota"),
            "put": op("Replace the quota document (operator)", {200: RESULTS["quota_set"]},
                      (*body, 409), body=QUOTA, params=[ns], tag="quota"),
            "delete": op("Remove the quota document (operator)", {204: None}, (*COMMON, 409),
                         params=[ns], tag="quota"),
        },
        "/api/v1/admission": {"get": op("Every queue policy in the caller's scope",
                                        {200: RESULTS["policy_list"]}, COMMON, params=[ns],
                                        tag="admission")},
        "/api/v1/admission/{queue}": {
            "get": op("A queue's policy", {200: POLICY_ANSWER}, (*COMMON, 404),
                      params=[queue, ns], tag="admission"),
            "put": op("Set a queue's policy (a body of at most 16 KiB)", {200: POLICY_ANSWER},
                      (*body, 404, 409), body=policy, params=[queue, ns], tag="admission"),
            "delete": op("Remove a queue's policy", {204: None}, (*COMMON, 404, 409),
                         params=[queue, ns], tag="admission"),
        },
        "/api/v1/what-if": {"post": op(
            "Preview a quota, policy, budget or queue change, writing nothing (the grant of "
            "the change's verb)", {200: ref("WhatIf")}, (*body, 404, 409),
            body=ref("what_if_call"), params=[ns], tag="admission")},
        "/healthz": {"get": _plain("Liveness, or what is degraded (no auth)",
                                   {200: ref("Health"), 503: ref("Health")})},
        "/metrics": {"get": _plain("Prometheus metrics (a bearer if daemon.metrics_token)",
                                   {200: None, 401: ref("Error")}, metrics=True)},
        "/openapi.json": {"get": _plain("This document", {200: OBJECT})},
    }  # fmt: skip


def _plain(summary: str, answers: dict[int, Schema | None], *, metrics: bool = False) -> Schema:
    """An operation outside the verbs: no door, no namespace, JSON (or Prometheus text)."""
    responses: Schema = {}
    for status, schema in answers.items():
        content = (
            {"text/plain": {"schema": {"type": "string"}}}
            if schema is None
            else {"application/json": {"schema": schema}}
        )
        responses[str(status)] = {"description": _DESCRIPTIONS.get(status, "Done."),
                                  "content": content}  # fmt: skip
    security: list[Schema] = [{}, {"metrics": []}] if metrics else [{}]
    return {"summary": summary, "tags": ["daemon"], "security": security, "responses": responses}


def openapi_document() -> Schema:
    """The whole OpenAPI document (a fresh dict each call)."""
    components: dict[str, Schema] = dict(COMPONENTS)
    paths = {**_ops_paths(components), **_rest_paths(components)}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Sluicegate",
            "version": __version__,
            "description": "The daemon's HTTP surface (docs/protocol.md, docs/http.md). Every "
            "verb is POST /v1/ops/<verb>; the other routes are its conventional faces. Bodies "
            "are JSON or msgpack; an error is {error, code, ...details}.",
        },
        "security": [{}, {"bearer": []}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": components,
            "responses": _error_responses(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A [[tokens]] token; none in open mode."},
                "metrics": {"type": "http", "scheme": "bearer",
                            "description": "daemon.metrics_token"},
            },
        },
    }  # fmt: skip
