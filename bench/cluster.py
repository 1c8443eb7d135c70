"""Several daemons on one PostgreSQL database (issue 15): what exactness, the
cross-daemon doorbell and failover cost. Prints figures and asserts nothing
about timing; the exit status is 1 when a job is lost or an answer is wrong.

* ``exactness-cost``: throughput.py's batched phase (``--phases
  batched,single`` adds its one-at-a-time phase) on ``--daemons`` (2) daemons
  sharing a fresh database, clients spread over them, once with no budget and
  once per ``--kinds`` with every job bound to one hot budget that never
  throttles, in interleaved rounds (the order rotates each round). Reported:
  per round, time(bound) / time(none); the median over the rounds. After a
  bound phase every job must be bound, debited once (the daemons'
  ``sluicegate_budget_debits_total``) and nothing left in flight.
* ``crossing``: a ``claim_next`` waiting on daemon B (registered: B's
  ``sluicegate_waiting_claims`` gauge reads 1), then an ``enqueue`` on daemon
  A; from the enqueue sent, and from its answer, to B's claim answer.
* ``failover``: ``--daemons`` (3) daemons, retention ticking every
  ``--interval-ms``; after a random pause (so the kill lands at any phase of
  the survivors' ticks) the leader claims ``--leased`` jobs with a short lease
  and is killed with SIGKILL. Reported: kill to another daemon holding the role
  (its advisory lock, the ``leader`` row, its ``sluicegate_leader`` gauge), and
  kill to the leased jobs claimed again on a survivor, against their expiry.

    .venv/bin/python bench/cluster.py exactness-cost --rounds 3 --json /tmp/cost.json
    .venv/bin/python bench/cluster.py crossing --tries 200 --json /tmp/crossing.json
    .venv/bin/python bench/cluster.py failover --tries 5 --json /tmp/failover.json
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import throughput
from clients import QUEUE
from harness import BenchDaemon, metric
from pg_database import Session, admin_dsn, fresh_database, query
from throughput import PhaseResult, environment, percentile
from wire import WireClient, WireError

from daemon.store.pg_leader import role_key

BUDGET = "hot"
BOUND = {"budgets": [{"key": BUDGET, "cost": 1}]}
MAX_TOKENS = 2**31 - 1
#: The hot budget of each kind, provisioned in every daemon's config file. Both
#: debit at every claim and credit at every complete, inside the claim's or the
#: complete's transaction, and neither ever makes a job wait: at most workers x
#: batch jobs (200; one-at-a-time: 4) are in flight of a million, and the drip
#: refills 2^31-1 tokens a millisecond into a pool as deep.
KINDS = {
    "while_in_flight": 'allocation = 1000000\nstrategy = { type = "while_in_flight" }\n',
    "time_based": f"allocation = {MAX_TOKENS}\n"
    f'strategy = {{ type = "time_based", duration_ms = 1, burst = {MAX_TOKENS} }}\n',
}
NONE = "none"
CROSS_QUEUE = "cross"
LEASED_QUEUE = "leased"
#: The lease of a claim that takes a job back: long, so its instant is known.
RECLAIM_LEASE_MS = 600_000
TARGET_COST = 1.5
TARGET_CROSSING_MS = 100.0


# -- shared pieces -------------------------------------------------------------------


@contextmanager
def cluster(n: int, extra: str = "", keep: bool = False) -> Iterator[tuple[str, list[BenchDaemon]]]:
    """``n`` started daemons named d0, d1, ... on one fresh database: (DSN, daemons).

    ``extra`` is appended to each config after its ``[daemon]`` lines; ``keep``
    keeps their temp dirs and logs (printed on stderr)."""
    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        daemons = [stack.enter_context(BenchDaemon(
            "normal", http=True, loop_probe=None, keep=keep,
            extra_config=f'database = "{dsn}"\nname = "d{i}"\n{extra}',
        )) for i in range(n)]  # fmt: skip
        if keep:
            print(f"  daemon dirs: {[str(d.workdir) for d in daemons]}", file=sys.stderr)
        for daemon in daemons:
            daemon.start()
        yield dsn, daemons


def name_of(daemon: BenchDaemon, daemons: list[BenchDaemon]) -> str:
    """The ``[daemon] name`` :func:`cluster` gave ``daemon``."""
    return f"d{daemons.index(daemon)}"


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.002) -> Any:
    """Poll ``probe`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(every)
    raise TimeoutError(f"gave up waiting for {what} after {timeout:g} s")


def waiting_claims(daemon: BenchDaemon) -> float:
    """How many claims wait on ``daemon`` (its ``sluicegate_waiting_claims`` gauge)."""
    return metric(daemon.metrics_text(), "sluicegate_waiting_claims") or 0.0


def spread(values: list[float]) -> dict[str, float | None]:
    """p50, p90, p99 and max of ``values`` (nearest rank), in the unit given."""
    return {"p50": percentile(values, 0.5), "p90": percentile(values, 0.9),
            "p99": percentile(values, 0.99), "max": max(values) if values else None}  # fmt: skip


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def stop_all(daemons: list[BenchDaemon], skip: BenchDaemon | None = None) -> list[str]:
    """SIGTERM every daemon but ``skip``; a problem for each that did not exit 0."""
    return [f"d{i} exited {code} on SIGTERM" for i, d in enumerate(daemons)
            if d is not skip and (code := d.stop()) != 0]  # fmt: skip


def header(source: Path | None = None) -> str:
    """The command line, the environment and the PostgreSQL server's version."""
    (version,) = query(admin_dsn(), "SHOW server_version")[0]
    return f"command: {shlex.join(sys.orig_argv)}\n{environment(source)}, postgresql {version}"


def load() -> str:
    """The load average now, for the end of a run (another agent's benchmark shows)."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def write_json(path: str | None, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` when given."""
    if path:
        Path(path).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))


# -- exactness-cost ------------------------------------------------------------------


def budget_check(kind: str) -> Callable[[str, list[BenchDaemon]], list[str]]:
    """After a bound phase: every job bound to the hot budget, which debited each
    once over all daemons and holds nothing in flight."""

    def check(dsn: str, daemons: list[BenchDaemon]) -> list[str]:
        ((jobs, bound),) = query(
            dsn, "SELECT count(*), count(*) FILTER (WHERE budgets LIKE $2) FROM jobs "
            "WHERE queue = $1", QUEUE, f'%"{BUDGET}"%')  # fmt: skip
        rows = query(dsn, "SELECT in_flight FROM budgets WHERE key = $1", BUDGET)
        debits = sum(metric(d.metrics_text(), "sluicegate_budget_debits_total", budget=BUDGET)
                     or 0.0 for d in daemons)  # fmt: skip
        problems = []
        if bound != jobs:
            problems.append(f"{kind}: {bound} of {jobs} jobs bound to {BUDGET!r}")
        if not rows or rows[0][0] != 0:
            problems.append(f"{kind}: budget {BUDGET!r} in flight at the end: {rows}")
        if debits != jobs:
            problems.append(f"{kind}: {debits:.0f} debits for {jobs} jobs")
        return problems

    return check


@dataclass
class Ratio:
    """time(bound) / time(none) of one phase and kind, round by round."""

    phase: str
    kind: str
    rounds: list[float] = field(default_factory=list)
    #: The daemons' CPU per job, bound / none, round by round.
    cpu_rounds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        """The median over the rounds."""
        return statistics.median(self.rounds) if self.rounds else None


def exactness_cost(args: argparse.Namespace) -> int:
    """Interleaved rounds of no budget against each hot budget kind."""
    print(header(args.source), flush=True)
    targs = throughput.parse_args([
        "--store", "postgres", "--daemons", str(args.daemons), "--jobs", str(args.jobs),
        "--single-jobs", str(args.single_jobs), "--workers", str(args.workers),
        "--clients", str(args.clients), "--stall-timeout", str(args.stall_timeout),
        *(["--source", str(args.source)] if args.source else []),
    ])  # fmt: skip
    variants = [NONE, *args.kinds]
    results: list[PhaseResult] = []
    for rnd in range(1, args.rounds + 1):
        shift = (rnd - 1) % len(variants)  # each variant leads a round in turn: drift cancels
        order = variants[shift:] + variants[:shift]
        for phase in args.phases:
            for variant in order:
                bound = variant != NONE
                result = throughput.run_phase(
                    phase, "normal", targs, http=True, label=variant,
                    extra_config=f"\n[budgets.default.{BUDGET}]\n{KINDS[variant]}" if bound else "",
                    job_extra=BOUND if bound else None,
                    check=budget_check(variant) if bound else None,
                )  # fmt: skip
                result.run = rnd
                results.append(result)
                print(f"  round {rnd} {phase}/{variant}: {result.jobs_per_s:,.0f} jobs/s"
                      f"{'' if result.ok else ' FAILED: ' + '; '.join(result.problems)}",
                      file=sys.stderr, flush=True)  # fmt: skip
    ratios = cost_ratios(results, args.phases, args.kinds)
    print()
    print(throughput.table(results))
    print()
    print(ratio_table(results, ratios))
    print(f"\nload average at the end: {load()}")
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"FAILED {r.phase}/{r.synchronous} round {r.run}: {'; '.join(r.problems)}")
    write_json(args.json, {
        "command": shlex.join(sys.orig_argv), "environment": environment(args.source),
        "load_end": load(), "results": [asdict(r) for r in results],
        "ratios": [{**asdict(r), "median": r.median} for r in ratios],
    })  # fmt: skip
    return 1 if failed else 0


def cost_ratios(results: list[PhaseResult], phases: list[str], kinds: list[str]) -> list[Ratio]:
    """The per-round ratios of each phase and kind against no budget."""
    by = {(r.phase, r.synchronous, r.run): r for r in results}
    rounds = sorted({r.run for r in results})
    ratios = []
    for phase in phases:
        for kind in kinds:
            ratio = Ratio(phase, kind)
            for rnd in rounds:
                none, bound = by.get((phase, NONE, rnd)), by.get((phase, kind, rnd))
                if none is None or bound is None or not bound.jobs_per_s:
                    continue
                ratio.rounds.append(none.jobs_per_s / bound.jobs_per_s)
                if none.daemon_us_per_job and bound.daemon_us_per_job:
                    ratio.cpu_rounds.append(bound.daemon_us_per_job / none.daemon_us_per_job)
            ratios.append(ratio)
    return ratios


def ratio_table(results: list[PhaseResult], ratios: list[Ratio]) -> str:
    """Median jobs/s of each variant, and the ratios against the target."""
    lines = []
    for phase in sorted({r.phase for r in results}):
        for label in sorted({r.synchronous for r in results if r.phase == phase}):
            rates = [r.jobs_per_s for r in results if (r.phase, r.synchronous) == (phase, label)]
            lines.append(f"{phase:<8} {label:<16} median {statistics.median(rates):>8,.0f} jobs/s"
                         f" (range {min(rates):,.0f}-{max(rates):,.0f})")  # fmt: skip
    lines.append("")
    lines.append(f"time(bound) / time(none), per round; target <= {TARGET_COST}")
    for r in ratios:
        rounds = " ".join(f"{x:.2f}" for x in r.rounds)
        cpu = statistics.median(r.cpu_rounds) if r.cpu_rounds else None
        verdict = "-" if r.median is None else ("holds" if r.median <= TARGET_COST else "MISSED")
        lines.append(f"{r.phase:<8} {r.kind:<16} rounds [{rounds}]  median {_num(r.median, '.2f')}"
                     f"  daemon CPU/job median {_num(cpu, '.2f')}x  {verdict}")  # fmt: skip
    return "\n".join(lines)


# -- crossing ------------------------------------------------------------------------


class AnswerReader(threading.Thread):
    """Reads one answer on a connection in the background and notes when it came."""

    def __init__(self, client: WireClient) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.frame: dict[str, Any] | None = None
        self.at: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        """Block on the answer; note the frame and ``perf_counter`` at its arrival."""
        try:
            self.frame = self.client.read()
            self.at = time.perf_counter()
        except (OSError, WireError) as exc:
            self.error = repr(exc)


@dataclass
class Crossing:
    """One try: ms from the enqueue sent (and answered) to B's claim answer."""

    sent_ms: float
    ack_ms: float
    #: Inside the daemons: A's created_at to B's claim instant (whole ms, two clocks).
    daemon_ms: int


