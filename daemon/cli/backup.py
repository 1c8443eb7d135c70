"""``sluice backup PATH`` and ``sluice restore PATH``: the SQLite store, online and back.

Both read ``[daemon] database`` and ``state_dir`` from the config file
(``--config``), as ``sluice db`` does. ``backup`` copies the live store while
the daemon serves (SQLite's backup API in steps inside one read transaction:
the copy is the store as it stood when the backup began), checks the copy
with ``integrity_check`` and renames it into place; an existing PATH is
refused unless ``--force``. On a terminal a progress bar (pages) is drawn on
stderr. ``restore`` refuses while a daemon holds the state directory's lock,
checks the backup's integrity and schema version, and replaces the database
atomically, keeping the replaced one beside it (``--discard`` drops it).

A PostgreSQL store is refused with a pointer to ``pg_dump`` (docs/operations.md).
Exit status 0 when done, 1 when refused (nothing changed), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from daemon.cli.context import Context
from daemon.cli.output import Progress, emit_json, progress_allowed

POSTGRES_REFUSAL = (
    "the store is PostgreSQL ({where}): back it up with pg_dump or point-in-time "
    "recovery, not sluice (docs/operations.md, Backup and restore)"
)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``backup`` and ``restore``."""
    backup = sub.add_parser(
        "backup",
        parents=[common],
        help="copy the SQLite store to PATH while the daemon serves (consistent, checked)",
    )
    backup.add_argument("path", metavar="PATH", help="the new backup file (must not exist)")
    backup.add_argument("--force", action="store_true", help="replace PATH if it exists")
    backup.add_argument("--step-pages", type=int, default=None, metavar="N",
                        help="pages copied per step (default 1024)")  # fmt: skip
    backup.set_defaults(run=run, verb=_backup)
    restore = sub.add_parser(
        "restore",
        parents=[common],
        help="replace the SQLite store by the backup at PATH (the daemon must be stopped)",
    )
    restore.add_argument("path", metavar="PATH", help="a file written by `sluice backup`")
    restore.add_argument("--discard", action="store_true",
                         help="do not keep the replaced database beside it")  # fmt: skip
    restore.set_defaults(run=run, verb=_restore)


def _store(ctx: Context) -> tuple[Path, Path] | str:
    """``(database, lock file)`` of the config's SQLite store, or the refusal."""
    from daemon.config import load_config  # the daemon's parser, loaded only here

    cfg = load_config(ctx.config).daemon
    dsn = cfg.postgres_dsn()
    if dsn is not None:
        from daemon.store.pg_opening import redacted

        return POSTGRES_REFUSAL.format(where=redacted(dsn))
    return cfg.database_path(), cfg.state_path() / "sluicegate.lock"


def _refuse(message: str) -> int:
    print(f"sluice: {message}", file=sys.stderr)
    return 1


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Find the config's SQLite store (or refuse a PostgreSQL one); run the verb."""
    store = _store(ctx)
    if isinstance(store, str):
        return _refuse(store)
    database, lock = store
    return args.verb(ctx, args, database, lock)


def _backup(ctx: Context, args: argparse.Namespace, database: Path, _lock: Path) -> int:
    """Back the store up to PATH; print what was written."""
    from daemon.store.backup import STEP_PAGES, BackupRefused, backup_store

    pages = STEP_PAGES if args.step_pages is None else args.step_pages
    if pages < 1:
        return _refuse("--step-pages must be at least 1")
    with Progress("backing up", None, unit="pages", enabled=progress_allowed(ctx.json)) as bar:
        try:
            report = backup_store(
                database, Path(args.path), force=args.force, pages=pages, progress=bar.update
            )
        except BackupRefused as exc:
            bar.close()
            return _refuse(str(exc))
    if ctx.json:
        emit_json({
            "database": report.source, "backup": report.target, "pages": report.pages,
            "bytes": report.bytes, "schema_version": report.version, "jobs": report.jobs,
            "integrity": "ok", "seconds": round(report.seconds, 3),
        })  # fmt: skip
    else:
        print(
            f"backed up {report.source} to {report.target}: {report.bytes:,} bytes, "
            f"{report.jobs:,} jobs, schema version {report.version}, integrity_check ok, "
            f"in {report.seconds:.1f} s"
        )
    return 0


def _restore(ctx: Context, args: argparse.Namespace, database: Path, lock: Path) -> int:
    """Replace the store by the backup at PATH; print what was done."""
    from daemon.store.backup import BackupRefused, restore_store

    try:
        report = restore_store(Path(args.path), database, lock, keep=not args.discard)
    except BackupRefused as exc:
        return _refuse(str(exc))
    if ctx.json:
        emit_json({
            "backup": report.backup, "database": report.database,
            "schema_version": report.version, "jobs": report.jobs, "kept": report.kept,
            "removed": list(report.removed), "seconds": round(report.seconds, 3),
        })  # fmt: skip
    else:
        print(
            f"restored {report.database} from {report.backup}: {report.jobs:,} jobs, "
            f"schema version {report.version}, integrity_check ok"
        )
        if report.kept:
            print(f"the replaced database is kept as {report.kept} (delete it when done)")
        for path in report.removed:
            print(f"removed {path} (the replaced database's, after its checkpoint)")
        print(
            "start the daemon: running jobs of the backup are reclaimed once their leases "
            "lapse; budgets and windows stand as at the backup"
        )
    return 0
