"""Sluicegate throughput benchmark: prints figures, asserts nothing about timing.

Each phase gets a fresh ``sluice serve`` on a fresh temp state dir
(``http = ""``, ``loop_probe = "5ms"``, ``synchronous`` from the command line):

* ``batched``: P producer processes send ``enqueue_many`` batches of 100 with a
  window of requests in flight; N worker processes loop ``claim_next
  {max: 100, wait_ms: 1000}`` and complete each batch with one
  ``complete_many`` (``--completes each``: one pipelined ``complete`` per
  job, as before). Reports
  end-to-end jobs/s (first enqueue sent to last complete answered), the
  producers' enqueue rate, and claim_next latency as the workers see it.
* ``single``: C client processes each loop ``enqueue`` one job, ``claim_next
  max=1``, ``complete``, strictly one request in flight.

After a phase the daemon's ``status`` must show every job completed (else the
exit status is 1), and its event-loop lag is read (see ``harness.py``).

    .venv/bin/python bench/throughput.py [--quick] [--both] [--synchronous full]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import platform
import queue
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from clients import QUEUE, Report, Shared, batch_worker, producer, single_client
from harness import ROOT, BenchDaemon, lag_source
from pg_database import fresh_database, queue_counts

PHASES = ("batched", "single")


@dataclass
class PhaseResult:
    """The figures of one phase on one ``synchronous`` setting."""

    phase: str
    synchronous: str
    jobs: int
    run: int = 1
    completed: int = 0
    seconds: float = 0.0
    #: The measured span's ends, ``time.perf_counter()`` (first send, last answer).
    span: tuple[float, float] | None = None
    jobs_per_s: float = 0.0
    enqueue_per_s: float | None = None
    claims: int = 0
    empty_claims: int = 0
    claim_p50_ms: float | None = None
    claim_p99_ms: float | None = None
    daemon_cpu_pct: float | None = None
    #: CPU the client processes used, in % of one core over the phase.
    client_cpu_pct: float | None = None
    #: The daemon's CPU per completed job, in µs: steadier than jobs/s when the
    #: machine is shared, since it does not count time the daemon was descheduled.
    daemon_us_per_job: float | None = None
    #: Writes per group commit (status.daemon.group_commits), when exposed.
    writes_per_commit: float | None = None
    loop_lag: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every job was completed and nothing went wrong."""
        return not self.problems


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def split(total: int, parts: int) -> list[tuple[int, int]]:
    """``total`` jobs as ``parts`` (count, first number) shares."""
    base, extra = divmod(total, parts)
    shares, first = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        shares.append((n, first))
        first += n
    return shares


