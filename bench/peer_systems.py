"""The systems of ``bench/peers.py``: how each is started, fed, watched and checked.

One phase of one system (:func:`run_phase`): a fresh server (Sluicegate's
daemon, or a ``redis-server`` of our own), its two worker processes, one
producer process (multiprocessing ``spawn``) and a zeroed :class:`~peer_tally.Tally`.
The producer waits on a barrier until the workers are ready, then enqueues
every job; the phase ends when the tally shows every job run, or stalls.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import redis
from harness import BENCH_DIR, BenchDaemon, free_port
from peer_tally import QUEUE, Tally
from throughput import percentile, split

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
#: The tally lives in memory (tmpfs) so that no page writeback touches the disk.
TALLY_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
#: Jobs per ``enqueue_many`` in the ``bulk`` phase, producer tasks in ``tasks8``.
BATCH, TASKS = 100, 8
START_S = 60.0  # processes' start-up, the barrier
POLL_S = 0.01  # the parent's look at the tally
SETTLE_S = 10.0  # how long a system may take to show its own queue empty after the last job
_TICKS = os.sysconf("SC_CLK_TCK")


# -- processes and their CPU ------------------------------------------------------


def cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads); None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds of ``roots`` and all their descendants (worker commands fork)."""
    total, todo, seen = 0.0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen or (cpu := cpu_of(pid)) is None:
            continue
        seen.add(pid)
        total += cpu
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return total


def _end(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM a worker command, then SIGKILL its process group (its own session)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _join(procs: list[Any], timeout: float = 15.0) -> None:
    """Join multiprocessing children (after the stop event); terminate stragglers."""
    for proc in procs:
        proc.join(timeout)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)


class RedisServer:
    """``redis-server`` on a free 127.0.0.1 port: AOF with ``appendfsync everysec``,
    no RDB snapshots, its files in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = workdir / "redis.log"
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
             "--dir", str(workdir), "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + START_S
        while True:
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {self.log}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM (Redis fsyncs the AOF and exits) and wait."""
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the producer and Sluicegate's workers (their own processes) ---------------------


@dataclass
class Shared:
    """What the parent shares with the processes it spawns for one phase."""

    barrier: Any  # multiprocessing.Barrier: the parent, the producer, Sluicegate's workers
    stop: Any  # multiprocessing.Event: the phase is over (Sluicegate's workers stop)
    results: Any  # multiprocessing.Queue: the producer's ProducerReport


@dataclass
class ProducerReport:
    """What the producer did: its span (``perf_counter``) and errors."""

    first_send: float | None = None
    last_answer: float | None = None
    errors: list[str] = field(default_factory=list)


def produce(system: str, phase: str, env: dict[str, str], shared: Shared) -> None:
    """The producer process: connect, wait at the barrier, enqueue every job."""
    os.environ.update(env)  # before peer_tasks is imported: it builds the peer's app
    report = ProducerReport()

    def go() -> None:
        shared.barrier.wait(START_S)
        report.first_send = time.perf_counter()

    try:
        tally = Tally(Path(env["PEERS_TALLY"]))
        _sender(system, phase, tally)(go)
        report.last_answer = time.perf_counter()
    except Exception as exc:
        report.errors.append(f"producer: {exc!r}")
        if report.first_send is None:
            shared.barrier.abort()  # the parent would wait for it till START_S
    shared.results.put(report)


def _sender(system: str, phase: str, tally: Tally) -> Callable[[Callable[[], None]], None]:
    """The enqueue loop of ``system``'s ``phase``, connected and ready; it calls its
    argument (the barrier) right before the first send."""
    jobs = tally.jobs
    if system == "sluicegate":
        return _sluice_sender(phase, os.environ["PEERS_SOCKET"], tally)
    import peer_tasks

    if system == "dramatiq":
        peer_tasks.broker.client.ping()  # connect before the start
        send = peer_tasks.noop.send
    else:
        peer_tasks.huey.pending_count()  # connect (SQLite: open, WAL) before the start
        send = peer_tasks.noop

    def loop(go: Callable[[], None]) -> None:
        go()
        for n in range(jobs):
            tally.sent(n)
            send(n)

    return loop


