"""The config file's admission tables, decoded with the API's own parsers.

``[quotas.<namespace>]``, ``[policies.<namespace>.<queue>]`` and
``[budgets.<namespace>.<key>]`` hold the same documents the admin verbs take,
so they are read by the same decoders (:mod:`actors.quota`,
:mod:`actors.policy`, :mod:`actors.budget`). A quota or policy table that does
not decode is kept raw and fails its namespace or queue closed; a bad budget
table is a config error. Every problem names its ``section.<ns>...field``.
:func:`daemon.config.parse_config` calls these.
"""

from __future__ import annotations

from typing import Any

from actors import budget as spec_parser
from actors.budget import BudgetSpec, SpecError, parse_spec
from actors.errors import Refused
from actors.limits import NAME_RE, NAME_RULE
from actors.policy import Policy, parse_policy
from actors.quota import Quota, parse_quota
from daemon.durations import parse_duration_ms
from daemon.validation import FieldError


def quota_tables(raw: dict[str, Any]) -> tuple[dict[str, tuple[Quota | None, Any]], list[str]]:
    """Decode ``[quotas.<namespace>]`` tables; a bad one is kept raw (fail closed)."""
    tables: dict[str, tuple[Quota | None, Any]] = {}
    problems: list[str] = []
    for namespace, table in raw.items():
        if not NAME_RE.match(namespace):
            problems.append(f"quotas.{namespace}: not a namespace name")
            continue
        try:
            tables[namespace] = (parse_quota(table), table)
        except Refused as exc:
            field = exc.details.get("field", "")
            where = f"quotas.{namespace}" + (f".{field}" if field and field != "quota" else "")
            problems.append(f"{where}: {exc.message} (the namespace fails closed)")
            tables[namespace] = (None, table)
    return tables, problems


def policy_tables(
    raw: dict[str, Any],
) -> tuple[dict[tuple[str, str], tuple[Policy | None, Any]], list[str]]:
    """Decode ``[policies.<namespace>.<queue>]`` tables with the API's own decoder.

    A table that does not decode is kept raw: provisioning stores it as it is,
    so its queue fails closed (seed 002 REQ-9) exactly as a bad stored policy
    does, and no other queue is affected. What is not a policy table at all (a
    bad namespace or queue name, a value that is not a table) is listed and
    skipped. Problems name ``policies.<ns>.<queue>.<field>``.
    """
    tables: dict[tuple[str, str], tuple[Policy | None, Any]] = {}
    problems: list[str] = []
    for namespace, queues in raw.items():
        if not NAME_RE.match(namespace) or not isinstance(queues, dict):
            problems.append(f"policies.{namespace}: expected [policies.<namespace>.<queue>] tables")
            continue
        for queue, table in queues.items():
            where = f"policies.{namespace}.{queue}"
            if not NAME_RE.match(queue) or not isinstance(table, dict):
                problems.append(
                    f"{where}: expected a [policies.<namespace>.<queue>] table "
                    f"(a queue name is {NAME_RULE})"
                )
                continue
            try:
                tables[(namespace, queue)] = (parse_policy(table), table)
            except Refused as exc:
                field = exc.details.get("field", "")
                at = f"{where}.{field}" if field and field != "policy" else where
                problems.append(f"{at}: {exc.message} (the queue fails closed)")
                tables[(namespace, queue)] = (None, table)
    return tables, problems


def budget_specs(raw: dict[str, Any], problems: list[str]) -> dict[str, dict[str, BudgetSpec]]:
    """Validate ``[budgets.<namespace>.<key>]`` tables into budget settings.

    What is wrong is appended to ``problems`` (each one fails the config).
    """
    specs: dict[str, dict[str, BudgetSpec]] = {}
    for namespace, table in raw.items():
        if not NAME_RE.match(namespace) or not isinstance(table, dict):
            problems.append(f"budgets.{namespace}: expected [budgets.<namespace>.<key>] tables")
            continue
        for key, body in table.items():
            where = f"budgets.{namespace}.{key}"
            try:
                specs.setdefault(namespace, {})[key] = _budget_spec(key, body)
            except FieldError as exc:
                problems.append(f"{where}.{exc.field}: {exc.message}")
            except (TypeError, ValueError) as exc:
                problems.append(f"{where}: {exc}")
    return specs


def _budget_spec(key: str, body: Any) -> BudgetSpec:
    if not NAME_RE.match(key):
        raise ValueError("a budget key is 1-128 characters of [A-Za-z0-9._:-]")
    try:  # no upper bounds here: a duration may be "30d"
        return parse_spec(body, most=None, duration=parse_duration_ms)
    except SpecError as exc:
        raise _budget_problem(exc, body) from None


def _budget_problem(exc: SpecError, body: Any) -> ValueError:
    """The parser's refusal in the config file's words (a FieldError names its field)."""
    field, problem = exc.field, exc.problem
    kind = body["strategy"].get("type") if field.startswith("strategy.") else None
    if problem == spec_parser.UNKNOWN_FIELD:
        return FieldError(field, "unknown field")
    if problem in (spec_parser.UNREADABLE, spec_parser.BAD_RESERVE):
        return FieldError(field, exc.detail)
    if problem == spec_parser.NOT_OBJECT:
        if field == "strategy":
            return FieldError(field, 'must be a table such as { type = "while_in_flight" }')
        return ValueError("expected a table with allocation and strategy")
    if problem == spec_parser.BAD_FLAG:
        return FieldError(field, "must be true or false")
    if problem == spec_parser.BAD_TYPE:
        return FieldError(field, "must be while_in_flight or time_based")
    if problem == spec_parser.TIME_BASED_ONLY or (
        field == "strategy.duration_ms" and kind == spec_parser.WHILE_IN_FLIGHT  # "0s"
    ):
        return ValueError("while_in_flight takes neither duration_ms nor burst")
    if field == "strategy.duration_ms":  # BAD_COUNT (0) or REQUIRED
        return ValueError("strategy.duration_ms must be a positive integer for time_based")
    return FieldError(field, "must be an integer of at least 1")  # allocation, burst