def run_phase(
    phase: str,
    synchronous: str,
    args: argparse.Namespace,
    http: bool,
    database: Callable[[], AbstractContextManager[str]] = fresh_database,
    *,
    label: str | None = None,
    extra_config: str = "",
    job_extra: dict[str, Any] | None = None,
    check: Callable[[str, list[BenchDaemon]], list[str]] | None = None,
) -> PhaseResult:
    """One phase against a fresh daemon (``args.daemons`` of them on PostgreSQL).

    ``database`` makes the phase's PostgreSQL database (``--store postgres``);
    ``peer_pgqueuer.py`` passes one that also watches the server while it lives.
    For variants of a phase (bench/cluster.py): ``label`` replaces the
    synchronous column, ``extra_config`` is appended to each daemon's config
    (after its ``[daemon]`` lines), ``job_extra`` is merged into every job
    enqueued, and ``check`` is given the database's DSN and the daemons, still
    running, after the phase and returns problems (PostgreSQL only).
    """
    ctx = mp.get_context("spawn")
    if phase == "batched":
        total = args.jobs
        specs = [(producer, (n, first, args.batch, args.window))
                 for n, first in split(total, args.producers)]  # fmt: skip
        many = args.completes == "many"
        specs += [(batch_worker, (total, args.batch, 1000, many))] * args.workers
    else:
        total = args.single_jobs
        specs = [(single_client, (n, first)) for n, first in split(total, args.clients)]
    if label is None:
        label = synchronous if args.store == "sqlite" else f"pg-{args.daemons}d"
    result = PhaseResult(phase, label, total)
    job_kwargs = {"extra": job_extra} if job_extra else {}
    shared = Shared(ctx.Barrier(len(specs) + 1), ctx.Event(), ctx.Value("q", 0), ctx.Queue())
    tag = f"{phase}-{label}"
    profile_dir = Path(args.profile_dir) if args.profile_dir else None
    with ExitStack() as stack:
        extra = dsn = ""
        if args.store == "postgres":  # a database of its own, shared by --daemons daemons
            dsn = stack.enter_context(database())
            extra = f'database = "{dsn}"\n'
        extra += extra_config
        profiled = profile_dir is not None  # the first daemon only
        daemons = [stack.enter_context(BenchDaemon(
            synchronous,
            http=http,
            extra_config=extra,
            cprofile=profile_dir / f"{tag}.prof" if profiled and args.cprofile and not i else None,
            py_spy=profile_dir / f"{tag}.txt" if profiled and args.py_spy and not i else None,
            source=args.source,
        )) for i in range(args.daemons)]  # fmt: skip
        # Clients are spread over the daemons, as a producer fleet would be.
        procs = [ctx.Process(target=fn, args=(str(daemons[i % len(daemons)].socket), *fn_args,
                                               shared),
                             kwargs=job_kwargs if fn is not batch_worker else {}, daemon=True)
                 for i, (fn, fn_args) in enumerate(specs)]  # fmt: skip
        for proc in procs:
            proc.start()
        for daemon in daemons:
            daemon.start()
        print(f"  {tag}: daemon pids {[d.pid for d in daemons]}, {len(procs)} client processes",
              file=sys.stderr, flush=True)  # fmt: skip
        cpu0 = sum(d.cpu_seconds() for d in daemons)
        shared.barrier.wait(timeout=120)
        reports = _collect(procs, shared, args.stall_timeout, result)
        cpu1 = sum(d.cpu_seconds() for d in daemons)
        daemons[0].stop_py_spy()
        status = daemons[0].status()
        if dsn:  # each daemon counts its own moves: the database has them all
            status["queues"] = [{"queue": QUEUE, **queue_counts(dsn, QUEUE)}]
            if check is not None:
                result.problems += check(dsn, daemons)
        result.loop_lag = daemons[0].loop_lag(status)
        for daemon in daemons:
            code = daemon.stop()
            if code != 0:
                result.problems.append(f"daemon exited {code} on SIGTERM")
    for proc in procs:
        proc.join(5)
    _figures(result, reports, status, cpu1 - cpu0)
    return result


def _collect(procs: list[Any], shared: Shared, stall_s: float,
             result: PhaseResult) -> list[Report]:  # fmt: skip
    """Gather one report per client process; stop them all if progress stalls."""
    reports: list[Report] = []
    last_done, last_change = -1, time.monotonic()
    while len(reports) < len(procs):
        try:
            reports.append(shared.results.get(timeout=0.5))
            continue
        except queue.Empty:
            pass
        done = shared.done.value
        if done != last_done:
            last_done, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > stall_s and not shared.stop.is_set():
            result.problems.append(f"no progress for {stall_s:.0f} s at {done} jobs; gave up")
            shared.stop.set()
            last_change = time.monotonic()
        if all(not p.is_alive() for p in procs) and shared.results.empty():
            result.problems.append(f"{len(procs) - len(reports)} client processes died")
            break
    return reports


def _figures(result: PhaseResult, reports: list[Report], status: dict[str, Any],
             daemon_cpu: float) -> None:  # fmt: skip
    """Fill ``result`` from the client reports and the daemon's final status."""
    for report in reports:
        result.problems += [f"{report.role}: {e}" for e in report.errors[:3]]
    starters = [r for r in reports if r.role in ("producer", "single")]
    finishers = [r for r in reports if r.role in ("worker", "single")]
    firsts = [r.first_send for r in starters if r.first_send is not None]
    lasts = [r.last_answer for r in finishers if r.last_answer is not None]
    result.completed = sum(r.jobs for r in finishers)
    if firsts and lasts:
        result.span = (min(firsts), max(lasts))
        result.seconds = max(lasts) - min(firsts)
        result.jobs_per_s = result.completed / result.seconds if result.seconds else 0.0
    producers = [r for r in reports if r.role == "producer" and r.last_answer is not None]
    if producers:
        span = max(r.last_answer or 0.0 for r in producers) - min(
            r.first_send or 0.0 for r in producers
        )
        result.enqueue_per_s = sum(r.jobs for r in producers) / span if span else None
    latencies = [x for r in reports for x in r.claim_latencies]
    result.claims = len(latencies)
    result.empty_claims = sum(r.empty_claims for r in reports)
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    result.claim_p50_ms = None if p50 is None else p50 * 1000
    result.claim_p99_ms = None if p99 is None else p99 * 1000
    if result.seconds:
        # Per cent of one core over the measured span (the daemon idles after it).
        result.daemon_cpu_pct = daemon_cpu / result.seconds * 100
        result.client_cpu_pct = sum(r.cpu_seconds for r in reports) / result.seconds * 100
    if result.completed:
        result.daemon_us_per_job = daemon_cpu / result.completed * 1e6
    commits = (status.get("daemon") or {}).get("group_commits") or {}
    if commits.get("commits"):
        result.writes_per_commit = commits["writes"] / commits["commits"]
    rows = [q for q in status.get("queues", []) if q.get("queue") == QUEUE]
    counts = rows[0] if rows else {}
    left = {s: counts.get(s, 0) for s in ("scheduled", "pending", "running", "dead")}
    if counts.get("completed") != result.jobs or any(left.values()):
        result.problems.append(
            f"status: completed={counts.get('completed')} of {result.jobs}, "
            + ", ".join(f"{s}={n}" for s, n in left.items())
        )


