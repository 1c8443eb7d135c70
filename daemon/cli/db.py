"""``sluice db status`` and ``sluice db migrate``: the schema, without a daemon.

Both read ``[daemon] database`` (and ``database_password_file``) from the
config file, as the daemon does. ``status`` never changes the database;
``migrate`` applies what is pending (under the advisory lock on PostgreSQL,
so it is safe while daemons start). A database newer than this build is
refused, naming both versions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from daemon.cli.context import Context
from daemon.cli.output import emit_json


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``db status`` and ``db migrate``."""
    db = sub.add_parser("db", parents=[common], help="the database's schema: status, migrate")
    verbs = db.add_subparsers(dest="db_command", required=True, metavar="status|migrate")
    verbs.add_parser(
        "status", parents=[common], help="the schema version, applied and pending migrations"
    ).set_defaults(run=run, apply=False)
    verbs.add_parser(
        "migrate", parents=[common], help="apply the pending migrations (without a daemon)"
    ).set_defaults(run=run, apply=True)


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Read the config's database; print (or emit) where its schema stands."""
    # The daemon's parser and store code, imported here so other commands never load them.
    from daemon.config import load_config
    from daemon.store.migration import SchemaTooNew
    from daemon.store.schema_admin import NoDatabase, schema_status

    cfg = load_config(ctx.config).daemon
    database = cfg.postgres_dsn() or cfg.database_path()
    password_file = cfg.database_password_file
    password = Path(password_file).read_text().strip() if password_file else None
    try:
        status = schema_status(database, password=password, apply=args.apply)
    except (NoDatabase, SchemaTooNew) as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 1
    if ctx.json:
        emit_json({
            "dialect": status.dialect, "current": status.current, "latest": status.latest,
            "applied": [_step(s) for s in status.applied],
            "pending": [_step(s) for s in status.pending],
        })  # fmt: skip
    else:
        state = "up to date" if status.up_to_date else f"{len(status.pending)} pending"
        print(f"{status.dialect}: schema version {status.current} of {status.latest} ({state})")
        for step in status.applied:
            when = f"  applied {step.applied_at:%Y-%m-%d %H:%M:%S %Z}" if step.applied_at else ""
            print(f"  {step.version:>3}  {step.name}{when}")
        for step in status.pending:
            print(f"  {step.version:>3}  {step.name}  pending")
    return 0 if status.up_to_date or not args.apply else 1


def _step(step: Any) -> dict[str, Any]:
    at = step.applied_at.isoformat() if step.applied_at else None
    return {"version": step.version, "name": step.name, "applied_at": at}
