"""``sluice demo``: a throwaway daemon, workers and producers, to watch jobs flow.

It starts ``sluice serve`` on a temporary directory (HTTP off), then shows two
things, each under its own heading:

1. **Flow.** Two ``sluice work`` processes running a tiny shell command
   (concurrency 2 each), and a few jobs a second enqueued for ``--seconds``
   (10 by default); every fifth job fails its first attempt, so a retry shows
   up too.
2. **Budgets** (seed 003's timelines, on the daemon's real dispatch). One
   ``sluice work`` process (concurrency 12, so that only the budgets limit it)
   runs ``sleep <payload>`` for three budgets in turn: jobs of
   ``--job-seconds`` (2) on a ``while_in_flight`` budget of 5, five at a time;
   a ``time_based`` budget of 6 per ``--window`` with burst 1, one job every
   window/6; the same without a burst, six at once and then one every
   window/6. The window is 6 s by default (seed 003's 6 per minute sped up ten
   times, said in the heading); ``--window 1m`` replays its real pace. A
   ``time_based`` job runs a fifth of the spacing (2 s at 6 per minute).

The workers print seed 003's lines (``<time>: Job <id> running in process
<pid>``, ``... exited with status <n>``) as ``sluice work`` does. Then the
demo stops the workers (SIGTERM: running jobs finish), prints ``status`` and
the budgets, stops the daemon, and removes the directory. By default it takes
about 25-30 s; ``--budgets-only`` or ``--no-budgets`` run one part.
"""

from __future__ import annotations

import argparse
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import attrs

from daemon.cli import budget as budget_cmd
from daemon.cli import status as status_cmd
from daemon.cli.context import Context, UsageError
from daemon.cli.output import emit_json
from daemon.durations import format_duration_ms
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
DRAIN_TIMEOUT = 5.0
#: The budget part's worker runs ``sleep <payload>`` (the payload is a number of seconds).
SLEEP = 'sleep "$(cat)"'
BUDGET_WORKER_CONCURRENCY = 12
#: Seed 003's time_based example: 6 tokens a minute; the demo's default window is 10x faster.
RATE = 6
SEED_WINDOW_MS = 60_000
DEFAULT_WINDOW_MS = 6_000


@attrs.frozen
class Timeline:
    """One budget part: a budget, a queue of the same name, and jobs bound to it."""

    heading: str
    key: str
    allocation: int
    strategy: dict[str, Any]
    jobs: int
    job_seconds: float
    #: How long the part should take if the budget paces it (for the timeout).
    expected_seconds: float

    def create_command(self) -> str:
        """The ``sluice budget create`` that makes this budget."""
        words = f"sluice budget create {self.key} --allocation {self.allocation}"
        words += f" --strategy {self.strategy['type']}"
        if "duration_ms" in self.strategy:
            words += f" --duration {format_duration_ms(self.strategy['duration_ms'])}"
        if "burst" in self.strategy:
            words += f" --burst {self.strategy['burst']}"
        return words


def timelines(job_seconds: float, window_ms: int) -> list[Timeline]:
    """Seed 003's three timelines, the time_based ones on a ``window_ms`` window."""
    spacing = window_ms / RATE / 1000  # seconds between two time_based dispatches
    short = round(spacing / 5, 3)  # seed 003: 2 s jobs, one every 10 s
    rate = f"{RATE} per {_seconds(window_ms / 1000)}"
    if window_ms == SEED_WINDOW_MS:
        pace = "seed 003's own pace"
    elif window_ms < SEED_WINDOW_MS:
        pace = f"seed 003's 6 per minute sped up {SEED_WINDOW_MS / window_ms:.3g}x"
    else:
        pace = f"seed 003's 6 per minute slowed down {window_ms / SEED_WINDOW_MS:.3g}x"
    timed = {"type": "time_based", "duration_ms": window_ms}
    return [
        Timeline(
            f"while_in_flight 5: 11 jobs of {_seconds(job_seconds)}, five at a time",
            "demo-slots",
            5,
            {"type": "while_in_flight"},
            11,
            job_seconds,
            math.ceil(11 / 5) * job_seconds,
        ),
        Timeline(
            f"time_based {rate}, burst 1: one job every {_seconds(spacing)}, each running "
            f"{_seconds(short)} ({pace})",
            "demo-drip",
            RATE,
            {**timed, "burst": 1},
            4,
            short,
            3 * spacing + short,
        ),
        Timeline(
            f"time_based {rate}, default burst ({RATE}): {RATE} jobs at once, then one every "
            f"{_seconds(spacing)} ({pace})",
            "demo-burst",
            RATE,
            timed,
            RATE + 4,
            short,
            4 * spacing + short,
        ),
    ]