def crossing(args: argparse.Namespace) -> int:
    """``--tries`` crossings after ``--warmup`` uncounted ones."""
    print(header(), flush=True)
    tries: list[Crossing] = []
    problems: list[str] = []
    with cluster(2, keep=args.keep) as (_dsn, (a, b)):
        with WireClient(a.socket) as ca, WireClient(b.socket) as cb:
            for i in range(args.warmup + args.tries):
                try:
                    one = cross_once(ca, cb, b, i, args.wait_ms)
                except (TimeoutError, WireError, OSError) as exc:
                    problems.append(f"try {i}: {exc}")
                    break
                if i >= args.warmup:
                    tries.append(one)
        notices = metric(b.metrics_text(), "sluicegate_notify_lag_seconds_count", daemon="d1")
        lag_sum = metric(b.metrics_text(), "sluicegate_notify_lag_seconds_sum", daemon="d1")
        problems += stop_all([a, b])
    figures = {key: spread([getattr(t, key) for t in tries])
               for key in ("sent_ms", "ack_ms", "daemon_ms")}  # fmt: skip
    slow = sum(t.sent_ms >= TARGET_CROSSING_MS for t in tries)
    print(f"\n{len(tries)} tries (after {args.warmup} uncounted), ms:")
    print(f"{'from':<28} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}")
    for key, what in (("sent_ms", "enqueue sent (client)"), ("ack_ms", "enqueue answered (client)"),
                      ("daemon_ms", "created_at (in daemons)")):  # fmt: skip
        f = figures[key]
        print(f"{what:<28} " + " ".join(f"{_num(f[q]):>7}" for q in ("p50", "p90", "p99", "max")))
    p99 = figures["sent_ms"]["p99"]
    holds = p99 is not None and p99 < TARGET_CROSSING_MS and len(tries) == args.tries
    print(
        f"tries at or over {TARGET_CROSSING_MS:g} ms: {slow}; p99 under "
        f"{TARGET_CROSSING_MS:g} ms: {'holds' if holds else 'MISSED'}"
    )
    if notices:
        print(
            f"B heard {notices:.0f} notices, mean publish-to-receipt "
            f"{(lag_sum or 0) / notices * 1000:.1f} ms (sluicegate_notify_lag_seconds)"
        )
    print(f"load average at the end: {load()}")
    for problem in problems:
        print(f"FAILED: {problem}")
    write_json(args.json, {
        "command": shlex.join(sys.orig_argv), "environment": environment(), "load_end": load(),
        "tries": [asdict(t) for t in tries], "figures": figures, "target_holds": holds,
        "problems": problems,
    })  # fmt: skip
    return 1 if problems or len(tries) != args.tries else 0


