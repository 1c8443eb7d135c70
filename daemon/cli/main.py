"""``sluice``: the parser, the dispatch, and the exit statuses.

Each command lives in its own module, which adds its parsers in
``register(sub, common)`` and names the function that runs it
(``set_defaults(run=...)``, called with the :class:`~daemon.cli.context.Context`
and the parsed arguments, returning the exit status). A new command group
(``budget``, ``quota``, ``queue``, ``audit``) is one more module in
:data:`COMMANDS`.

Exit statuses: 0 success; 1 the daemon refused (``sluice: <code>: <message>``
on stderr) or could not be reached; 2 bad usage or a value the CLI rejects
itself. ``config check`` exits 1 when the file has errors.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from daemon.cli import (
    audit,
    backup,
    budget,
    config_check,
    db,
    dead,
    demo,
    jobs,
    periodic,
    queue,
    quota,
    status,
    store,
    work,
)
from daemon.cli.context import CannotConnect, Context, UsageError, global_options
from daemon.config_file import ConfigError
from daemon.sdk.errors import SluicegateError

#: Command modules, in the order ``sluice --help`` lists them.
COMMANDS: tuple[ModuleType, ...] = (
    config_check,
    db,
    store,
    backup,
    status,
    jobs,
    dead,
    budget,
    quota,
    queue,
    audit,
    periodic,
    work,
    demo,
)


def _serve(ctx: Context, _args: argparse.Namespace) -> int:
    from daemon.main import serve

    return serve(ctx.config, http=_args.http, debug=_args.debug)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``sluice`` parser."""
    common = global_options()
    parser = argparse.ArgumentParser(
        prog="sluice",
        parents=[common],
        description="Sluicegate: a job dispatcher daemon and its command line.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", parents=[common], help="run the daemon in the foreground (--config PATH)"
    )
    serve.add_argument("--http", metavar="ADDR", help="listen on ADDR, not [daemon] http")
    serve.add_argument("--debug", action="store_true", help="tracebacks for start-up failures")
    serve.set_defaults(run=_serve)
    for module in COMMANDS:
        module.register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``sluice`` with ``argv`` (default: the process's); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] | None = None
    if "--" in argv:  # `work QUEUE... -- CMD...`: everything after -- is the command
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or bad usage (2)
        return exc.code if isinstance(exc.code, int) else 2
    if command is not None and not getattr(args, "takes_command", False):
        return _fail(f"{args.command}: unexpected arguments after --", 2)
    args.command_argv = command or []
    try:
        ctx = Context.from_args(args)
        return args.run(ctx, args)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except ConfigError as exc:
        return _fail(str(exc), 2)
    except SluicegateError as exc:
        return _fail(f"{exc.code}: {exc.message}", 1)
    except CannotConnect as exc:
        return _fail(str(exc), 1)
    except TimeoutError as exc:
        return _fail(f"no answer from the daemon: {exc}", 1)
    except KeyboardInterrupt:
        return 130


def _fail(message: str, status: int) -> int:
    print(f"sluice: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
