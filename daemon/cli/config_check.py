"""``sluice config check [PATH]``: validate a config file, like ``nginx -t``.

Prints ``<file>: OK``, or every problem as ``<file>: <field.path>: <message>``
on stderr and exits 1. Warnings (a plain token in the file) go to stderr either way.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemon.cli.context import Context
from daemon.cli.output import emit_json
from daemon.config_file import ConfigError


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``config check``."""
    config = sub.add_parser("config", parents=[common], help="check a config file")
    verbs = config.add_subparsers(dest="config_command", required=True, metavar="check")
    check = verbs.add_parser(
        "check", parents=[common], help="validate a config file and print every error"
    )
    check.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="the file (default: --config, $SLUICEGATE_CONFIG, ./sluicegate.toml)",
    )
    check.set_defaults(run=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Load the file the way the daemon does; report what it finds."""
    # The daemon's own parser, imported here so other commands never load it.
    from daemon.config import load_config

    try:
        config = load_config(args.path or ctx.config)
    except ConfigError as exc:
        if ctx.json:
            emit_json({"ok": False, "file": exc.source, "problems": exc.problems})
        else:
            for problem in exc.problems:
                print(f"{exc.source}: {problem}", file=sys.stderr)
        return 1
    for warning in config.warnings:
        print(f"{config.source}: warning: {warning}", file=sys.stderr)
    # The daemon starts, but these namespaces and queues fail closed.
    problems = [*config.quota_problems, *config.policy_problems]
    if problems:
        if ctx.json:
            emit_json({"ok": False, "file": config.source, "problems": problems})
        else:
            for problem in problems:
                print(f"{config.source}: {problem}", file=sys.stderr)
        return 1
    if ctx.json:
        emit_json({"ok": True, "file": config.source, "problems": []})
    elif config.source == "<defaults>":
        print("no config file (./sluicegate.toml absent): the built-in defaults are OK")
    else:
        print(f"{config.source}: OK")
    return 0
