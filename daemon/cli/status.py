"""``sluice status``: the namespace at a glance."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.context import Context
from daemon.cli.output import local_time, table

STATES = ("scheduled", "pending", "running", "completed", "dead")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``status``."""
    p = sub.add_parser("status", parents=[common], help="queues and their counts")
    p.set_defaults(run=run)


def run(ctx: Context, _args: argparse.Namespace) -> int:
    """Print the ``status`` verb's result."""
    return ctx.show("status", render)


def render(result: dict[str, Any]) -> str:
    """``status`` for humans."""
    info = result.get("daemon") or {}
    head = (
        f"namespace {result.get('namespace')}  ·  sluicegate {info.get('version', '?')} "
        f"({info.get('store', '?')}), started {local_time(info.get('started_at'))}"
    )
    queues = result.get("queues") or []
    if not queues:
        return head + "\nno queues yet"
    rows = [[q["queue"], *(q.get(s, 0) for s in STATES)] for q in queues]
    if len(rows) > 1:
        rows.append(["(total)", *(sum(q.get(s, 0) for q in queues) for s in STATES)])
    return head + "\n\n" + table(["QUEUE", *(s.upper() for s in STATES)], rows)
