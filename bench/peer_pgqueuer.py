"""PgQueuer beside Sluicegate on the same PostgreSQL: issue 15's peer benchmark.

Interleaved rounds in one command. Each round runs, per phase, Sluicegate on
PostgreSQL (``throughput.run_phase`` with ``--store postgres --daemons N``,
1 unless ``--daemons`` says: real ``sluice serve`` processes, the same client
processes as ``throughput.py``, spread over the daemons) and
PgQueuer (PyPI ``pgqueuer``, asyncpg), each on a fresh database of the same
server; the order alternates between rounds so drift favours neither.

PgQueuer's side has the same shape as ``throughput.py``'s phases:

* ``batched``: 1 producer process enqueues batches of 100 (``Queries.enqueue``
  with lists) over an asyncpg pool of 8 connections, 8 batches in flight; 2
  worker processes each run ``PgQueuer.run(batch_size=100)`` on one asyncpg
  connection with a no-op entrypoint. End to end = the first enqueue sent to
  the last completion logged (``log_jobs``, which deletes the job and writes
  its ``pgqueuer_log`` row, committed).
* ``single``: 4 processes, each a closed loop: enqueue one job, wait until its
  own ``PgQueuer.run(batch_size=1)`` has run and logged it, next. As
  Sluicegate's clients, one job in flight per client.

Every phase must end with every job logged ``successful`` exactly once and
nothing left in ``pgqueuer`` (else exit 1). Beside jobs/s it reports each
system's CPU (Sluicegate's daemon, the client processes, and the database's
own backends read from ``/proc``) and the database's ``pg_stat_database``
counters per job (transactions, rows inserted/updated/deleted).

    .venv/bin/python bench/peer_pgqueuer.py --rounds 3 [--daemons 2] [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import orjson
import throughput
from clients import QUEUE, Report, Shared, _add_done
from harness import lag_source
from pg_database import admin_dsn, fresh_database

try:
    import uvloop
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgPoolDriver
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries
except ImportError:  # the `bench` extra is not installed
    PgQueuer = None  # type: ignore[assignment,misc]

SYSTEMS = ("sluicegate", "pgqueuer")
#: PgQueuer's entrypoint, i.e. its queue (the single phase adds ``-<client>``).
ENTRYPOINT = QUEUE
#: Seconds between two reads of the backends' CPU from /proc.
SAMPLE_S = 0.02
_TICKS = os.sysconf("SC_CLK_TCK")


# -- the database's side ----------------------------------------------------------


@dataclass
class PgFigures:
    """What PostgreSQL did for one phase's database.

    The counters cover the database's whole life (setup included: the schema, the
    daemon's start, the final counts; some 40-50 transactions); CPU and activity
    cover the measured span only.
    """

    #: CPU of the backends connected to this database over the span, in seconds.
    backend_cpu_s: float = 0.0
    #: ``pg_stat_database`` of this database: committed transactions (read-only ones too).
    xact_commit: int = 0
    xact_rollback: int = 0
    tup_inserted: int = 0
    tup_updated: int = 0
    tup_deleted: int = 0
    #: WAL written meanwhile, server-wide (other databases' too, if any were busy).
    wal_bytes: int = 0
    #: The database's backends by what they were doing (``pg_stat_activity``), on
    #: average over the samples in the span: ``active`` (running a statement, on CPU
    #: or waiting on ``active <wait event>``), ``in transaction`` (waiting for their
    #: client in the middle of a transaction), ``idle``.
    activity: dict[str, float] = field(default_factory=dict)
    samples: int = 0


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (None once it is gone, or elsewhere)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of ``pid``."""
    fields = _stat(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICKS


def _parent_of(pid: int) -> int | None:
    """The parent of ``pid``: for a backend, the postmaster (when the server is local)."""
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def _state(state: str | None, wait_type: str | None, wait: str | None) -> str:
    if state == "active":
        return f"active {wait_type}:{wait}" if wait_type else "active"
    return "in transaction" if state and state.startswith("idle in") else state or "?"


@dataclass
class _Sample:
    at: float  # time.perf_counter()
    cpu: float  # the database's backends' CPU so far, all of them, seconds
    states: dict[str, int]


class PgWatch:
    """Watches one database while it lives, from a thread of its own with one
    connection to the server's admin database: every ``SAMPLE_S``, its backends'
    CPU (``/proc``, when the server is on this machine) and ``pg_stat_activity``;
    at the end, once every backend has gone (their statistics are flushed when
    they exit), its ``pg_stat_database`` row.

    Every backend of a fresh database was started for the phase, so its CPU counts
    from zero; one that exits between two samples loses at most ``SAMPLE_S`` of
    CPU (they exit idle, at the end).
    """

    def __init__(self, dsn: str) -> None:
        self.db = urlsplit(dsn).path.lstrip("/")
        self.totals = PgFigures()
        self._samples: list[_Sample] = []
        self._cpu: dict[int, float] = {}
        self._postmaster: int | None = None
        self._stop = threading.Event()
        ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._watch(ready),),
                                        daemon=True)  # fmt: skip
        self._thread.start()
        ready.wait(10)

    def _proc_cpu(self) -> float:
        """The CPU of this database's backends so far (the gone ones' last reading)."""
        if self._postmaster is not None:
            path = Path(f"/proc/{self._postmaster}/task/{self._postmaster}/children")
            try:
                children = [int(p) for p in path.read_text().split()]
            except OSError:
                children = []
            for pid in children:
                try:
                    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if f" {self.db} ".encode() in title and (cpu := _cpu_of(pid)) is not None:
                    self._cpu[pid] = cpu
        return sum(self._cpu.values())

    async def _watch(self, ready: threading.Event) -> None:
        conn = await asyncpg.connect(admin_dsn(), timeout=5)
        try:
            backend = await conn.fetchval("SELECT pg_backend_pid()")
            self._postmaster = await asyncio.to_thread(_parent_of, backend)
            lsn = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
            ready.set()
            activity = "SELECT state, wait_event_type, wait_event FROM pg_stat_activity"
            activity += " WHERE datname = $1"
            deadline = float("inf")
            while time.monotonic() < deadline:
                if self._stop.is_set():  # after finish(): until the last backend has gone
                    deadline = min(deadline, time.monotonic() + 10)
                    if not await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", self.db
                    ):
                        break
                states: dict[str, int] = {}
                for row in await conn.fetch(activity, self.db):
                    key = _state(*row)
                    states[key] = states.get(key, 0) + 1
                self._samples.append(_Sample(time.perf_counter(), self._proc_cpu(), states))
                await asyncio.sleep(SAMPLE_S)
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            row = await conn.fetchrow(
                "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted,"
                " pg_current_wal_lsn() - $2::text::pg_lsn AS wal_bytes FROM pg_stat_database"
                " WHERE datname = $1",
                self.db,
                lsn,
            )
        finally:
            ready.set()
            await conn.close()
        for name, value in (row or {}).items():
            setattr(self.totals, name, int(value))

    def finish(self, timeout: float = 15.0) -> None:
        """Stop watching once the database's backends have left; read its counters."""
        self._stop.set()
        self._thread.join(timeout)

    def figures(self, span: tuple[float, float] | None) -> PgFigures:
        """The counters, with CPU and activity over ``span`` (``time.perf_counter()``)."""
        figures = PgFigures(**{**asdict(self.totals), "activity": {}})
        if span is None or not self._samples:
            return figures
        inside = [s for s in self._samples if span[0] <= s.at <= span[1]]
        before = [s for s in self._samples if s.at <= span[0]] or self._samples[:1]
        after = [s for s in self._samples if s.at >= span[1]] or self._samples[-1:]
        figures.backend_cpu_s = after[0].cpu - before[-1].cpu
        figures.samples = len(inside)
        for sample in inside:
            for state, n in sample.states.items():
                figures.activity[state] = figures.activity.get(state, 0) + n / len(inside)
        return figures