def cross_once(ca: WireClient, cb: WireClient, b: BenchDaemon, i: int, wait_ms: int) -> Crossing:
    """One crossing: B waits, A enqueues, B answers with that job (then completes it)."""
    req = cb.request("claim_next", queues=[CROSS_QUEUE], wait_ms=wait_ms,
                     lease_ms=RECLAIM_LEASE_MS)  # fmt: skip
    wait_for("the claim waiting on B", lambda: waiting_claims(b) == 1, timeout=5)
    reader = AnswerReader(cb)
    reader.start()
    sent = time.perf_counter()
    job = ca.ok("enqueue", queue=CROSS_QUEUE, type="cross", payload={"try": i})["job"]
    acked = time.perf_counter()
    reader.join(wait_ms / 1000 + 5)
    frame, at = reader.frame, reader.at
    if frame is None or at is None:
        raise WireError(f"no claim answer from B: {reader.error}")
    jobs = frame.get("jobs") or []
    if (
        frame.get("id") != req
        or not frame.get("ok")
        or [j["job"]["id"] for j in jobs] != [job["id"]]
    ):
        raise WireError(f"B answered {frame!r} for job {job['id']}")
    claimed = jobs[0]["job"]
    cb.ok("complete", job_id=claimed["id"], lease=claimed["lease"])
    claim_instant = claimed["lease_expires_at"] - RECLAIM_LEASE_MS
    return Crossing((at - sent) * 1000, (at - acked) * 1000, claim_instant - job["created_at"])


