"""``sluice demo``: a throwaway daemon, a producer and two workers, to watch jobs flow.

It starts ``sluice serve`` on a temporary directory (HTTP off), two ``sluice
work`` processes running a tiny shell command (concurrency 2 each), and
enqueues a few jobs a second for ``--seconds`` (20 by default); every fifth
job fails its first attempt, so a retry shows up too. Then it stops the
workers (SIGTERM: running jobs finish), prints the queue's counts from
``status``, stops the daemon, and removes the directory.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from daemon.cli import status as status_cmd
from daemon.cli.context import Context, UsageError
from daemon.cli.output import emit_json
from daemon.sdk.sync_client import Client

QUEUE = "demo"
PER_SECOND = 3
# Reads the payload, works a little, and fails the first attempt of "flaky" jobs.
SCRIPT = """payload=$(cat)
sleep 0.4
case "$payload" in
  *'"flaky":true'*)
    if [ "$SLUICEGATE_ATTEMPT" = 1 ]; then echo "flaky job: first attempt fails" >&2; exit 1; fi;;
esac"""
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``demo``."""
    p = sub.add_parser("demo", parents=[common], help="watch jobs flow through a throwaway daemon")
    p.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        metavar="N",
        help="how long to produce jobs (default 20)",
    )
    p.set_defaults(run=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Run the demo; 0 when everything started and stopped cleanly."""
    if not 0 < args.seconds <= 3600:
        raise UsageError("--seconds must be between 0 and 3600")
    with tempfile.TemporaryDirectory(prefix="sluice-demo-") as tmp:
        return Demo(Path(tmp), args.seconds, json=ctx.json).run()


def _sluice(*args: str) -> list[str]:
    return [sys.executable, "-m", "daemon.cli.main", *args]


class Demo:
    """One demo run in ``root``."""

    def __init__(self, root: Path, seconds: float, *, json: bool) -> None:
        self.root = root
        self.seconds = seconds
        self.json = json
        self.socket = root / "state" / "sluicegate.sock"
        # With --json, stdout carries only the final document.
        self.out: TextIO = sys.stderr if json else sys.stdout

    def say(self, text: str) -> None:
        """A line of narration."""
        print(f"demo: {text}", file=self.out, flush=True)

    def run(self) -> int:
        """Start, produce, stop, summarise."""
        config = self.root / "sluicegate.toml"
        config.write_text(f'[daemon]\nstate_dir = "{self.root / "state"}"\nhttp = ""\n')
        clean = True
        with open(self.root / "daemon.log", "wb") as log:
            # Own sessions: a Ctrl-C reaches the demo only, which then stops the rest in order.
            daemon = subprocess.Popen(
                _sluice("serve", "--config", str(config)),
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            workers: list[subprocess.Popen[bytes]] = []
            try:
                if not self._wait_ready(daemon):
                    sys.stderr.write((self.root / "daemon.log").read_text(errors="replace"))
                    return 1
                self.say(f"daemon serving {self.socket} (HTTP off)")
                self.say(
                    f"2 workers, concurrency 2 each, on queue {QUEUE!r}, each job running: "
                    "sh -c '<read the payload; sleep 0.4; fail a flaky job's first attempt>'"
                )
                worker = _sluice(
                    "work",
                    QUEUE,
                    "--socket",
                    str(self.socket),
                    "--concurrency",
                    "2",
                    "--grace",
                    "10",
                    "--",
                    "sh",
                    "-c",
                    SCRIPT,
                )
                workers = [
                    subprocess.Popen(worker, stdout=self.out, start_new_session=True)
                    for _ in range(2)
                ]
                with Client(self.socket) as client:
                    try:
                        enqueued = self._produce(client)
                    except KeyboardInterrupt:
                        enqueued = -1
                    self.say("stopping the workers (SIGTERM: running jobs finish first)")
                    clean &= self._stop(workers)
                    summary = client.status()
            finally:
                clean &= self._stop(workers)
                self.say("stopping the daemon")
                clean &= self._stop([daemon])
        self._summarise(summary, enqueued)
        return 0 if clean else 1

    def _wait_ready(self, daemon: subprocess.Popen[bytes]) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if daemon.poll() is not None:
                self.say(f"the daemon exited with status {daemon.returncode}")
                return False
            if self.socket.exists():
                try:
                    Client(self.socket, timeout=2).close()
                    return True
                except OSError:
                    pass
            time.sleep(0.05)
        self.say("the daemon did not start in time")
        return False

    def _produce(self, client: Client) -> int:
        self.say(f"enqueueing {PER_SECOND} jobs a second for {self.seconds:g} s")
        start = time.monotonic()
        n = 0
        while (elapsed := time.monotonic() - start) < self.seconds:
            payload = {"n": n, "flaky": n % 5 == 4}
            client.enqueue(QUEUE, "echo", payload, priority=32768 + n % 3)
            n += 1
            time.sleep(max(0.0, n / PER_SECOND - elapsed))
        return n

    def _stop(self, procs: list[subprocess.Popen[bytes]]) -> bool:
        """SIGTERM each process, wait for all; True if every one exited 0."""
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        ok = True
        for proc in procs:
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            ok &= proc.returncode == 0
        return ok

    def _summarise(self, summary: dict[str, Any], enqueued: int) -> None:
        if self.json:
            emit_json(summary)
            return
        print()
        print(status_cmd.render(summary))
        print()
        done = next((q["completed"] for q in summary["queues"] if q["queue"] == QUEUE), 0)
        what = "" if enqueued < 0 else f"{enqueued} jobs enqueued, "
        self.say(f"{what}{done} completed. Try it for real: sluice serve; sluice work QUEUE -- CMD")