def _sluice_sender(phase: str, socket: str, tally: Tally) -> Callable[[Callable[[], None]], None]:
    """Sluicegate's enqueue loops: the sync client one job at a time or 100 at a
    time, or 8 Trio tasks sharing one Trio client (its calls pipelined)."""
    import trio

    from daemon.client import Client, TrioClient, job_spec

    jobs = tally.jobs
    if phase == "tasks8":

        async def tasks(go: Callable[[], None]) -> None:
            async with TrioClient.connect(socket) as client:
                await trio.to_thread.run_sync(go)

                async def lane(count: int, first: int) -> None:
                    for n in range(first, first + count):
                        tally.sent(n)
                        await client.enqueue(QUEUE, "bench", {"n": n})

                async with trio.open_nursery() as nursery:
                    for count, first in split(jobs, TASKS):
                        nursery.start_soon(lane, count, first)

        return partial(trio.run, tasks)

    client = Client(socket)
    if phase == "bulk":
        batches = [(first, [job_spec(QUEUE, "bench", {"n": n})
                            for n in range(first, min(first + BATCH, jobs))])
                   for first in range(0, jobs, BATCH)]  # fmt: skip

        def bulk(go: Callable[[], None]) -> None:
            go()
            for first, batch in batches:
                tally.sent(first, len(batch))
                client.enqueue_many(batch)

        return bulk

    def single(go: Callable[[], None]) -> None:
        go()
        for n in range(jobs):
            tally.sent(n)
            client.enqueue(QUEUE, "bench", {"n": n})

    return single


def sluice_worker(socket: str, tally: str, concurrency: int, shared: Shared) -> None:
    """A Sluicegate worker process: the SDK's Trio ``Worker`` with a no-op handler."""
    os.environ["PEERS_TALLY"] = tally
    import trio
    from peer_tally import record

    from daemon.client import TrioClient, TrioJob, Worker

    async def noop(job: TrioJob) -> None:
        record(job.payload["n"])

    async def main() -> None:
        async with TrioClient.connect(socket) as client:
            worker = Worker(client, [QUEUE], noop, concurrency=concurrency)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                try:
                    await trio.to_thread.run_sync(shared.barrier.wait, START_S)
                except threading.BrokenBarrierError:
                    pass  # the producer failed; the parent says why and stops us
                await trio.to_thread.run_sync(shared.stop.wait)  # a thread waits, no polling
                worker.stop(grace=5)

    trio.run(main)


# -- the systems ----------------------------------------------------------------------