class Watched:
    """A fresh database per call, watched by a :class:`PgWatch` while it lives (the
    last one is kept in :attr:`watch`)."""

    def __init__(self) -> None:
        self.watch: PgWatch | None = None

    @contextmanager
    def __call__(self) -> Iterator[str]:
        with fresh_database() as dsn:
            self.watch = PgWatch(dsn)
            try:
                yield dsn
            finally:
                self.watch.finish()

    def figures(self, span: tuple[float, float] | None) -> PgFigures:
        """:meth:`PgWatch.figures` of the last database."""
        return PgFigures() if self.watch is None else self.watch.figures(span)


# -- PgQueuer's processes ---------------------------------------------------------


class PeerReport(Report):
    """A :class:`Report` that knows whether the run has begun (empty dequeues before
    the start barrier are the worker idling, not counted)."""

    started_at: float | None = None

    def started(self) -> None:
        """The run begins."""
        super().started()
        self.started_at = time.perf_counter()


def _instrument(pgq: Any, report: PeerReport, shared: Shared | None,
                logged: Callable[[], None] | None = None) -> asyncio.Event:  # fmt: skip
    """Wrap the worker's ``Queries`` (its job-log buffer and dequeue loop call them):
    count the jobs logged successful, time the dequeues. The event is set at the
    first dequeue, i.e. once the worker listens and polls."""
    queries = pgq.qm.queries
    log_jobs, dequeue = queries.log_jobs, queries.dequeue
    ready = asyncio.Event()

    async def counted_log_jobs(job_status: list[tuple[Any, str, Any]]) -> None:
        await log_jobs(job_status)
        report.last_answer = time.perf_counter()
        ok = sum(1 for _job, status, _tb in job_status if status == "successful")
        if ok != len(job_status):
            report.errors.append(f"log_jobs: {[s for _j, s, _t in job_status][:3]}")
        report.jobs += ok
        if shared is not None:
            _add_done(shared, ok)
        if logged is not None:
            logged()

    async def timed_dequeue(*args: Any, **kwargs: Any) -> list[Any]:
        sent_at = time.perf_counter()
        jobs = await dequeue(*args, **kwargs)
        if jobs:
            report.claim_latencies.append(time.perf_counter() - sent_at)
            if report.first_send is None:
                report.first_send = sent_at
        elif report.started_at is not None:
            report.empty_claims += 1
        ready.set()
        return jobs

    queries.log_jobs, queries.dequeue = counted_log_jobs, timed_dequeue
    return ready


