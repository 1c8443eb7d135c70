"""How the board words things: instants in a zone, statuses and chips.

Instants are shown in the policy's zone (with its abbreviation) and in UTC,
and carried in a ``<time datetime>`` so the static script can add the
viewer's local time; without JavaScript the first two still show.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from actors.window import zone

#: A queue status label -> the word the board uses (text, never colour alone).
STATUS_WORDS = {
    "admitted": "admitted",
    "window_exhausted": "exhausted",
    "in_flight_full": "in flight full",
    "paused": "paused",
    "admission_unavailable": "unavailable",
    "running_full": "running full",
    "quota_unavailable": "unavailable",
    "budget_exhausted": "budget exhausted",
    "budget_paused": "budget paused",
}
#: Statuses announced to screen readers when a queue enters them (seed 002).
ANNOUNCED = frozenset({"window_exhausted", "paused", "admission_unavailable"})
REASON_WORDS = {
    "window_exhausted": "window used up",
    "in_flight_full": "in flight full",
    "paused": "paused",
    "admission_unavailable": "policy unavailable",
    "budget_exhausted": "budget",
    "budget_paused": "budget paused",
    "running_full": "namespace running full",
    "quota_unavailable": "quota unavailable",
}


def iso(ms: int) -> str:
    """An instant as ISO 8601 UTC (for ``<time datetime>``)."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def in_zone(ms: int, tz: str | None) -> str:
    """An instant in ``tz`` (UTC when None or unknown): ``Tue 14 Nov 00:00 PST``."""
    tzinfo: dt.tzinfo = dt.UTC
    if tz:
        try:
            tzinfo = zone(tz)
        except KeyError:
            pass
    at = dt.datetime.fromtimestamp(ms / 1000, tzinfo)
    return at.strftime("%a %d %b %H:%M ") + (at.tzname() or "UTC")


def utc(ms: int) -> str:
    """An instant in UTC, short."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%a %d %b %H:%M UTC")


def status_word(label: str | None) -> str:
    """The board's word for a status label."""
    return STATUS_WORDS.get(label or "admitted", label or "admitted")


def chip(admission: dict[str, Any] | None) -> dict[str, Any] | None:
    """A pending job's chip: ``deferred · <reason> · eligible <when>``, or None
    when the job is admitted (or has no admission)."""
    if not admission or admission.get("state") != "deferred":
        return None
    reason = admission.get("reason") or "deferred"
    words = REASON_WORDS.get(reason, reason)
    if reason == "budget_exhausted" and admission.get("budget"):
        words = f"budget {admission['budget']}"
    return {
        "reason": reason,
        "words": words,
        "at": admission.get("next_eligible_at"),
        "exact": bool(admission.get("exact")),
    }


def limit(value: int | None) -> str:
    """A limit for a header: the number, or ``no limit``."""
    return "no limit" if value is None else str(value)