def _seconds(value: float) -> str:
    """``0.2 s``, ``6 s``, ``600 s``: three significant digits, never an exponent."""
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``demo``."""
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="watch jobs flow, and budgets pace them, through a throwaway daemon",
        description="Start a throwaway daemon and show (1) jobs flowing through two workers, "
        "with a retry, and (2) seed 003's budget timelines: a while_in_flight budget of 5 "
        "running 2 s jobs five at a time, then a time_based budget of 6 per --window with "
        "burst 1 (one job every window/6) and with its default burst (6 at once, then one "
        "every window/6). The window defaults to 6 s, seed 003's 6 per minute sped up 10x "
        "(--window 1m for its real pace). About 25-30 s with the defaults.",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        metavar="N",
        help="how long the flow part produces jobs (default 10)",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument(
        "--budgets-only", action="store_true", help="skip the flow part: only the budgets"
    )
    only.add_argument("--no-budgets", action="store_true", help="only the flow part")
    p.add_argument(
        "--window",
        type=budget_cmd.duration,
        default=DEFAULT_WINDOW_MS,
        metavar="D",
        help="the time_based budgets' duration: 6 tokens per D (default 6s; 1m is seed 003's "
        "own pace, about a minute per time_based part)",
    )
    p.add_argument(
        "--job-seconds",
        type=float,
        default=2.0,
        metavar="S",
        help="how long each while_in_flight job runs (default 2, as in seed 003)",
    )
    p.set_defaults(run=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Run the demo; 0 when everything started, ran and stopped cleanly."""
    if not 0 < args.seconds <= 3600:
        raise UsageError("--seconds must be between 0 and 3600")
    if not 0 < args.job_seconds <= 600:
        raise UsageError("--job-seconds must be between 0 and 600")
    if not 600 <= args.window <= 3_600_000:
        raise UsageError("--window must be between 600ms and 1h")
    parts = timelines(args.job_seconds, args.window)
    with tempfile.TemporaryDirectory(prefix="sluice-demo-") as tmp:
        demo = Demo(
            Path(tmp),
            args.seconds,
            json=ctx.json,
            flow=not args.budgets_only,
            budgets=[] if args.no_budgets else parts,
        )
        return demo.run()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _sluice(*args: str) -> list[str]:
    return [sys.executable, "-m", "daemon.cli.main", *args]