def _in_process(role: str, body: Callable[[PeerReport], Any], shared: Shared) -> None:
    """Run ``body`` on uvloop (PgQueuer's own CLI and benchmark do) and hand in the report."""
    report = PeerReport(role)
    try:
        uvloop.run(body(report))
    except Exception as exc:
        report.errors.append(f"{role}: {exc!r}")
    report.finish(shared)


async def _barrier(shared: Shared, report: PeerReport) -> None:
    """Wait for the start barrier without blocking the loop (the workers keep listening)."""
    await asyncio.to_thread(shared.barrier.wait, 120)
    report.started()


def pgq_producer(dsn: str, jobs: int, first: int, batch: int, window: int,
                 shared: Shared) -> None:  # fmt: skip
    """Enqueue ``jobs`` jobs in batches of ``batch``, ``window`` batches in flight."""

    async def body(report: PeerReport) -> None:
        batches = []
        for start in range(first, first + jobs, batch):
            n = min(batch, first + jobs - start)
            payloads = [orjson.dumps({"n": i}) for i in range(start, start + n)]
            batches.append(([ENTRYPOINT] * n, payloads, [0] * n))
        # PgQueuer's docs: a pool for producers. One connection per batch in flight.
        pool = await asyncpg.create_pool(dsn, min_size=window, max_size=window)
        queries = Queries(AsyncpgPoolDriver(pool))
        todo = iter(batches)

        async def lane() -> None:
            for entrypoints, payloads, priorities in todo:  # lanes share the iterator
                ids = await queries.enqueue(entrypoints, payloads, priorities)
                if len(ids) != len(entrypoints):
                    raise RuntimeError(f"enqueue returned {len(ids)} ids for {len(payloads)}")
                report.jobs += len(ids)

        await _barrier(shared, report)
        report.first_send = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(window)))
        report.last_answer = time.perf_counter()
        await pool.close()

    _in_process("producer", body, shared)


def pgq_worker(dsn: str, total: int, batch: int, shared: Shared) -> None:
    """One ``PgQueuer.run(batch_size=batch)`` on one connection, a no-op entrypoint,
    until ``total`` jobs are logged by all workers together."""

    async def body(report: PeerReport) -> None:
        pgq = PgQueuer.from_asyncpg_connection(await asyncpg.connect(dsn))

        @pgq.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            """The job: nothing."""

        ready = _instrument(pgq, report, shared)
        run = asyncio.create_task(pgq.run(batch_size=batch))
        await ready.wait()
        await _barrier(shared, report)
        # The count is the other processes' too (a shared Value): polled, no event to wait on.
        while shared.done.value < total and not shared.stop.is_set() and not run.done():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        pgq.shutdown.set()
        await run

    _in_process("worker", body, shared)