# -- output ----------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _lag(lag: dict[str, Any] | None) -> str:
    if not lag:
        return "-"
    if "p99_ms" in lag:
        return f"{lag['p99_ms']:.1f}"
    return f"<={lag['p99_le_ms']:g}"


def table(results: list[PhaseResult]) -> str:
    """The results as an aligned text table."""
    head = ("phase", "synchronous", "run", "jobs", "seconds", "jobs/s", "enqueue/s",
            "claim p50 ms", "claim p99 ms", "loop lag p99 ms", "daemon CPU", "daemon us/job",
            "client CPU", "writes/commit", "ok")  # fmt: skip
    rows = [head]
    for r in results:
        rows.append((
            r.phase, r.synchronous, str(r.run), f"{r.completed}/{r.jobs}", f"{r.seconds:.2f}",
            f"{r.jobs_per_s:,.0f}", "-" if r.enqueue_per_s is None else f"{r.enqueue_per_s:,.0f}",
            _ms(r.claim_p50_ms), _ms(r.claim_p99_ms), _lag(r.loop_lag),
            "-" if r.daemon_cpu_pct is None else f"{r.daemon_cpu_pct:.0f}%",
            "-" if r.daemon_us_per_job is None else f"{r.daemon_us_per_job:.0f}",
            "-" if r.client_cpu_pct is None else f"{r.client_cpu_pct:.0f}%",
            "-" if r.writes_per_commit is None else f"{r.writes_per_commit:.1f}",
            "yes" if r.ok else "NO",
        ))  # fmt: skip
    return align(rows, left=2)