class System:
    """One system's server and workers for one phase (a fresh instance per phase)."""

    name = ""
    #: Processes besides the parent and the producer that wait at the barrier.
    parties = 0

    def __init__(self, workers: int, concurrency: int, threads: int) -> None:
        self.workers, self.concurrency, self.threads = workers, concurrency, threads
        self.env: dict[str, str] = {}

    def start(self, stack: ExitStack, workdir: Path, tally: Path, ctx: Any,
              shared: Shared) -> None:  # fmt: skip
        """Start the server and the workers; ``stack`` stops them."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True once every worker process is consuming."""
        return True

    def died(self) -> str | None:
        """What went wrong, if a worker or the server exited."""
        return None

    def server_cpu(self) -> float | None:
        """The server's CPU seconds so far (None: no server process)."""
        return None

    def worker_pids(self) -> list[int]:
        """The worker processes (their descendants are counted too)."""
        return []

    def leftovers(self, jobs: int) -> list[str]:
        """Problems in the system's own state once every job has run (waits a little
        for acknowledgements that trail the job body)."""
        deadline = time.monotonic() + SETTLE_S
        while (left := self._left(jobs)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return [f"left in {self.name}: {left}"] if left else []

    def _left(self, jobs: int) -> str:
        """What is still queued, running or dead ('' when nothing)."""
        return ""


class Sluicegate(System):
    """``sluice serve`` (harness.BenchDaemon, default config: ``synchronous = "normal"``,
    no loop probe) and worker processes each running the SDK's Trio ``Worker``."""

    name = "sluicegate"

    def __init__(self, workers: int, concurrency: int, threads: int) -> None:
        super().__init__(workers, concurrency, threads)
        self.parties = workers  # they wait at the barrier

    def start(self, stack: ExitStack, workdir: Path, tally: Path, ctx: Any,
              shared: Shared) -> None:  # fmt: skip
        self.daemon = stack.enter_context(BenchDaemon("normal", loop_probe=None))
        self.daemon.start()
        self.env = {"PEERS_SOCKET": str(self.daemon.socket), "PEERS_TALLY": str(tally)}
        self.procs = [ctx.Process(target=sluice_worker, daemon=True,
                                  args=(str(self.daemon.socket), str(tally), self.concurrency,
                                        shared))
                      for _ in range(self.workers)]  # fmt: skip
        for proc in self.procs:
            proc.start()
        stack.callback(_join, self.procs)

    def died(self) -> str | None:
        if self.daemon.proc is not None and self.daemon.proc.poll() is not None:
            return f"daemon exited {self.daemon.proc.returncode}"
        dead = [p.exitcode for p in self.procs if not p.is_alive()]
        return f"worker processes exited {dead}" if dead else None

    def server_cpu(self) -> float | None:
        return self.daemon.cpu_seconds()

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _left(self, jobs: int) -> str:
        rows = [q for q in self.daemon.status().get("queues", []) if q.get("queue") == QUEUE]
        counts = rows[0] if rows else {}
        left = {s: counts.get(s, 0) for s in ("scheduled", "pending", "running", "dead")}
        if counts.get("completed") == jobs and not any(left.values()):
            return ""
        return f"completed={counts.get('completed')} of {jobs}, " + ", ".join(
            f"{s}={n}" for s, n in left.items()
        )


class WorkerCommand(System):
    """A peer whose workers are its own command, in a session of its own."""

    ready_text = ""

    def command(self) -> list[str]:
        """The worker command line."""
        raise NotImplementedError

    def start(self, stack: ExitStack, workdir: Path, tally: Path, ctx: Any,
              shared: Shared) -> None:  # fmt: skip
        self.tally = tally
        self.server: RedisServer | None = None
        self.env = {"PEERS_SYSTEM": self.name, "PEERS_TALLY": str(tally)}
        if self.name in ("dramatiq", "huey-redis"):
            self.server = RedisServer(workdir)
            stack.callback(self.server.stop)
            self.env["PEERS_REDIS_URL"] = self.server.url
        else:
            self.env["PEERS_SQLITE"] = str(workdir / "huey.db")
        path = os.pathsep.join(filter(None, [str(BENCH_DIR), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, **self.env, "PYTHONPATH": path}
        self.log = workdir / f"{self.name}.log"
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=workdir,
                env=env,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, for _end
            )
        stack.callback(_end, self.proc)

    def died(self) -> str | None:
        if self.server is not None and self.server.proc.poll() is not None:
            return f"redis-server exited {self.server.proc.returncode}"
        if self.proc.poll() is None:
            return None
        tail = self.log.read_text(errors="replace")[-2000:]
        return f"{self.name} workers exited {self.proc.returncode}:\n{tail}"

    def server_cpu(self) -> float | None:
        return None if self.server is None else cpu_of(self.server.proc.pid)

    def worker_pids(self) -> list[int]:
        return [self.proc.pid]


class Dramatiq(WorkerCommand):
    """dramatiq's ``RedisBroker``; its CLI with ``--processes 2 --threads N``."""

    name = "dramatiq"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "dramatiq", "peer_tasks", "--path", str(BENCH_DIR),
                "--processes", str(self.workers), "--threads", str(self.threads)]  # fmt: skip

    def ready(self) -> bool:
        # The CLI's line once a worker process's consumer and worker threads run.
        return self.log.read_text().count("Worker process is ready for action.") >= self.workers

    def _left(self, jobs: int) -> str:
        assert self.server is not None
        # Queued or not yet acknowledged, delayed (retries), dead-lettered.
        keys = [f"dramatiq:{QUEUE}{s}.msgs" for s in ("", ".DQ", ".XQ")]
        sizes = {k: self.server.client.hlen(k) for k in keys}
        return ", ".join(f"{k}={n}" for k, n in sizes.items() if n)


class Huey(WorkerCommand):
    """``huey_consumer -w 2 -k process``: one consumer, two worker processes; ``-n``
    (no periodic tasks) and ``-q`` (no log line per task)."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "huey.bin.huey_consumer", "peer_tasks.huey",
                "-w", str(self.workers), "-k", "process", "-n", "-q"]  # fmt: skip

    def ready(self) -> bool:
        # peer_tasks' on_startup hook: a file per worker process about to loop.
        return len(list(self.tally.parent.glob(f"{self.tally.name}.ready-*"))) >= self.workers


class HueyRedis(Huey):
    """huey's ``RedisHuey`` (a blocking ``BRPOP`` per dequeue)."""

    name = "huey-redis"

    def _left(self, jobs: int) -> str:
        assert self.server is not None
        queued = self.server.client.llen(f"huey.redis.{QUEUE}")
        scheduled = self.server.client.zcard(f"huey.schedule.{QUEUE}")
        return f"queued={queued}, scheduled={scheduled}" if queued or scheduled else ""


class HueySqlite(Huey):
    """huey's ``SqliteHuey`` (WAL; workers poll, sleeping 0.1 s growing to 10 s when empty)."""

    name = "huey-sqlite"

    def _left(self, jobs: int) -> str:
        with sqlite3.connect(self.env["PEERS_SQLITE"]) as db:
            queued = db.execute("SELECT count(*) FROM task").fetchone()[0]
            scheduled = db.execute("SELECT count(*) FROM schedule").fetchone()[0]
        return f"queued={queued}, scheduled={scheduled}" if queued or scheduled else ""


class HueySqliteNormal(HueySqlite):
    """``SqliteHuey`` with ``synchronous = NORMAL`` (a storage subclass; opt-in)."""

    name = "huey-sqlite-normal"


SYSTEMS: dict[str, type[System]] = {
    s.name: s for s in (Sluicegate, Dramatiq, HueyRedis, HueySqlite, HueySqliteNormal)
}


# -- one phase ------------------------------------------------------------------------


@dataclass
class PhaseRun:
    """The figures of one system's phase in one round."""

    system: str
    phase: str
    round: int
    jobs: int
    #: Distinct jobs that ran; and how many of them ran more than once.
    completed: int = 0
    duplicates: int = 0
    #: First enqueue sent to the last job's first run, seconds.
    seconds: float = 0.0
    jobs_per_s: float = 0.0
    #: Jobs over the producer's own span (while the workers drain concurrently).
    enqueue_per_s: float | None = None
    #: Enqueue sent to the job's first run, over all jobs.
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    #: CPU per job: the server (daemon, redis-server; None for huey on SQLite), the
    #: producer, the worker processes with their children.
    server_us_per_job: float | None = None
    producer_us_per_job: float | None = None
    workers_us_per_job: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every job ran and nothing went wrong."""
        return not self.problems

    @property
    def total_us_per_job(self) -> float | None:
        """The whole system's CPU per job: server, producer and workers."""
        if self.producer_us_per_job is None or self.workers_us_per_job is None:
            return None
        return (self.server_us_per_job or 0.0) + self.producer_us_per_job + self.workers_us_per_job


def run_phase(system_name: str, phase: str, number: int, args: Any) -> PhaseRun:
    """One phase of one system on fresh state; the figures, problems included."""
    ctx = mp.get_context("spawn")
    run = PhaseRun(system_name, phase, number, args.jobs)
    system = SYSTEMS[system_name](args.workers, args.concurrency, args.dramatiq_threads)
    workdir = Path(tempfile.mkdtemp(prefix="peers-"))  # huey's SQLite file, redis' AOF
    tally_path = TALLY_DIR / f"{workdir.name}.tally"
    tally = Tally.create(tally_path, args.jobs)
    try:
        with ExitStack() as stack:
            shared = Shared(ctx.Barrier(2 + system.parties), ctx.Event(), ctx.Queue())
            system.start(stack, workdir, tally_path, ctx, shared)
            producer = ctx.Process(target=produce, args=(system_name, phase, system.env, shared),
                                   daemon=True)  # fmt: skip
            producer.start()
            stack.callback(_join, [producer])
            stack.callback(shared.stop.set)  # first out: the workers stop, then the servers
            report, cpu = _start_and_watch(system, producer, shared, tally, args.stall_timeout,
                                           run)  # fmt: skip
            _figures(run, tally, report, cpu)
            if run.ok:
                run.problems += system.leftovers(args.jobs)
    except Exception as exc:
        run.problems.append(f"{exc!r}")
    finally:
        tally.close()
        for path in [tally_path, *TALLY_DIR.glob(f"{tally_path.name}.ready-*")]:
            path.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return run


@dataclass
class Cpu:
    """CPU seconds used so far: the server's (None: there is none), the producer's,
    the workers' (with their descendants)."""

    server: float | None
    producer: float
    workers: float

    @classmethod
    def read(cls, system: System, producer: int) -> Cpu:
        """Now."""
        return cls(system.server_cpu(), tree_cpu([producer]), tree_cpu(system.worker_pids()))


def _start_and_watch(
    system: System, producer: Any, shared: Shared, tally: Tally, stall_s: float, run: PhaseRun
) -> tuple[ProducerReport | None, tuple[Cpu, Cpu] | None]:
    """Wait for the workers, release the barrier, watch the tally until every job
    ran; CPU is read just before the start and once the last job ran."""
    deadline = time.monotonic() + START_S
    # Everyone else waits at the barrier (the producer connected, Sluicegate's workers
    # claiming) and the peers' workers consume: CPU from here on is the run's.
    while not system.ready() or shared.barrier.n_waiting < shared.barrier.parties - 1:
        if shared.barrier.broken:
            break  # the producer failed before it: its report says why
        if (problem := system.died()) or time.monotonic() > deadline:
            run.problems.append(problem or "the workers did not get ready")
            return None, None
        time.sleep(0.02)
    cpu = Cpu.read(system, producer.pid)
    try:
        shared.barrier.wait(START_S)
    except threading.BrokenBarrierError:
        run.problems.append("a process did not reach the start barrier")
        try:
            return shared.results.get(timeout=5), None  # the producer's errors
        except queue.Empty:
            return None, None
    report: ProducerReport | None = None
    last_done, last_change = -1, time.monotonic()
    while True:
        if report is None:
            try:
                report = shared.results.get(timeout=POLL_S)
            except queue.Empty:
                pass
        else:
            time.sleep(POLL_S)
        done = tally.done()
        if report is not None and (report.errors or done >= tally.jobs):
            break
        if done != last_done:
            last_done, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > stall_s:
            run.problems.append(f"no progress for {stall_s:.0f} s at {done} of {tally.jobs}")
            break
        if problem := system.died():
            run.problems.append(problem)
            break
        if report is None and not producer.is_alive() and shared.results.empty():
            run.problems.append(f"the producer exited {producer.exitcode}")
            break
    return report, (cpu, Cpu.read(system, producer.pid))


def _figures(
    run: PhaseRun, tally: Tally, report: ProducerReport | None, cpu: tuple[Cpu, Cpu] | None
) -> None:
    """Throughput, latency, CPU, loss and duplicates from the tally and the producer."""
    counts = tally.counts()
    run.completed = tally.jobs - counts.count(0)
    run.duplicates = sum(1 for c in counts if c > 1)
    if run.completed < tally.jobs:
        run.problems.append(f"{tally.jobs - run.completed} of {tally.jobs} jobs never ran")
    if report is not None:
        run.problems += report.errors
    if report is None or report.first_send is None or not run.completed:
        return
    sent, ran = tally.times()
    run.seconds = max(ran) - report.first_send
    run.jobs_per_s = run.completed / run.seconds if run.seconds > 0 else 0.0
    if report.last_answer is not None and report.last_answer > report.first_send:
        run.enqueue_per_s = tally.jobs / (report.last_answer - report.first_send)
    latencies = [r - s for s, r in zip(sent, ran, strict=True) if r]
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    run.latency_p50_ms = None if p50 is None else p50 * 1000
    run.latency_p99_ms = None if p99 is None else p99 * 1000
    if cpu is not None:
        (start, end), per_job = cpu, 1e6 / run.completed
        if start.server is not None and end.server is not None:
            run.server_us_per_job = (end.server - start.server) * per_job
        run.producer_us_per_job = (end.producer - start.producer) * per_job
        run.workers_us_per_job = (end.workers - start.workers) * per_job