def pgq_single(dsn: str, jobs: int, first: int, index: int, shared: Shared) -> None:
    """``jobs`` times: enqueue one job, wait until this process's own
    ``PgQueuer.run(batch_size=1)`` has run and logged it."""

    async def body(report: PeerReport) -> None:
        entrypoint = f"{ENTRYPOINT}-{index}"  # its own, so its worker runs its jobs
        pgq = PgQueuer.from_asyncpg_connection(await asyncpg.connect(dsn))
        producer = Queries.from_asyncpg_connection(await asyncpg.connect(dsn))

        @pgq.entrypoint(entrypoint)
        async def noop(job: Job) -> None:
            """The job: nothing."""

        logged = asyncio.Event()
        ready = _instrument(pgq, report, None, logged.set)
        run = asyncio.create_task(pgq.run(batch_size=1))
        await ready.wait()
        await _barrier(shared, report)
        report.first_send = time.perf_counter()
        for n in range(first, first + jobs):
            logged.clear()
            await producer.enqueue(entrypoint, orjson.dumps({"n": n}), 0)
            while not logged.is_set():
                if shared.stop.is_set() or run.done():
                    raise RuntimeError(f"stopped at job {n}")
                with suppress(TimeoutError):
                    await asyncio.wait_for(logged.wait(), 1.0)
            if report.jobs % 100 == 0:
                _add_done(shared, 100)
        report.last_answer = time.perf_counter()
        _add_done(shared, report.jobs % 100)
        pgq.shutdown.set()
        await run

    _in_process("single", body, shared)


# -- one phase of each system -------------------------------------------------------


async def _install(dsn: str) -> None:
    """PgQueuer's schema (``pgq install``, durability ``durable``), then its
    recommended autovacuum settings (``pgq autovac``: fillfactor 70 among them)."""
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        await queries.install()
        await queries.optimize_autovacuum()
    finally:
        await conn.close()


async def _pgq_counts(dsn: str) -> dict[str, int]:
    """PgQueuer's final state in ``throughput._figures``'s terms."""
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        left = dict(await conn.fetch("SELECT status::text, count(*) FROM pgqueuer GROUP BY 1"))
        logged = dict(await conn.fetch(
            "SELECT status::text, count(*) FROM pgqueuer_log GROUP BY 1"))  # fmt: skip
        distinct = await conn.fetchval(
            "SELECT count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'"
        )
    finally:
        await conn.close()
    completed = int(logged.get("successful", 0))
    # The log also keeps each job's 'queued' and 'picked' steps: those are no outcome.
    ends = ("exception", "canceled", "deleted", "failed")
    return {
        # A job logged twice would count twice: the check wants exactly once.
        "completed": completed if distinct == completed else -completed,
        "scheduled": 0,
        "pending": int(left.get("queued", 0)),
        "running": int(left.get("picked", 0)),
        "dead": sum(int(n) for s, n in (*left.items(), *logged.items()) if s in ends),
    }


def run_pgqueuer(phase: str, args: argparse.Namespace, database: Watched) -> throughput.PhaseResult:
    """One phase of PgQueuer on a fresh database."""
    ctx = mp.get_context("spawn")
    if phase == "batched":
        total = args.jobs
        specs: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
            (pgq_producer, (total, 0, args.batch, args.window))
        ]
        specs += [(pgq_worker, (total, args.dequeue_batch))] * args.workers
    else:
        total = args.single_jobs
        specs = [(pgq_single, (n, first, i))
                 for i, (n, first) in enumerate(throughput.split(total, args.clients))]  # fmt: skip
    result = throughput.PhaseResult(phase, "pgqueuer", total)
    shared = Shared(ctx.Barrier(len(specs) + 1), ctx.Event(), ctx.Value("q", 0), ctx.Queue())
    with database() as dsn:
        asyncio.run(_install(dsn))
        procs = [ctx.Process(target=fn, args=(dsn, *fn_args, shared), daemon=True)
                 for fn, fn_args in specs]  # fmt: skip
        for proc in procs:
            proc.start()
        try:
            shared.barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            result.problems.append("a PgQueuer process did not start")
            shared.stop.set()
        reports = throughput._collect(procs, shared, args.stall_timeout, result)
        for proc in procs:
            proc.join(10)
        status = {"queues": [{"queue": QUEUE, **asyncio.run(_pgq_counts(dsn))}]}
    throughput._figures(result, reports, status, 0.0)
    result.daemon_cpu_pct = result.daemon_us_per_job = None  # no daemon: the workers are it
    return result


