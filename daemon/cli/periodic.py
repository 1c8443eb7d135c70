"""``sluice periodic list``: the namespace's periodic entries and when they fire next.

Times are shown in the local zone; a cron entry's schedule names its own zone.
``--json`` prints the ``periodic_list`` verb's result as it is.
"""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.context import Context
from daemon.cli.output import local_time, table

HEADERS = ["NAME", "QUEUE", "TYPE", "SCHEDULE", "NEXT FIRE", "LAST FIRED", "LAST RESULT"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``periodic list``."""
    periodic = sub.add_parser("periodic", parents=[common], help="periodic jobs of the config file")
    verbs = periodic.add_subparsers(dest="periodic_command", required=True, metavar="list")
    ls = verbs.add_parser("list", parents=[common], help="entries, schedules, next fire times")
    ls.set_defaults(run=run_list)


def run_list(ctx: Context, _args: argparse.Namespace) -> int:
    """Print the ``periodic_list`` verb's result."""
    return ctx.show("periodic_list", render)


def render(result: dict[str, Any]) -> str:
    """``periodic_list`` for humans."""
    entries = result.get("periodic") or []
    if not entries:
        return "no periodic jobs (add [[periodic]] entries to the config file)"
    rows = [
        [
            e["name"],
            e["queue"],
            e["type"],
            e["schedule"],
            local_time(e.get("next_fire_at")),
            local_time(e.get("last_fired_at")),
            e.get("last_result") or "-",
        ]
        for e in entries
    ]
    return table(HEADERS, rows)