# -- failover ------------------------------------------------------------------------


class Reclaimer(threading.Thread):
    """Claims the dead leader's jobs back on one survivor until all are taken."""

    def __init__(self, daemon: BenchDaemon, taken: Taken, wait_ms: int) -> None:
        super().__init__(daemon=True)
        self.client = WireClient(daemon.socket)
        self.taken = taken
        self.wait_ms = wait_ms
        self.error: str | None = None

    def run(self) -> None:
        """Loop ``claim_next``; note each job's arrival and claim instant."""
        try:
            while not self.taken.all.is_set():
                answer = self.client.call(
                    "claim_next", queues=[LEASED_QUEUE], max=self.taken.n,
                    wait_ms=self.wait_ms, lease_ms=RECLAIM_LEASE_MS,
                )  # fmt: skip
                if not answer.get("ok"):
                    self.error = f"claim_next: {answer.get('error')}"
                    return
                self.taken.add(answer["jobs"], time.perf_counter())
        except (OSError, WireError) as exc:
            if not self.taken.all.is_set():  # else: closed on purpose, all were taken
                self.error = repr(exc)
        finally:
            self.client.close()

    def interrupt(self) -> None:
        """End a claim still waiting (the others took every job)."""
        try:
            self.client.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Taken:
    """The jobs taken back, by all survivors together."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.lock = threading.Lock()
        #: job id -> (perf_counter at the answer, claim instant in the daemon, attempts)
        self.jobs: dict[str, tuple[float, int, int]] = {}
        self.twice: list[str] = []
        self.all = threading.Event()

    def add(self, jobs: list[dict[str, Any]], at: float) -> None:
        """Note the jobs of one claim answer received at ``at``."""
        with self.lock:
            for item in jobs:
                job = item["job"]
                if job["id"] in self.jobs:
                    self.twice.append(job["id"])
                instant = job["lease_expires_at"] - RECLAIM_LEASE_MS
                self.jobs[job["id"]] = (at, instant, job["attempts"])
            if len(self.jobs) >= self.n:
                self.all.set()


@dataclass
class Takeover:
    """One try: seconds from the kill to each sign of the new leader and of the
    leased jobs taken back."""

    leader: str
    new_leader: str | None = None
    lock_s: float | None = None  # another backend holds the role's advisory lock
    row_s: float | None = None  # the leader row names another holder
    gauge_s: float | None = None  # a survivor's sluicegate_leader gauge reads 1
    expiry_s: float = 0.0  # the leases' expiry, from the kill (daemon clock vs wall)
    first_claim_s: float | None = None
    last_claim_s: float | None = None
    #: Inside the daemons: the first and last claim instant minus the lease expiry (ms).
    after_expiry_ms: list[int] = field(default_factory=list)
    #: The watch's mean period between looks (ms): the resolution of the role's times.
    poll_ms: float = 0.0
    problems: list[str] = field(default_factory=list)


def failover(args: argparse.Namespace) -> int:
    """``--tries`` kills of the retention leader, each on a fresh database."""
    print(header(), flush=True)
    tries: list[Takeover] = []
    for i in range(1, args.tries + 1):
        one = failover_once(args)
        tries.append(one)
        print(f"  try {i}: {one.leader} killed; role to {one.new_leader} after "
              f"{_num(one.lock_s, '.3f')} s (gauge {_num(one.gauge_s, '.3f')} s); leases taken "
              f"back {_num(one.first_claim_s, '.3f')}-{_num(one.last_claim_s, '.3f')} s "
              f"(expiry {one.expiry_s:.3f} s)"
              f"{' FAILED: ' + '; '.join(one.problems) if one.problems else ''}",
              file=sys.stderr, flush=True)  # fmt: skip
    interval = args.interval_ms / 1000
    print(
        f"\nretention interval {interval:g} s, {args.daemons} daemons, {args.leased} jobs "
        f"leased for {args.lease_ms} ms, killed {args.kill_after:g} s after the claim; "
        f"the role watched every {statistics.mean(t.poll_ms for t in tries):.0f} ms"
    )
    print(f"{'try':>3} {'killed':>6} {'new':>4} {'lock s':>7} {'row s':>7} {'gauge s':>8} "
          f"{'ticks':>6} {'expiry s':>9} {'claimed s':>16} {'after expiry ms':>16}")  # fmt: skip
    for n, t in enumerate(tries, 1):
        print(f"{n:>3} {t.leader:>6} {t.new_leader or '-':>4} {_num(t.lock_s, '.3f'):>7} "
              f"{_num(t.row_s, '.3f'):>7} {_num(t.gauge_s, '.3f'):>8} "
              f"{_num(t.gauge_s and t.gauge_s / interval, '.2f'):>6} {t.expiry_s:>9.3f} "
              f"{_num(t.first_claim_s, '.3f') + '-' + _num(t.last_claim_s, '.3f'):>16} "
              f"{'-'.join(str(x) for x in t.after_expiry_ms) or '-':>16}")  # fmt: skip
    summary = failover_summary(tries, interval)
    for line in summary["lines"]:
        print(line)
    print(f"load average at the end: {load()}")
    problems = [f"try {n}: {p}" for n, t in enumerate(tries, 1) for p in t.problems]
    for problem in problems:
        print(f"FAILED {problem}")
    write_json(args.json, {
        "command": shlex.join(sys.orig_argv), "environment": environment(), "load_end": load(),
        "interval_s": interval, "lease_ms": args.lease_ms, "tries": [asdict(t) for t in tries],
        "medians": summary["medians"],
    })  # fmt: skip
    return 1 if problems else 0


def failover_summary(tries: list[Takeover], interval: float) -> dict[str, Any]:
    """Medians over the tries, and the verdict on "within two ticks"."""

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    medians = {
        "lock_s": median([t.lock_s for t in tries]),
        "row_s": median([t.row_s for t in tries]),
        "gauge_s": median([t.gauge_s for t in tries]),
        "last_claim_s": median([t.last_claim_s for t in tries]),
        "expiry_s": median([t.expiry_s for t in tries]),
        "after_expiry_ms": median([t.after_expiry_ms[-1] for t in tries if t.after_expiry_ms]),
    }
    worst = max((t.gauge_s for t in tries if t.gauge_s is not None), default=None)
    lines = [
        "medians: " + ", ".join(f"{k} {_num(v, '.3f')}" for k, v in medians.items()),
        f"role taken (gauge) at most {_num(worst, '.3f')} s = "
        f"{_num(worst and worst / interval, '.2f')} ticks; within two ticks: "
        + ("holds" if worst is not None and worst <= 2 * interval else "MISSED"),
    ]
    return {"medians": medians, "lines": lines}


def failover_once(args: argparse.Namespace) -> Takeover:
    """Start the daemons, lease jobs on the leader, kill it, watch the others."""
    extra = f'\n[retention]\ninterval = "{args.interval_ms}ms"\n'
    with cluster(args.daemons, extra, args.keep) as (dsn, daemons), Session(dsn) as db:

        def leading() -> list[BenchDaemon]:
            return [d for d in daemons if d.proc and d.proc.poll() is None and metric(
                d.metrics_text(), "sluicegate_leader", role="retention",
                daemon=name_of(d, daemons)) == 1]  # fmt: skip

        (leader,) = wait_for("one leader", lambda: len(found := leading()) == 1 and found, 30, 0.05)
        result = Takeover(name_of(leader, daemons))
        survivors = [d for d in daemons if d is not leader]
        # The daemons start a few hundred ms apart and tick from their start: without
        # a random pause every try would kill at the same phase of the survivors' ticks.
        time.sleep(random.uniform(0, args.interval_ms / 1000))
        with WireClient(leader.socket) as client:
            body = [{"queue": LEASED_QUEUE, "type": "leased", "payload": {"n": n}}
                    for n in range(args.leased)]  # fmt: skip
            client.ok("enqueue_many", jobs=body)
            claimed = client.ok("claim_next", queues=[LEASED_QUEUE], max=args.leased,
                                lease_ms=args.lease_ms)["jobs"]  # fmt: skip
            claimed_at = time.perf_counter()
        expiry = max(j["job"]["lease_expires_at"] for j in claimed)
        taken = Taken(len(claimed))
        reclaimers = [Reclaimer(d, taken, wait_ms=60_000) for d in survivors]
        for reclaimer in reclaimers:
            reclaimer.start()
        for d in survivors:
            wait_for("the survivors' waiting claims", lambda d=d: waiting_claims(d) == 1, 5)
        holder_pid = wait_for("the leader's advisory lock", lambda: lock_holders(db), 5)
        holder_row = leader_row(db)
        time.sleep(max(0.0, claimed_at + args.kill_after - time.perf_counter()))
        killed = time.perf_counter()
        result.expiry_s = expiry / 1000 - time.time()  # the daemon's clock: wall at start
        leader.proc.kill()  # type: ignore[union-attr]  # SIGKILL: no goodbye
        watch(result, db, survivors, daemons, killed, holder_pid, holder_row, args)
        taken.all.wait(max(0.0, result.expiry_s) + args.timeout)
        for reclaimer in reclaimers:
            reclaimer.interrupt()
            reclaimer.join(5)
            if reclaimer.error:
                result.problems.append(reclaimer.error)
        leases(result, taken, claimed, expiry, killed)
        result.problems += stop_all(daemons, skip=leader)
    return result


def lock_holders(db: Session) -> set[int]:
    """The backends holding the retention role's advisory lock."""
    key = role_key("retention")
    rows = db.query(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid = $1 AND objid = $2 AND objsubid = 1",
        key >> 32, key & 0xFFFF_FFFF,
    )  # fmt: skip
    return {pid for (pid,) in rows}


