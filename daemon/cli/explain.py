"""``sluice jobs explain ID``: what holds a job back, and until when, as a short table.

The first line says what holds the job back now, as admission would name it::

    held by window 'day' of queue images: 100 of 100 used,
    reopens 00:00 PST (08:00 UTC) in 3 h 12 min

then one row per limit that applies (``explain``'s ``holds``, in evaluation
order), instants in the viewer's zone (``TZ``) and in UTC, and the job's place
among its queue's claimable jobs. ``~`` marks an estimate (``exact`` false).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any

from daemon.cli.context import Context
from daemon.cli.output import table

DAY_MS = 86_400_000


def register(verbs: Any, common: argparse.ArgumentParser) -> None:
    """Add ``jobs explain ID`` to ``sluice jobs``."""
    p = verbs.add_parser(
        "explain", parents=[common],
        help="every limit that applies to a job: which hold it back now, and until when",
    )  # fmt: skip
    p.add_argument("job_id", metavar="ID", help="the job's id")
    p.set_defaults(run=run_explain)


def run_explain(ctx: Context, args: argparse.Namespace) -> int:
    """What holds one job back."""
    return ctx.show("explain", lambda result: render(result, _now_ms()), job_id=args.job_id)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def render(result: dict[str, Any], now_ms: int) -> str:
    """``explain``'s answer for people: a summary line, the table, the position."""
    holds = result.get("holds") or []
    held = [h for h in holds if h.get("holding")]
    lines = [summary(held[0], now_ms) if held else f"not held back ({result.get('status')})"]
    if holds:
        rows = [[h["limit"], h["kind"], scope_text(h.get("scope") or {}), usage(h),
                 "yes" if h.get("holding") else "no", frees(h, now_ms) if h.get("holding") else ""]
                for h in holds]  # fmt: skip
        lines.append(table(["LIMIT", "KIND", "SCOPE", "USED", "HOLDING", "FREES"], rows))
    else:
        lines.append("no limit applies")
    position = result.get("position") or {}
    if position.get("ahead") is not None:
        about = "more than " if position.get("approximate") and position["ahead"] > 10_000 else ""
        about = about or ("about " if position.get("approximate") else "")
        lines.append(f"{about}{position['ahead']} claimable job(s) ahead of it in its queue")
    return "\n".join(lines)


def summary(hold: dict[str, Any], now_ms: int) -> str:
    """``held by window 'day' of queue images: 100 of 100 used, reopens ...``."""
    text = f"held by {name(hold)}"
    if hold.get("used") is not None and hold.get("max") is not None:
        text += f": {_number(hold['used'])} of {_number(hold['max'])} used"
    verb = "reopens" if hold.get("kind") in ("policy_window", "door") else "frees"
    when = frees(hold, now_ms)
    return text + (f", {verb} {when}" if when != "not known" else f", {verb}: not known")


def name(hold: dict[str, Any]) -> str:
    """The limit in words: ``window 'day' of queue images``, ``budget 'llm'``, ..."""
    kind, limit, scope = hold.get("kind"), hold.get("limit"), hold.get("scope") or {}
    if kind == "policy_window":
        return f"window '{limit}' of queue {scope.get('queue')}"
    if kind == "budget":
        return f"budget '{limit}'"
    if kind == "budget_paused":
        return f"the pause of budget '{limit}'"
    return f"{limit} of {scope_text(scope)}"


def scope_text(scope: dict[str, str]) -> str:
    """``queue images``, ``group 'acme' of queue images``, ``namespace default``."""
    if "group" in scope:
        return f"group '{scope['group']}' of queue {scope.get('queue')}"
    return " ".join(f"{k} {v}" for k, v in scope.items())


def usage(hold: dict[str, Any]) -> str:
    used, most = hold.get("used"), hold.get("max")
    if used is None and most is None:
        return "-"
    return f"{_number(used)}/{_number(most)}"


def _number(value: Any) -> str:
    if value is None:
        return "?"
    return f"{value:g}" if isinstance(value, float) else str(value)


def frees(hold: dict[str, Any], now_ms: int) -> str:
    """``00:00 PST (08:00 UTC) in 3 h 12 min``; ``~`` before an estimate."""
    at = hold.get("next_eligible_at")
    if at is None:
        return "not known"
    return ("" if hold.get("exact") else "~") + when(at, now_ms)


def when(at_ms: int, now_ms: int) -> str:
    """An instant in the viewer's zone and in UTC, and how far off it is."""
    pattern = "%a %d %b %H:%M %Z" if at_ms - now_ms > DAY_MS else "%H:%M %Z"
    here = datetime.fromtimestamp(at_ms / 1000).astimezone().strftime(pattern)
    utc = datetime.fromtimestamp(at_ms / 1000, UTC).strftime(pattern)
    shown = here if here == utc else f"{here} ({utc})"
    return f"{shown} {span(at_ms - now_ms)}"


def span(ms: int) -> str:
    """``in 3 h 12 min``, ``in 40 s``, ``now``; ``2 min ago`` for a past instant."""
    if abs(ms) < 1000:
        return "now"
    seconds = abs(ms) // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n]
    text = " ".join(parts[:2]) or f"{secs} s"
    return f"in {text}" if ms > 0 else f"{text} ago"