def align(rows: list[tuple[str, ...]], left: int) -> str:
    """``rows`` (the first is the header) as text columns: the first ``left`` columns
    flush left, the figures flush right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths, strict=True))) for row in rows]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def best(results: list[PhaseResult]) -> dict[tuple[str, str], PhaseResult]:
    """The run with the most jobs/s of each (phase, synchronous)."""
    by: dict[tuple[str, str], PhaseResult] = {}
    for r in results:
        key = (r.phase, r.synchronous)
        if key not in by or r.jobs_per_s > by[key].jobs_per_s:
            by[key] = r
    return by


def side_by_side(results: list[PhaseResult]) -> str:
    """jobs/s and lag of ``normal`` beside ``full``, per phase (best run of each)."""
    by = best(results)
    lines = ["phase    normal jobs/s   full jobs/s   full/normal   lag p99 normal / full"]
    for phase in PHASES:
        n, f = by.get((phase, "normal")), by.get((phase, "full"))
        if n is None or f is None:
            continue
        ratio = f.jobs_per_s / n.jobs_per_s if n.jobs_per_s else 0.0
        lines.append(f"{phase:<8} {n.jobs_per_s:>13,.0f} {f.jobs_per_s:>13,.0f} "
                     f"{ratio:>12.2f}   {_lag(n.loop_lag)} / {_lag(f.loop_lag)}")  # fmt: skip
    return "\n".join(lines)


def _git(*args: str) -> str:
    try:
        run = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                             check=False)  # fmt: skip
    except OSError:
        return ""
    return run.stdout.strip()


def environment(source: Path | None = None) -> str:
    """What the figures were measured on: versions, CPUs, load, which daemon code."""
    if source is not None:
        code = f"daemon from {source}"
    else:
        code = f"git {_git('rev-parse', '--short', 'HEAD') or '?'}"
        if diff := _git("diff", "HEAD", "--", "daemon", "actors"):
            code += (
                f" + uncommitted daemon/actors diff {hashlib.sha1(diff.encode()).hexdigest()[:8]}"
            )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
            f"{os.cpu_count()} CPUs, load average {load}, {code}")  # fmt: skip


# -- command line ------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--synchronous", choices=("normal", "full"), default="normal")
    p.add_argument("--both", action="store_true", help="run normal, then full, side by side")
    p.add_argument("--phases", default=",".join(PHASES), help="comma-separated: batched,single")
    p.add_argument("--quick", action="store_true", help="small run for smoke tests")
    p.add_argument("--jobs", type=int, default=None, help="batched jobs (default 100000)")
    p.add_argument("--single-jobs", type=int, default=None, help="one-at-a-time jobs (20000)")
    p.add_argument("--producers", type=int, default=1, help="batched producer processes")
    p.add_argument("--workers", type=int, default=2, help="batched worker processes")
    p.add_argument("--clients", type=int, default=4, help="one-at-a-time client processes")
    p.add_argument("--batch", type=int, default=100, help="jobs per enqueue_many and claim")
    p.add_argument("--window", type=int, default=8, help="enqueue_many requests in flight")
    p.add_argument(
        "--completes",
        choices=("many", "each"),
        default="many",
        help="batched workers: one complete_many per batch, or one complete per job",
    )
    p.add_argument("--repeat", type=int, default=1, help="run each phase N times (noisy host)")
    p.add_argument("--stall-timeout", type=float, default=30.0, help="give up after N s idle")
    p.add_argument("--profile-dir", help="write daemon profiles here (with --cprofile/--py-spy)")
    p.add_argument("--cprofile", action="store_true", help="run the daemon under cProfile")
    p.add_argument("--py-spy", action="store_true", help="py-spy record (raw) the daemon")
    p.add_argument("--source", type=Path, help="run daemon/ and actors/ from this tree instead")
    p.add_argument("--json", help="also write the results as JSON to this file")
    p.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: a fresh database each phase (SLUICEGATE_BENCH_POSTGRES)",
    )
    p.add_argument(
        "--daemons",
        type=int,
        default=1,
        help="daemons sharing the store (postgres); clients spread over them",
    )
    args = p.parse_args(argv)
    if args.jobs is None:
        args.jobs = 10_000 if args.quick else 100_000
    if args.single_jobs is None:
        args.single_jobs = 2_000 if args.quick else 20_000
    args.phases = [ph for ph in args.phases.split(",") if ph]
    if unknown := set(args.phases) - set(PHASES):
        p.error(f"unknown phase {sorted(unknown)[0]!r}; phases are {', '.join(PHASES)}")
    if (args.cprofile or args.py_spy) and not args.profile_dir:
        p.error("--cprofile and --py-spy need --profile-dir")
    if args.profile_dir:
        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the phases; print the table; 1 if any phase lost or failed a job."""
    args = parse_args(argv)
    command = shlex.join(sys.orig_argv)
    env = environment(args.source)
    print(f"command: {command}\n{env}", flush=True)
    syncs = ("normal", "full") if args.both else (args.synchronous,)
    source = lag_source(syncs[0], args.source)
    print(f"loop lag from: {'status.daemon.loop_lag' if source == 'status' else '/metrics'}",
          flush=True)  # fmt: skip
    results: list[PhaseResult] = []
    for phase in args.phases:
        for run in range(1, args.repeat + 1):
            for sync in syncs:
                result = run_phase(phase, sync, args, http=source == "metrics")
                result.run = run
                results.append(result)
                print(f"  {phase}/{sync} run {run}: {result.jobs_per_s:,.0f} jobs/s"
                      f"{'' if result.ok else ' FAILED: ' + '; '.join(result.problems)}",
                      file=sys.stderr, flush=True)  # fmt: skip
    print()
    print(table(results))
    if args.both:
        print("\n" + side_by_side(results))
    elif args.repeat > 1:
        print("\nbest runs:\n" + table(list(best(results).values())))
    for r in results:
        if r.loop_lag:
            print(f"loop lag {r.phase}/{r.synchronous} run {r.run}: "
                  + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in r.loop_lag.items()))  # fmt: skip
        if r.empty_claims:
            print(f"empty claims {r.phase}/{r.synchronous} run {r.run}: {r.empty_claims} "
                  f"(timed out waiting; not in the latency figures)")  # fmt: skip
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"FAILED {r.phase}/{r.synchronous} run {r.run}: {'; '.join(r.problems)}")
    if args.json:
        doc = {"command": command, "environment": env,
               "results": [asdict(r) for r in results]}  # fmt: skip
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