def leader_row(db: Session) -> str | None:
    """The holder the ``leader`` row names for the retention role."""
    rows = db.query("SELECT holder FROM leader WHERE role = 'retention'")
    return rows[0][0] if rows else None


def watch(result: Takeover, db: Session, survivors: list[BenchDaemon], daemons: list[BenchDaemon],
          killed: float, holder_pid: set[int], holder_row: str | None,
          args: argparse.Namespace) -> None:  # fmt: skip
    """Poll every ``--poll-ms`` until a survivor leads by all three signs. Each
    time is taken just after the look that saw the sign: an upper bound, late by
    at most one look's period (:attr:`Takeover.poll_ms`)."""
    deadline = killed + args.timeout + 2 * args.interval_ms / 1000
    periods = []
    while time.perf_counter() < deadline and result.gauge_s is None:
        began = time.perf_counter()
        if result.lock_s is None and (pids := lock_holders(db)) and pids != holder_pid:
            result.lock_s = time.perf_counter() - killed
        if result.row_s is None and leader_row(db) not in (None, holder_row):
            result.row_s = time.perf_counter() - killed
        for d in survivors:
            if metric(d.metrics_text(), "sluicegate_leader", role="retention",
                      daemon=name_of(d, daemons)) == 1:  # fmt: skip
                result.gauge_s = time.perf_counter() - killed
                result.new_leader = name_of(d, daemons)
        time.sleep(args.poll_ms / 1000)
        periods.append(time.perf_counter() - began)
    result.poll_ms = statistics.mean(periods) * 1000 if periods else 0.0
    if result.gauge_s is None:
        result.problems.append(f"no survivor led within {deadline - killed:.1f} s")