# -- rounds, figures ----------------------------------------------------------------


@dataclass
class Run:
    """One phase of one system in one round."""

    round: int
    system: str
    phase: str
    result: throughput.PhaseResult
    pg: PgFigures = field(default_factory=PgFigures)

    @property
    def daemon_cpu_s(self) -> float:
        """Sluicegate's daemon CPU over the measured span (0 for PgQueuer)."""
        r = self.result
        return (r.daemon_us_per_job or 0.0) * r.completed / 1e6

    @property
    def client_cpu_s(self) -> float:
        """The client processes' CPU over the measured span (PgQueuer's: all of it)."""
        r = self.result
        return (r.client_cpu_pct or 0.0) * r.seconds / 100

    def per_job(self, amount: float) -> float:
        """``amount`` per completed job."""
        return amount / self.result.completed if self.result.completed else 0.0

    def doc(self) -> dict[str, Any]:
        """As JSON."""
        return {"round": self.round, "system": self.system, "phase": self.phase,
                "result": asdict(self.result), "pg": asdict(self.pg)}  # fmt: skip


def run_round(number: int, args: argparse.Namespace, http: bool) -> list[Run]:
    """Every phase of both systems, Sluicegate first in odd rounds, PgQueuer in even."""
    order = SYSTEMS if number % 2 else SYSTEMS[::-1]
    sluice_args = throughput.parse_args([
        "--store", "postgres", "--daemons", str(args.daemons), "--jobs", str(args.jobs),
        "--single-jobs", str(args.single_jobs), "--batch", str(args.batch),
        "--window", str(args.window), "--workers", str(args.workers),
        "--clients", str(args.clients), "--stall-timeout", str(args.stall_timeout),
    ])  # fmt: skip
    runs = []
    for phase in args.phases:
        for system in order:
            database = Watched()
            if system == "sluicegate":
                result = throughput.run_phase(phase, "normal", sluice_args, http, database)
            else:
                result = run_pgqueuer(phase, args, database)
            result.run = number
            run = Run(number, system, phase, result, database.figures(result.span))
            runs.append(run)
            print(f"  round {number} {phase} {system}: {result.jobs_per_s:,.0f} jobs/s"
                  f"{'' if result.ok else ' FAILED: ' + '; '.join(result.problems)}",
                  file=sys.stderr, flush=True)  # fmt: skip
    return runs


def _activity(activity: dict[str, float]) -> str:
    """Backends active / in a transaction, waiting for their client / idle, on average."""
    active = sum(n for state, n in activity.items() if state.startswith("active"))
    return "/".join(f"{n:.2f}" for n in (active, activity.get("in transaction", 0.0),
                                         activity.get("idle", 0.0)))  # fmt: skip


def waits(runs: list[Run]) -> str:
    """What the active backends were on, per run (on average, backends)."""
    lines = []
    for x in runs:
        active = sorted(((n, s) for s, n in x.pg.activity.items() if s.startswith("active")),
                        reverse=True)  # fmt: skip
        shown = ", ".join(f"{s.removeprefix('active ') or 'on CPU'} {n:.2f}" for n, s in active)
        lines.append(f"{x.phase} {x.system} round {x.round} ({x.pg.samples} samples): "
                     f"{shown.replace('active', 'running') or '-'}")  # fmt: skip
    return "\n".join(lines)


def table(runs: list[Run]) -> str:
    """Every run: throughput, latency, CPU split and the database's work per job."""
    head = ("phase", "system", "round", "jobs", "jobs/s", "claim p50 ms", "claim p99 ms",
            "daemon CPU", "client CPU", "pg CPU", "us/job daemon+client+pg", "xacts/job",
            "ins/upd/del per job", "pg active/in xact/idle", "ok")  # fmt: skip
    rows = [head]
    for x in runs:
        r, pg = x.result, x.pg
        pg_pct = pg.backend_cpu_s / r.seconds * 100 if r.seconds else 0.0
        us = [x.per_job(s) * 1e6 for s in (x.daemon_cpu_s, x.client_cpu_s, pg.backend_cpu_s)]
        rows.append((
            x.phase, x.system, str(x.round), f"{r.completed}/{r.jobs}", f"{r.jobs_per_s:,.0f}",
            throughput._ms(r.claim_p50_ms), throughput._ms(r.claim_p99_ms),
            "-" if r.daemon_cpu_pct is None else f"{r.daemon_cpu_pct:.0f}%",
            "-" if r.client_cpu_pct is None else f"{r.client_cpu_pct:.0f}%", f"{pg_pct:.0f}%",
            f"{sum(us):,.0f} = {us[0]:,.0f}+{us[1]:,.0f}+{us[2]:,.0f}",
            f"{x.per_job(pg.xact_commit):.3f}",
            "/".join(f"{x.per_job(n):.2f}" for n in (pg.tup_inserted, pg.tup_updated,
                                                     pg.tup_deleted)),
            _activity(pg.activity), "yes" if r.ok else "NO",
        ))  # fmt: skip
    return throughput.align(rows, left=3)


