"""``sluice audit``: who changed what, and when (the ``audit_list`` verb, grant ``manage``).

One page of the namespace's audit records, oldest first (``--newest-first``
walks back from the newest), as a table: the record's id (the cursor), when
it was written in the local zone and in UTC, who wrote it (the token's name,
or ``config`` for the file), what (the action and its target), and the change
``before → after`` in settings: for two objects only the fields that differ
(``allocation 10 → 20``); a creation reads ``- → {...}`` and a removal
``{...} → -``; a budget's live state and timestamps are left out. ``--json``
prints the verb's result ``{records, next}`` as it is.

Paging: when more records follow, the last line says how to get them
(``(more: sluice audit --after 42)``, with the same filters). Records about
queues outside the token's scope are left out by the daemon, so a page may be
short, or even empty, while more follow.
"""

from __future__ import annotations

import argparse
import shlex
from datetime import UTC, datetime
from typing import Any

from daemon.cli.context import Context
from daemon.cli.jobs import int_range
from daemon.cli.output import compact, emit_json, shorten, table
from daemon.cli.quota import namespace_name

TARGET_KINDS = ("queue", "budget", "namespace")
HEADERS = ("ID", "WHEN (LOCAL)", "WHEN (UTC)", "WHO", "WHAT", "BEFORE → AFTER")
#: Fields of a recorded object that are not its settings (left out of the table).
NOT_SETTINGS = frozenset({"state", "created_at", "updated_at"})
#: The widest BEFORE → AFTER cell (``--json`` has everything).
CHANGE_WIDTH = 160


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``audit``."""
    p = sub.add_parser(
        "audit",
        parents=[common],
        help="who changed quotas, budgets, policies and queues, and when",
        description="A page of the namespace's audit records: when (local and UTC), who, "
        "what, before → after. Needs the manage grant.",
    )
    p.add_argument("--target-kind", choices=TARGET_KINDS, help="only records about this kind")
    p.add_argument("--target", metavar="T", help="only records about this queue, budget, ...")
    p.add_argument("--limit", type=int_range(1, 1000), default=100, metavar="N",
                   help="records a page (default 100)")  # fmt: skip
    p.add_argument(
        "--after", type=int_range(0), metavar="CURSOR", help="the next page (from a previous page)"
    )
    p.add_argument("--newest-first", action="store_true", help="newest first")
    p.add_argument(
        "--namespace", type=namespace_name, metavar="NS",
        help="another namespace (operator grant; default: the token's)",
    )  # fmt: skip
    p.set_defaults(run=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Print one page of audit records."""
    call = {
        "target_kind": args.target_kind,
        "target": args.target,
        "limit": args.limit,
        "after": args.after,
        "newest_first": args.newest_first or None,
        "namespace": args.namespace,
    }
    with ctx.client() as client:
        result = client.call("audit_list", **{k: v for k, v in call.items() if v is not None})
    if ctx.json:
        emit_json(result)
        return 0
    print(render(result, next_command(args, result.get("next"))))
    return 0


def next_command(args: argparse.Namespace, cursor: int | None) -> str | None:
    """The command that prints the next page, or None on the last page."""
    if cursor is None:
        return None
    words = ["sluice", "audit"]
    for option in ("target_kind", "target", "namespace"):
        if getattr(args, option) is not None:
            words += [f"--{option.replace('_', '-')}", getattr(args, option)]
    if args.limit != 100:
        words += ["--limit", str(args.limit)]
    if args.newest_first:
        words.append("--newest-first")
    words += ["--after", str(cursor)]
    return shlex.join(words)


def render(result: dict[str, Any], more: str | None = None) -> str:
    """``audit_list``'s result as a table, with the next page's command when there is one."""
    records = result.get("records") or []
    rows = [
        [
            r["id"],
            local_when(r["at"]),
            utc_when(r["at"]),
            r.get("actor") or "-",
            f"{r['action']} {r['target_kind']} {r['target']}",
            shorten(change(r.get("before"), r.get("after")), CHANGE_WIDTH),
        ]
        for r in records
    ]
    text = table(HEADERS, rows) if rows else "no audit records"
    if more is not None:
        text += f"\n(more: {more})"
    return text


def local_when(ms: int) -> str:
    """An instant in the local zone, with the zone's abbreviation."""
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def utc_when(ms: int) -> str:
    """An instant in UTC."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def change(before: Any, after: Any) -> str:
    """``before → after``; for two objects, only the fields that differ.

    A budget's live ``state`` and its ``created_at``/``updated_at`` are left
    out (the record's own time says when): the table shows settings.
    """
    before, after = _settings(before), _settings(after)
    if isinstance(before, dict) and isinstance(after, dict):
        keys = [*before, *(k for k in after if k not in before)]
        diffs = [
            f"{k} {_value(before.get(k))} → {_value(after.get(k))}"
            for k in keys
            if before.get(k) != after.get(k)
        ]
        return "; ".join(diffs) or "(no change)"
    return f"{_value(before)} → {_value(after)}"


def _settings(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if k not in NOT_SETTINGS}


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else compact(value)
