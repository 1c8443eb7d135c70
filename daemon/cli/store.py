"""``sluice store copy``: a whole store into an empty one, SQLite and PostgreSQL either way.

``--from`` and ``--to`` each take a SQLite file path or a ``postgresql://`` DSN.
The copy reads the source in one read transaction, so it may run beside a
daemon on the source (the copy is the store as it stood when it began; stop
the daemon first so that nothing is written after it), and writes the target
in one transaction: a failure leaves it empty. A target holding any row is
refused. The DSN's password may be in the DSN, ``PGPASSWORD``, the passfile,
or a file named by ``--from-password-file`` / ``--to-password-file``; it is
never printed.

On a terminal a progress bar (count, rate, ETA) is drawn on stderr; the result
is one line on stdout, or one JSON document with ``--json``. Exit status 0
when copied, 1 when refused (nothing copied), 2 for a bad location.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from daemon.cli.context import Context, UsageError
from daemon.cli.output import Progress, emit_json, progress_allowed


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``store copy``."""
    store = sub.add_parser("store", parents=[common], help="the whole store: copy it elsewhere")
    verbs = store.add_subparsers(dest="store_command", required=True, metavar="copy")
    copy = verbs.add_parser(
        "copy",
        parents=[common],
        help="copy a whole store into an empty one (a SQLite file or a postgresql:// DSN, "
        "either way)",
    )
    copy.add_argument("--from", dest="source", required=True, metavar="PATH_OR_DSN",
                      help="the store to copy: a SQLite file or a postgresql:// DSN")  # fmt: skip
    copy.add_argument("--to", dest="target", required=True, metavar="PATH_OR_DSN",
                      help="an empty store (created and migrated if need be)")  # fmt: skip
    copy.add_argument("--from-password-file", metavar="FILE",
                      help="the source DSN's password, in a file")  # fmt: skip
    copy.add_argument("--to-password-file", metavar="FILE",
                      help="the target DSN's password, in a file")  # fmt: skip
    copy.add_argument("--batch", type=int, default=None, metavar="ROWS",
                      help="the most rows read and written at a time (default 2000)")  # fmt: skip
    copy.set_defaults(run=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Copy ``--from`` into ``--to``; print what was copied."""
    # The store's code, imported here so other commands never load it.
    from daemon.store.copier import BATCH_ROWS, CopyRefused, copy_store

    passwords = _password(args.from_password_file), _password(args.to_password_file)
    enabled = progress_allowed(ctx.json)
    with Progress("copying", None, unit="rows", enabled=enabled) as bar:
        try:
            report = copy_store(
                args.source,
                args.target,
                source_password=passwords[0],
                target_password=passwords[1],
                batch_rows=BATCH_ROWS if args.batch is None else args.batch,
                progress=bar.update,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        except CopyRefused as exc:
            bar.close()
            print(f"sluice: {exc}", file=sys.stderr)
            return 1
    if ctx.json:
        emit_json({
            "from": report.source, "to": report.target, "schema_version": report.version,
            "rows": report.rows, "tables": report.tables, "seconds": round(report.seconds, 3),
        })  # fmt: skip
    else:
        print(
            f"copied {report.rows:,} rows in {len(report.tables)} tables from {report.source} "
            f"to {report.target} (schema version {report.version}) in {report.seconds:.1f} s"
        )
    return 0


def _password(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise UsageError(f"cannot read the password file {path}: {exc.strerror}") from None
