"""The engine of ``sluice work``: one process per job, and the signals that stop it.

See :mod:`daemon.cli.work` for what the command promises.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
from typing import Any, TextIO

import orjson
import trio

from daemon.cli.context import Context
from daemon.cli.output import now_stamp
from daemon.sdk.errors import InvalidArgument
from daemon.sdk.job import TrioJob
from daemon.sdk.trio_client import collapse
from daemon.sdk.worker import Worker

STDERR_TAIL = 2048
KILL_AFTER = 5.0
#: A line of the command's stderr saying what the job cost its budgets:
#: ``SLUICEGATE_COST {"openai": 1234}`` (the last such line wins).
COST_MARK = b"SLUICEGATE_COST "


async def work_until_stopped(ctx: Context, args: argparse.Namespace) -> int:
    """Run a :class:`~daemon.sdk.worker.Worker` with a :class:`CommandRunner` until a signal."""
    runner = CommandRunner(args.command_argv, json=ctx.json)
    try:
        async with ctx.trio_client() as client, trio.open_nursery() as nursery:
            worker = Worker(
                client,
                args.queues,
                runner,
                concurrency=args.concurrency,
                wait_ms=args.wait_ms,
                lease_ms=args.lease_ms,
                grace=args.grace,
            )
            nursery.start_soon(_signals, worker)
            await worker.run()
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise collapse(group) from None
    return 0


async def _signals(worker: Worker) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            running = worker.statistics().running
            if worker.statistics().stopping:
                print(
                    f"sluice: {signal.Signals(signum).name} again: stopping now, "
                    f"releasing {running} running job(s)",
                    file=sys.stderr,
                )
                worker.stop(grace=0)
            else:
                print(
                    f"sluice: {signal.Signals(signum).name}: no new claims; {running} running "
                    f"job(s) get up to {worker.grace:g} s",
                    file=sys.stderr,
                )
                worker.stop()


class CommandRunner:
    """The worker's handler: one process per job."""

    def __init__(self, command: list[str], *, json: bool = False) -> None:
        self.command = command
        self.json = json

    def say(self, job: TrioJob, event: str, **fields: Any) -> None:
        """One line on stdout about a job."""
        if self.json:
            doc = {"at": now_stamp(), "job_id": job.id, "event": event, **fields}
            line = orjson.dumps(doc).decode()
        elif event == "running":
            line = f"{now_stamp()}: Job {job.id} running in process {fields['pid']}"
        elif event == "exited":
            line = f"{now_stamp()}: Job {job.id} exited with status {fields['status']}"
        else:
            line = f"{now_stamp()}: Job {job.id} could not start: {fields['error']}"
        print(line, flush=True)

    async def __call__(self, job: TrioJob) -> None:
        env = {
            **os.environ,
            "SLUICEGATE_JOB_ID": job.id,
            "SLUICEGATE_ATTEMPT": str(job.attempt),
            "SLUICEGATE_QUEUE": job.queue,
            "SLUICEGATE_JOB_TYPE": job.type,
        }
        tail = bytearray()
        proc: trio.Process | None = None
        try:
            async with trio.open_nursery() as nursery:
                try:
                    proc = await nursery.start(
                        functools.partial(
                            trio.run_process,
                            self.command,
                            stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            env=env,
                            check=False,
                            start_new_session=True,
                            deliver_cancel=_terminate_group,
                        )
                    )
                except OSError as exc:
                    self.say(job, "failed", error=str(exc))
                    await job.fail(f"cannot run {self.command[0]!r}: {exc.strerror or exc}")
                    return
                assert proc is not None and proc.stdin is not None
                assert proc.stdout is not None and proc.stderr is not None
                self.say(job, "running", pid=proc.pid)
                nursery.start_soon(_feed, proc.stdin, orjson.dumps(job.payload) + b"\n")
                prefix = f"{job.id}: ".encode()
                # With --json the worker's stdout carries only its own events.
                out = sys.stderr if self.json else sys.stdout
                nursery.start_soon(_relay, proc.stdout, Lines(prefix, out), None)
                errors = Lines(prefix, sys.stderr, watch=COST_MARK)
                await _relay(proc.stderr, errors, tail)
                await proc.wait()
        finally:
            if proc is not None and proc.returncode is not None:
                self.say(job, "exited", status=_status(proc.returncode))
        status = _status(proc.returncode)
        if status != 0:
            text = bytes(tail).decode("utf-8", "replace").strip()
            await job.fail(text or f"exited with status {status}")
        elif errors.watched:
            await _complete_with_cost(job, errors.watched[-1])


