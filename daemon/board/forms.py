"""The editors' forms: what a plain HTML form posts, turned into verb arguments.

The verbs stay the judges of what is valid; this module only maps form
fields (strings, blank meaning "not set") to the verbs' argument shapes, and
turns a field it cannot read into ``invalid_argument`` naming it, as a verb
would.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from actors.errors import Refused, invalid
from actors.group_policy import GROUP_FIELDS
from actors.window_spec import parse_spec, to_spec

#: A form post is small; anything larger is not from the board.
MAX_FORM = 64 * 1024


def parse(body: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the last value of a field wins)."""
    if len(body) > MAX_FORM:
        raise Refused(
            "payload_too_large", f"body exceeds {MAX_FORM} bytes", limit="body", max=MAX_FORM
        )
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise Refused("bad_frame", "the form does not decode as UTF-8") from None
    return {k: v[-1] for k, v in fields.items()}


def _int(form: dict[str, str], field: str) -> int | None:
    value = form.get(field, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise invalid(field, f"{field} must be a whole number, or blank for none") from None


def policy_args(form: dict[str, str]) -> dict[str, Any]:
    """``policy_set``'s fields from the policy editor's form."""
    claims = _int(form, "max_claims_per_window")
    args: dict[str, Any] = {
        "max_in_flight": _int(form, "max_in_flight"),
        "max_claims_per_window": claims,
        "window": None,
        "enforce": form.get("shadow") != "1",
    }
    if claims is not None:
        window: dict[str, Any] = {
            "period": form.get("period", "day"),
            "tz": form.get("tz", "").strip() or "UTC",
            "start": form.get("start", "").strip() or "00:00",
        }
        if window["period"] == "week":
            window["weekday"] = form.get("weekday") or "Mon"
        args["window"] = window
    specs = [line for line in form.get("windows", "").splitlines() if line.strip()]
    if specs:  # stacked windows, one spec a line (the daemon refuses both forms at once)
        try:
            args["windows"] = [parse_spec(line) for line in specs]
        except ValueError as exc:
            raise invalid("windows", str(exc)) from None
    return args


def policy_form(policy: dict[str, Any] | None) -> dict[str, str]:
    """The editor's field values for a policy (or the defaults of a new one)."""
    policy = policy or {}
    window = policy.get("window") or {}

    def text(value: Any) -> str:
        return "" if value is None else str(value)

    return {
        "max_in_flight": text(policy.get("max_in_flight")),
        "max_claims_per_window": text(policy.get("max_claims_per_window")),
        "period": window.get("period", "day"),
        "tz": window.get("tz", "UTC"),
        "start": window.get("start", "00:00"),
        "weekday": window.get("weekday") or "Mon",
        "windows": "\n".join(to_spec(w) for w in policy.get("windows") or []),
        "shadow": "1" if policy.get("enforce") is False else "",
    }


def kept_group_fields(policy: dict[str, Any] | None) -> dict[str, Any]:
    """The current policy's group fields (docs/fairness.md), which the editor does
    not show: a save keeps them rather than clearing them."""
    return {f: policy[f] for f in GROUP_FIELDS if policy and policy.get(f) is not None}


def budget_args(form: dict[str, str]) -> dict[str, Any]:
    """``budget_put``'s fields from the budget editor's form."""
    allocation = _int(form, "allocation")
    if allocation is None:
        raise invalid("allocation", "allocation is required")
    kind = form.get("type", "")
    strategy: dict[str, Any] = {"type": kind}
    if kind == "time_based":
        seconds = _int(form, "duration_s")
        if seconds is None:
            raise invalid("duration_s", "the refill period is required for time_based")
        strategy["duration_ms"] = seconds * 1000
        burst = _int(form, "burst")
        if burst is not None:
            strategy["burst"] = burst
    reserve = _group_tokens(form.get("reserve", ""))
    if reserve:
        strategy["reserve"] = reserve  # the verb refuses it on a time_based budget
    return {"allocation": allocation, "strategy": strategy,
            "enforce": form.get("shadow") != "1"}  # fmt: skip


def _group_tokens(text: str) -> dict[str, int]:
    """``gold=4, silver=2`` (commas or new lines) to ``{group: tokens}``."""
    out: dict[str, int] = {}
    for part in text.replace("\n", ",").split(","):
        if not part.strip():
            continue
        group, sep, number = part.strip().rpartition("=")
        if not sep or not number.strip().isdigit():
            raise invalid("reserve", f"write each reservation as GROUP=N, not {part.strip()!r}")
        out[group.strip()] = int(number)
    return out


def budget_form(budget: dict[str, Any]) -> dict[str, str]:
    """The editor's field values for a budget."""
    strategy = budget.get("strategy") or {}
    duration = strategy.get("duration_ms")
    return {
        "allocation": str(budget.get("allocation", "")),
        "type": strategy.get("type", "while_in_flight"),
        "duration_s": "" if duration is None else str(duration // 1000),
        "burst": "" if strategy.get("burst") is None else str(strategy["burst"]),
        "shadow": "1" if budget.get("enforce") is False else "",
        "reserve": ", ".join(f"{g}={n}" for g, n in (strategy.get("reserve") or {}).items()),
    }


#: Verb field names -> the form field that shows the problem.
FORM_FIELDS = {
    "window.tz": "tz",
    "window.start": "start",
    "window.period": "period",
    "window.weekday": "weekday",
    "window": "max_claims_per_window",
    "strategy.type": "type",
    "strategy.duration_ms": "duration_s",
    "strategy.burst": "burst",
    "strategy": "type",
}


def field_of(refused: Refused) -> str | None:
    """The form field a refusal is about, if it names one."""
    field = refused.details.get("field")
    if not isinstance(field, str):
        return None
    field = field.removeprefix("change.")  # a preview's refusal (what_if)
    if field.startswith("windows"):  # windows[2].tz: the one text area
        return "windows"
    if field.startswith("strategy.reserve"):  # strategy.reserve.gold: the one field
        return "reserve"
    return FORM_FIELDS.get(field, field)