def summary(runs: list[Run]) -> str:
    """Per phase: each round's jobs/s of both and their ratio, then the medians."""
    rows: list[tuple[str, ...]] = [("phase", "", "round", "sluicegate jobs/s", "pgqueuer jobs/s",
                                    "sluicegate/pgqueuer")]  # fmt: skip
    for phase in dict.fromkeys(x.phase for x in runs):
        by = {(x.round, x.system): x.result.jobs_per_s for x in runs if x.phase == phase}
        ratios, sluice, peer = [], [], []
        for number in sorted({n for n, _s in by}):
            s, p = by.get((number, "sluicegate"), 0.0), by.get((number, "pgqueuer"), 0.0)
            ratio = s / p if p else 0.0
            sluice.append(s)
            peer.append(p)
            ratios.append(ratio)
            rows.append((phase, "", str(number), f"{s:,.0f}", f"{p:,.0f}", f"{ratio:.2f}x"))
        rows.append((phase, "", "median", f"{statistics.median(sluice):,.0f}",
                     f"{statistics.median(peer):,.0f}",
                     f"{statistics.median(ratios):.2f}x"))  # fmt: skip
    return throughput.align(rows, left=3)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--phases", default="batched,single", help="comma-separated: batched,single")
    p.add_argument("--quick", action="store_true", help="1 round of 2,000 + 200 jobs")
    p.add_argument("--jobs", type=int, default=None, help="batched jobs (default 20000)")
    p.add_argument("--single-jobs", type=int, default=None, help="one at a time (2000)")
    p.add_argument("--batch", type=int, default=100, help="jobs per enqueue batch and claim")
    p.add_argument("--window", type=int, default=8, help="enqueue batches in flight")
    p.add_argument(
        "--dequeue-batch",
        type=int,
        default=None,
        help="PgQueuer's batch_size in the batched phase (default: --batch)",
    )
    p.add_argument("--workers", type=int, default=2, help="batched worker processes")
    p.add_argument("--daemons", type=int, default=1,
                   help="Sluicegate daemons (clients spread over them)")  # fmt: skip
    p.add_argument("--clients", type=int, default=4, help="one-at-a-time client processes")
    p.add_argument("--stall-timeout", type=float, default=30.0, help="give up after N s idle")
    p.add_argument("--json", help="also write the runs as JSON to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds = 1
    if args.jobs is None:
        args.jobs = 2_000 if args.quick else 20_000
    if args.dequeue_batch is None:
        args.dequeue_batch = args.batch
    if args.single_jobs is None:
        args.single_jobs = 200 if args.quick else 2_000
    args.phases = [ph for ph in args.phases.split(",") if ph]
    if unknown := set(args.phases) - set(throughput.PHASES):
        p.error(f"unknown phase {sorted(unknown)[0]!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    """The rounds, the tables; 1 if any run of either system lost or failed a job."""
    args = parse_args(argv)
    if PgQueuer is None:
        print("pgqueuer is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    import pgqueuer

    command = shlex.join(sys.orig_argv)
    env = f"{throughput.environment()}, pgqueuer {pgqueuer.__version__}"
    print(f"command: {command}\n{env}", flush=True)
    http = lag_source("normal") == "metrics"
    runs: list[Run] = []
    for number in range(1, args.rounds + 1):
        runs += run_round(number, args, http)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{table(runs)}\n\n{summary(runs)}\n\nload average at the end: {load}")
    print(f"\nactive backends by wait event:\n{waits(runs)}")
    failed = [x for x in runs if not x.result.ok]
    for x in failed:
        print(f"FAILED {x.phase}/{x.system} round {x.round}: {'; '.join(x.result.problems)}")
    if args.json:
        doc = {"command": command, "environment": env, "load_end": load,
               "runs": [x.doc() for x in runs]}  # fmt: skip
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
