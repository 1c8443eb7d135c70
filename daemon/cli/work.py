"""``sluice work QUEUE... -- CMD...``: run a command for each job.

The command gets the payload as JSON on stdin and ``SLUICEGATE_JOB_ID``,
``SLUICEGATE_ATTEMPT``, ``SLUICEGATE_QUEUE`` and ``SLUICEGATE_JOB_TYPE`` in
its environment. Exit status 0 completes the job; anything else fails it, with
the last 2 KiB of the command's stderr as the error (the daemon schedules the
retry). The lease is extended while it runs. A command killed by a signal
exits with status 128 + the signal number, as in a shell.

What the job cost: a command that exits 0 may write, on its stderr, a line
``SLUICEGATE_COST <JSON object>`` naming the actual cost per ``time_based``
budget the job is bound to, e.g. ``SLUICEGATE_COST {"openai": 1234}`` (the
exact prefix ``SLUICEGATE_COST`` and one space at the start of the line, then
the object on the same line; numbers from 0; the last such line wins). The job
is completed with that ``cost``, settling the budget's debit
(docs/protocol.md). A line that is not such an object, or a cost the daemon
refuses (a budget the job is not bound to, a ``while_in_flight`` one), is
said on the worker's stderr and the job completes without it. The line is
passed on like any other.

Where the output goes: each line the command writes is passed on prefixed
with the job's id, as systemd's journal prefixes a unit's lines. The
command's stdout goes to the worker's stdout, between the worker's own lines
about the job; its stderr goes to the worker's stderr::

    2026-08-31T19:16:28+10:00: Job 03gs5tvn78uny555dm88vjsoj running in process 3098324
    03gs5tvn78uny555dm88vjsoj: {"path":"/tmp/cat.png"}
    2026-08-31T19:16:30+10:00: Job 03gs5tvn78uny555dm88vjsoj exited with status 0

With ``--json`` the worker's stdout carries only its own events, one JSON
object per line, and the command's stdout joins its stderr on the worker's
stderr (still prefixed). The stderr tail that becomes a failed job's error is
the command's own text, without the prefixes.

SIGTERM or SIGINT stops the worker gracefully: no new claims, running jobs get
``--grace`` seconds, then their process groups get SIGTERM (SIGKILL 5 s
later) and the jobs are released. A second signal skips the grace period.
Each command runs in its own session, so a Ctrl-C in the terminal reaches the
worker, which decides, rather than every command at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from daemon.cli.context import Context, UsageError
from daemon.cli.jobs import int_range


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``work``."""
    p = sub.add_parser(
        "work",
        parents=[common],
        help="run a command for each job of QUEUEs",
        usage="sluice work QUEUE... [options] -- CMD...",
        description="Claim jobs of QUEUEs and run CMD for each: the payload on stdin, "
        "exit 0 completes, anything else fails with the tail of stderr. Output: each line "
        "CMD writes is passed on prefixed with the job's id ('<job id>: <line>'); CMD's "
        "stdout goes to this stdout, between the 'Job <id> running/exited' lines, and its "
        "stderr to this stderr. With --json, stdout carries only the worker's events (one "
        "JSON object per line) and CMD's stdout goes to stderr too.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument(
        "--concurrency",
        type=int_range(1, 1000),
        default=1,
        metavar="N",
        help="jobs run at once (default 1)",
    )
    p.add_argument(
        "--lease-ms", type=int_range(1), metavar="N", help="lease per claim (default: the job's)"
    )
    p.add_argument(
        "--wait-ms",
        type=int_range(1, 3_600_000),
        default=10_000,
        metavar="N",
        help="how long one claim waits for work (default 10000)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="after SIGTERM, how long running jobs may finish (default 30)",
    )
    p.set_defaults(run=run, takes_command=True)


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Work until a signal; the exit status."""
    if not args.command_argv:
        raise UsageError("work needs a command: sluice work QUEUE... -- CMD...")
    if args.grace < 0:
        raise UsageError("--grace cannot be negative")
    # The worker logs lost leases and connections; say them like the CLI's errors.
    logging.basicConfig(level=logging.WARNING, format="sluice: %(message)s", stream=sys.stderr)
    # Imported here: trio is the heaviest import, and only this command needs it.
    import trio

    from daemon.cli.runner import work_until_stopped

    return trio.run(work_until_stopped, ctx, args)
