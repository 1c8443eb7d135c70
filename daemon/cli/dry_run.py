"""``--dry-run`` on the commands that change a limit: ``what_if``, printed.

``sluice quota set``, ``sluice queue budget set``, ``sluice budget set`` and
``sluice budget patch`` take ``--dry-run``: the change is sent as ``what_if
{change: {op, ...arguments}}`` instead of being made, and what it would do is
printed (``--json``: the answer as it is). Nothing is written.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from daemon.cli.context import Context
from daemon.cli.output import emit_json


def add_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--dry-run`` to a command that changes a limit."""
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="write nothing: print what the change would do now and the next 24 h's "
        "admissions (what_if)",
    )


def preview(ctx: Context, op: str, scope: dict[str, Any], **args: Any) -> int:
    """Preview verb ``op`` with ``args`` (``scope``: ``{namespace}`` or nothing)."""
    with ctx.client() as client:
        result = client.call("what_if", change={"op": op, **args}, **scope)
    if ctx.json:
        emit_json(result)
    else:
        print(render(result))
    return 0


def _when(at_ms: int | None, now_ms: int) -> str:
    if at_ms is None:
        return "not known"
    if at_ms <= now_ms:
        return "now"
    local = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(at_ms / 1000))
    return f"{local} (in {_span(at_ms - now_ms)})"


def _span(ms: int) -> str:
    seconds = -(-ms // 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return (
        (f"{hours}h " if hours else "")
        + (f"{minutes}m " if hours or minutes else "")
        + (f"{seconds}s")
    )


def render(answer: dict[str, Any]) -> str:
    """A ``what_if`` answer for people."""
    now = answer["now"]
    start = answer["flow"][0]["hour_start"] if answer["flow"] else 0
    admissible, tokens = now["admissible_now"], now["budget_available"]
    lines = [
        f"dry run of {answer['op']}: nothing was written",
        f"admissible now      {admissible['before']} -> {admissible['after']}",
        f"would be deferred   {now['deferred_jobs']}",
        f"would be released   {now['released_jobs']}",
        f"next enqueue        {now.get('next_enqueue', '-')}"
        + (" (shed: on_excess = drop)" if now["shed_next_enqueues"] else ""),
    ]
    if tokens["before"] is not None or tokens["after"] is not None:
        lines.append(f"budget tokens       {tokens['before']} -> {tokens['after']}")
    lines.append(f"head eligible       {_when(now['head_next_eligible_at'], start)}")
    counts = [str(h["admitted"]) for h in answer["flow"]]
    lines.append("admitted per hour   " + " ".join(counts))
    lines += [f"assuming: {text}" for text in answer["assumptions"]]
    return "\n".join(lines)