class Demo:
    """One demo run in ``root``."""

    def __init__(
        self,
        root: Path,
        seconds: float,
        *,
        json: bool,
        flow: bool = True,
        budgets: list[Timeline] | None = None,
    ) -> None:
        self.root = root
        self.seconds = seconds
        self.json = json
        self.flow = flow
        self.budgets = budgets or []
        self.enqueued = 0
        self.socket = root / "state" / "sluicegate.sock"
        # With --json, stdout carries only the final document.
        self.out: TextIO = sys.stderr if json else sys.stdout

    def say(self, text: str, *, gap: bool = False) -> None:
        """A line of narration (``gap``: after a blank line)."""
        print(f"{chr(10) if gap else ''}demo: {text}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        """Narration while stopping: lost, not fatal, if the reader went away."""
        try:
            self.say(text)
        except OSError:
            pass

    def run(self) -> int:
        """Start, produce, stop, summarise; SIGTERM stops it like Ctrl-C (in order)."""
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return self._run()
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _run(self) -> int:
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
            summary: dict[str, Any] = {}
            budgets: list[dict[str, Any]] = []
            try:
                if not self._wait_ready(daemon):
                    sys.stderr.write((self.root / "daemon.log").read_text(errors="replace"))
                    return 1
                self.say(f"daemon serving {self.socket} (HTTP off)")
                with Client(self.socket) as client:
                    try:
                        if self.flow:
                            clean &= self._flow(client, workers)
                        if self.budgets:
                            clean &= self._budget_part(client, workers)
                    except (KeyboardInterrupt, BrokenPipeError):
                        self.enqueued = -1  # interrupted, or nobody reads the output any more
                    self.note("stopping the workers (SIGTERM: running jobs finish first)")
                    clean &= self._stop(workers)
                    summary = client.status()
                    if self.budgets:
                        budgets = client.call("budget_list")["budgets"]
            finally:
                clean &= self._stop(workers)
                self.note("stopping the daemon")
                clean &= self._stop([daemon])
        try:
            self._summarise(summary, budgets)
        except BrokenPipeError:
            return 1
        return 0 if clean else 1

    def heading(self, text: str) -> None:
        """A part's heading, set apart from the lines before it."""
        self.say(f"== {text}", gap=True)

    def _worker(self, queues: list[str], concurrency: int, command: list[str]) -> list[str]:
        return _sluice(
            "work",
            *queues,
            "--socket",
            str(self.socket),
            "--concurrency",
            str(concurrency),
            "--grace",
            "10",
            "--",
            *command,
        )

    def _flow(self, client: Client, workers: list[subprocess.Popen[bytes]]) -> bool:
        """Part 1: two workers and a producer; True (a stop is checked by the caller)."""
        self.heading(f"flow: jobs through two workers on queue {QUEUE!r}, with a retry")
        self.say(
            f"2 workers, concurrency 2 each, on queue {QUEUE!r}, each job running: "
            "sh -c '<read the payload; sleep 0.4; fail a flaky job's first attempt>'"
        )
        worker = self._worker([QUEUE], 2, ["sh", "-c", SCRIPT])
        flow = [subprocess.Popen(worker, stdout=self.out, start_new_session=True) for _ in range(2)]
        workers.extend(flow)
        self.enqueued += self._produce(client)
        self._wait_drained(client, QUEUE, DRAIN_TIMEOUT)  # the last retries, mostly
        self.say("stopping the flow's workers (SIGTERM: running jobs finish first)")
        ok = self._stop(flow)
        for proc in flow:
            workers.remove(proc)
        return ok

    def _budget_part(self, client: Client, workers: list[subprocess.Popen[bytes]]) -> bool:
        """Part 2: seed 003's timelines, one budget (and queue) after the other."""
        queues = [t.key for t in self.budgets]
        self.heading("budgets: the daemon dispatches a bound job only when its budget can pay")
        self.say(
            f"$ sluice work {' '.join(queues)} --concurrency {BUDGET_WORKER_CONCURRENCY} "
            f"-- sh -c '{SLEEP}'   # the payload is how many seconds the job runs"
        )
        worker = self._worker(queues, BUDGET_WORKER_CONCURRENCY, ["sh", "-c", SLEEP])
        workers.append(subprocess.Popen(worker, stdout=self.out, start_new_session=True))
        ok = True
        for n, part in enumerate(self.budgets, 1):
            self.heading(f"budgets {n}/{len(self.budgets)}: {part.heading}")
            self.say(f"$ {part.create_command()}")
            client.call("budget_create", key=part.key, allocation=part.allocation,
                        strategy=part.strategy)  # fmt: skip
            self.say(
                f"$ sluice enqueue {part.key} sleep --payload {part.job_seconds:g} "
                f"--budget {part.key}   # {part.jobs} times"
            )
            job = {"queue": part.key, "type": "sleep", "payload": part.job_seconds,
                   "budgets": [{"key": part.key}]}  # fmt: skip
            client.enqueue_many([job] * part.jobs)
            self.enqueued += part.jobs
            if not self._wait_completed(client, part.key, part.jobs, part.expected_seconds + 30):
                self.say(f"the jobs on {part.key} did not all complete in time")
                ok = False
        return ok

    def _wait_drained(self, client: Client, queue: str, timeout: float) -> bool:
        """Wait until ``queue`` has nothing scheduled, pending or running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts = next((q for q in client.status()["queues"] if q["queue"] == queue), {})
            if not any(counts.get(s, 0) for s in ("scheduled", "pending", "running")):
                return True
            time.sleep(0.1)
        return False

    def _wait_completed(self, client: Client, queue: str, count: int, timeout: float) -> bool:
        """Wait until ``count`` jobs of ``queue`` completed (their lines are printed by then)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = next(
                (q["completed"] for q in client.status()["queues"] if q["queue"] == queue), 0
            )
            if done >= count:
                return True
            time.sleep(0.1)
        return False

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

    def _summarise(self, summary: dict[str, Any], budgets: list[dict[str, Any]]) -> None:
        if self.json:
            emit_json(summary)
            return
        if not summary:
            return
        print()
        print(status_cmd.render(summary))
        if budgets:
            print()
            print(budget_cmd.render(budgets, time.time_ns() // 1_000_000))
        print()
        done = sum(q["completed"] for q in summary["queues"])
        what = "" if self.enqueued < 0 else f"{self.enqueued} jobs enqueued, "
        self.say(
            f"{what}{done} completed. Try it for real: sluice serve; sluice work QUEUE -- CMD; "
            "sluice budget create KEY ...; sluice enqueue QUEUE TYPE --budget KEY"
        )