def leases(result: Takeover, taken: Taken, claimed: list[dict[str, Any]], expiry: int,
           killed: float) -> None:  # fmt: skip
    """Fill the leases' figures; a problem for a job not taken back exactly once."""
    ids = {j["job"]["id"] for j in claimed}
    if set(taken.jobs) != ids or taken.twice:
        result.problems.append(f"taken back {len(taken.jobs)} of {len(ids)} jobs, "
                               f"{len(taken.twice)} twice")  # fmt: skip
    if any(attempts != 2 for _at, _instant, attempts in taken.jobs.values()):
        result.problems.append("a job taken back without its lapsed attempt counted")
    if taken.jobs:
        arrivals = sorted(at for at, _i, _a in taken.jobs.values())
        instants = sorted(instant for _at, instant, _a in taken.jobs.values())
        result.first_claim_s = arrivals[0] - killed
        result.last_claim_s = arrivals[-1] - killed
        result.after_expiry_ms = [instants[0] - expiry, instants[-1] - expiry]


# -- command line --------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: one subcommand per measurement."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    cost = sub.add_parser("exactness-cost", help="a hot budget against none, 2 daemons")
    cost.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    cost.add_argument("--kinds", default=",".join(KINDS), help="hot budget kinds, comma-separated")
    cost.add_argument("--phases", default="batched", help="batched and/or single")
    cost.add_argument("--daemons", type=int, default=2)
    cost.add_argument("--jobs", type=int, default=20_000, help="batched jobs per phase")
    cost.add_argument("--single-jobs", type=int, default=1_000, help="one-at-a-time jobs")
    cost.add_argument("--workers", type=int, default=2, help="batched worker processes")
    cost.add_argument("--clients", type=int, default=4, help="one-at-a-time client processes")
    cost.add_argument("--stall-timeout", type=float, default=60.0)
    cost.add_argument("--source", type=Path, help="run daemon/ and actors/ from this tree")
    cross = sub.add_parser("crossing", help="a claim on B answering an enqueue on A")
    cross.add_argument("--tries", type=int, default=200)
    cross.add_argument("--warmup", type=int, default=5, help="uncounted tries first")
    cross.add_argument("--wait-ms", type=int, default=5_000, help="the waiting claim's wait_ms")
    fail = sub.add_parser("failover", help="kill -9 of the leader holding leases")
    fail.add_argument("--tries", type=int, default=5)
    fail.add_argument("--daemons", type=int, default=3)
    fail.add_argument("--interval-ms", type=int, default=1_000, help="[retention] interval")
    fail.add_argument("--leased", type=int, default=10, help="jobs the leader holds")
    fail.add_argument("--lease-ms", type=int, default=2_000, help="their lease")
    fail.add_argument("--kill-after", type=float, default=0.5, help="s from the claim to the kill")
    fail.add_argument("--poll-ms", type=float, default=20.0, help="watching the survivors")
    fail.add_argument("--timeout", type=float, default=20.0, help="s to wait past the expiry")
    for sp in (cost, cross, fail):
        sp.add_argument("--json", help="also write the results as JSON to this file")
    for sp in (cross, fail):
        sp.add_argument("--keep", action="store_true", help="keep the daemons' dirs and logs")
    args = p.parse_args(argv)
    if args.command == "exactness-cost":
        args.kinds = [k for k in args.kinds.split(",") if k]
        args.phases = [ph for ph in args.phases.split(",") if ph]
        if unknown := set(args.kinds) - set(KINDS):
            p.error(f"unknown kind {sorted(unknown)[0]!r}; kinds are {', '.join(KINDS)}")
        if unknown := set(args.phases) - set(throughput.PHASES):
            p.error(f"unknown phase {sorted(unknown)[0]!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one measurement; 1 if a job was lost or an answer was wrong."""
    args = parse_args(argv)
    run = {"exactness-cost": exactness_cost, "crossing": crossing, "failover": failover}
    return run[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