async def _complete_with_cost(job: TrioJob, line: bytes) -> None:
    """Complete ``job`` settling the cost its ``SLUICEGATE_COST`` line reports; a
    line that does not read, or a cost the daemon refuses, is said on stderr and
    the job completes without it (the worker does that): the work was done."""
    try:
        cost = orjson.loads(line[len(COST_MARK) :])
    except orjson.JSONDecodeError:
        cost = None
    if not isinstance(cost, dict):
        print(f"sluice: job {job.id}: ignored a SLUICEGATE_COST line that is not "
              'a JSON object such as {"openai": 1234}', file=sys.stderr)  # fmt: skip
        return
    try:
        await job.complete(cost=cost)
    except InvalidArgument as exc:
        print(f"sluice: job {job.id}: its cost was refused, completed without it: "
              f"{exc.message}", file=sys.stderr)  # fmt: skip


def _status(returncode: int | None) -> int:
    """A shell's exit status: 128 + the signal for a process a signal ended."""
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    """Write the payload to the command's stdin; a command may well not read it."""
    try:
        await stream.send_all(data)
        await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


class Lines:
    """Whole lines to one of our streams, each prefixed with the job's id.

    ``06h2ewjd892ypw58rc4wexdtfw: <line>``, as systemd's journal names a
    unit; a line is written in one piece so that concurrent jobs do not
    interleave within a line. A last line without its newline gets one; a
    line longer than ``MAX_LINE`` bytes is cut into several.
    """

    MAX_LINE = 65536

    def __init__(self, prefix: bytes, out: TextIO, watch: bytes | None = None) -> None:
        self.prefix = prefix
        self.out = out
        self.partial = bytearray()
        #: Lines starting with ``watch`` (passed on too), newline stripped.
        self.watch = watch
        self.watched: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        """Write the complete lines of ``chunk``; keep the rest for the next."""
        self.partial += chunk
        lines = []
        while (cut := self.partial.find(b"\n")) >= 0 or len(self.partial) >= self.MAX_LINE:
            end = cut + 1 if 0 <= cut < self.MAX_LINE else self.MAX_LINE
            line = bytes(self.partial[:end])
            del self.partial[:end]
            lines.append(self.prefix + (line if line.endswith(b"\n") else line + b"\n"))
            if self.watch is not None and line.startswith(self.watch):
                self.watched.append(line.rstrip(b"\r\n"))
        if lines:
            self._write(b"".join(lines))

    def close(self) -> None:
        """Write what is left: a last line without its newline."""
        if self.partial:
            if self.watch is not None and self.partial.startswith(self.watch):
                self.watched.append(bytes(self.partial).rstrip(b"\r"))
            self._write(self.prefix + bytes(self.partial) + b"\n")
            self.partial.clear()

    def _write(self, data: bytes) -> None:
        self.out.flush()  # after the worker's own lines, not before them
        self.out.buffer.write(data)
        self.out.buffer.flush()


async def _relay(stream: trio.abc.ReceiveStream, lines: Lines, tail: bytearray | None) -> None:
    """Copy one of the command's streams to ours, line by line with the job's id;
    keep the last ``STDERR_TAIL`` bytes in ``tail`` (the job's error if it fails)."""
    try:
        while chunk := await stream.receive_some(65536):
            lines.feed(chunk)
            if tail is not None:
                tail += chunk
                del tail[:-STDERR_TAIL]
    finally:
        lines.close()


async def _terminate_group(proc: trio.Process) -> None:
    """Cancelled: SIGTERM the command's process group, SIGKILL it if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with trio.move_on_after(KILL_AFTER):
        await proc.wait()
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
