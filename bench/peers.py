"""Sluicegate beside its Python peers, dramatiq and huey: issue 16's acceptance benchmark.

Interleaved rounds in one command: each round runs every (system, phase) once,
each on fresh state, in an order that shifts from round to round so that the
machine's drift favours nobody. No-op jobs, ``--jobs`` (20,000) per phase, two
worker processes and one producer process per system:

* ``sluicegate``: a real ``sluice serve`` (``harness.BenchDaemon``, default
  config: SQLite, ``synchronous = "normal"``); 2 processes each running the
  SDK's Trio ``Worker`` (concurrency 100). Phases: ``single`` (the sync
  ``Client.enqueue``, one job at a time), ``bulk`` (``enqueue_many`` of 100),
  ``tasks8`` (8 Trio tasks enqueueing one job at a time each through one
  shared ``TrioClient``, which pipelines them on its connection).
* ``dramatiq``: ``RedisBroker``; ``dramatiq peer_tasks --processes 2 --threads
  8`` (its default threads; ``--dramatiq-threads``); the producer calls
  ``actor.send()`` per job.
* ``huey-redis``: ``RedisHuey``; one ``huey_consumer -w 2 -k process -n -q``
  (two worker processes); the producer calls the task per job.
* ``huey-sqlite``: ``SqliteHuey`` in the phase's temp dir, the same consumer.
  huey exposes no ``synchronous = NORMAL`` (``fsync=True`` is FULL, ``False``
  OFF); left at ``None`` it is SQLite's default, FULL in WAL: an fsync per
  enqueue and per dequeue. ``--systems ...,huey-sqlite-normal`` adds the same
  with NORMAL (a storage subclass), like for like with Sluicegate's default.

The peers run ``single`` only: neither has a bulk enqueue (dramatiq's
``group().run()`` and huey's ``map()`` send one message per round trip), so
their ``bulk`` cells print a dash. Each phase gets its own ``redis-server``
(127.0.0.1, a free port, ``--appendonly yes --appendfsync everysec --save ''``).

Completion is counted the same way for all: every job body is one call that
marks the job in a shared memory-mapped tally (bench/peer_tasks.py); no
result store is used. Jobs/s = jobs / (first enqueue sent -> last job's first
run). A phase in which a job never ran, or that made no progress for
``--stall-timeout`` seconds, or whose system still holds a job afterwards,
makes the run exit 1.

    .venv/bin/python bench/peers.py [--rounds 3] [--jobs 20000] [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

import orjson
from peer_systems import REDIS_SERVER, PhaseRun, run_phase
from throughput import align, environment

#: Every (system, phase) a round can run, in the first round's order; the last
#: system runs only when ``--systems`` names it.
UNITS = (("sluicegate", "single"), ("sluicegate", "bulk"), ("sluicegate", "tasks8"),
         ("dramatiq", "single"), ("huey-redis", "single"), ("huey-sqlite", "single"),
         ("huey-sqlite-normal", "single"))  # fmt: skip
DEFAULT_SYSTEMS = ("sluicegate", "dramatiq", "huey-redis", "huey-sqlite")
PEERS = ("dramatiq", "huey-redis", "huey-sqlite", "huey-sqlite-normal")
#: Why a peer has no bulk figure (its row in the summary says so).
NO_BULK = {
    "dramatiq": "no bulk enqueue: group().run() sends each message on its own",
    "huey": "no bulk enqueue: map() and groups call enqueue once per task",
}
DASH = "\N{EN DASH}"  # a cell with no figure: the system has no such API
LABELS = {"sluicegate": "sluicegate", "dramatiq": "dramatiq/redis", "huey-redis": "huey/redis",
          "huey-sqlite": "huey/sqlite", "huey-sqlite-normal": "huey/sqlite NORMAL"}  # fmt: skip


def order(number: int, units: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Round ``number``'s order: ``units`` rotated by two more each round, and
    reversed every other round, so that no unit keeps its place or its neighbour
    (rotating by one and reversing would keep the first unit first in round 2)."""
    k = 2 * (number - 1) % len(units)
    turned = units[k:] + units[:k]
    return turned if number % 2 else turned[::-1]


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _int(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def runs_table(runs: list[PhaseRun]) -> str:
    """Every run, in the order they ran."""
    rows = [("round", "system", "phase", "jobs ran", "dup", "seconds", "jobs/s", "enqueue/s",
             "latency p50/p99 ms", "server us/job", "producer us/job", "workers us/job",
             "ok")]  # fmt: skip
    for x in runs:
        rows.append((
            str(x.round), LABELS[x.system], x.phase, f"{x.completed}/{x.jobs}",
            str(x.duplicates), f"{x.seconds:.2f}", _int(x.jobs_per_s), _int(x.enqueue_per_s),
            f"{_ms(x.latency_p50_ms)} / {_ms(x.latency_p99_ms)}", _int(x.server_us_per_job),
            _int(x.producer_us_per_job), _int(x.workers_us_per_job), "yes" if x.ok else "NO",
        ))  # fmt: skip
    return align(rows, left=3)


def _median(runs: list[PhaseRun], get: Callable[[PhaseRun], float | None],
            fmt: Callable[[float | None], str] = _int, spread: bool = False) -> str:  # fmt: skip
    """The median of ``get`` over ``runs``, with (min-max) when ``spread``."""
    values = [v for x in runs if (v := get(x)) is not None]
    if not values:
        return "-"
    text = fmt(statistics.median(values))
    return f"{text} ({fmt(min(values))}-{fmt(max(values))})" if spread else text


def summary(runs: list[PhaseRun]) -> str:
    """Per system and phase: medians over the rounds, ranges (min-max) for jobs/s and CPU."""
    rows = [("system", "phase", "runs", "jobs/s median (min-max)", "enqueue/s",
             "latency p50/p99 ms", "server us/job (min-max)", "producer us/job",
             "workers us/job", "total us/job", "dup", "ok")]  # fmt: skip
    notes: list[str] = []
    ran = {x.system for x in runs}
    units = [u for u in UNITS if u[0] == "sluicegate" and u[0] in ran]
    units += [(peer, phase) for peer in PEERS if peer in ran for phase in ("single", "bulk")]
    for system, phase in units:
        if phase == "bulk" and system != "sluicegate":
            note = NO_BULK[system.split("-")[0]]
            if note not in notes:
                notes.append(note)
            mark = f"{DASH} ({notes.index(note) + 1})"
            rows.append((LABELS[system], phase, "0", mark, *[DASH] * 8))
            continue
        mine = [x for x in runs if (x.system, x.phase) == (system, phase)]
        if not mine:
            continue
        ok = sum(x.ok for x in mine)
        rows.append((
            LABELS[system], phase, str(len(mine)),
            _median(mine, lambda x: x.jobs_per_s, spread=True),
            _median(mine, lambda x: x.enqueue_per_s),
            f"{_median(mine, lambda x: x.latency_p50_ms, _ms)} / "
            f"{_median(mine, lambda x: x.latency_p99_ms, _ms)}",
            _median(mine, lambda x: x.server_us_per_job, spread=True),
            _median(mine, lambda x: x.producer_us_per_job),
            _median(mine, lambda x: x.workers_us_per_job),
            _median(mine, lambda x: x.total_us_per_job),
            str(sum(x.duplicates for x in mine)), f"{ok}/{len(mine)}",
        ))  # fmt: skip
    lines = [f"({i}) {note}" for i, note in enumerate(notes, start=1)]
    return "\n".join([align(rows, left=2), *lines])


def versions() -> str:
    """The peers' versions and the Redis server's."""
    try:
        server = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True,
                                check=False).stdout.split()  # fmt: skip
        redis_server = next((w.split("=", 1)[1] for w in server if w.startswith("v=")), "?")
    except OSError:
        redis_server = "missing"
    libs = ", ".join(f"{name} {version(name)}" for name in ("dramatiq", "huey", "redis"))
    return f"{libs} (redis-py), redis-server {redis_server}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--jobs", type=int, default=None, help="jobs per phase (default 20000)")
    p.add_argument("--quick", action="store_true", help="1 round of 2,000 jobs (smoke test)")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help="comma-separated (%(default)s; also huey-sqlite-normal)")  # fmt: skip
    p.add_argument("--workers", type=int, default=2, help="worker processes per system")
    p.add_argument("--concurrency", type=int, default=100, help="Sluicegate Worker concurrency")
    p.add_argument("--dramatiq-threads", type=int, default=8,
                   help="threads per dramatiq worker process (its default: 8)")  # fmt: skip
    p.add_argument("--stall-timeout", type=float, default=30.0, help="give up after N s idle")
    p.add_argument("--json", help="also write every run as JSON to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds = 1
    if args.jobs is None:
        args.jobs = 2_000 if args.quick else 20_000
    args.systems = set(args.systems.split(","))
    if unknown := args.systems - {s for s, _p in UNITS}:
        p.error(f"unknown system {sorted(unknown)[0]!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    """The rounds, the tables; 1 if any phase lost a job, stalled or failed."""
    args = parse_args(argv)
    command = shlex.join(sys.orig_argv)
    env = f"{environment()}, {versions()}"
    setup = (f"{args.jobs:,} no-op jobs per phase, {args.workers} worker processes, "
             f"1 producer process; sluicegate: Worker concurrency {args.concurrency}; "
             f"dramatiq: {args.dramatiq_threads} threads per process; "
             f"huey: 1 consumer, {args.workers} process workers")  # fmt: skip
    print(f"command: {command}\n{env}\n{setup}", flush=True)
    runs: list[PhaseRun] = []
    units = [u for u in UNITS if u[0] in args.systems]
    for number in range(1, args.rounds + 1):
        for system, phase in order(number, units):
            x = run_phase(system, phase, number, args)
            runs.append(x)
            print(f"  round {number} {LABELS[system]} {phase}: {x.jobs_per_s:,.0f} jobs/s"
                  f"{'' if x.ok else ' FAILED: ' + '; '.join(x.problems)}",
                  file=sys.stderr, flush=True)  # fmt: skip
    load_end = _load()
    print(f"\n{runs_table(runs)}\n\n{summary(runs)}\n\nload average at the end: {load_end}")
    failed = [x for x in runs if not x.ok]
    for x in failed:
        print(f"FAILED round {x.round} {LABELS[x.system]} {x.phase}: {'; '.join(x.problems)}")
    if args.json:
        doc = {"command": command, "environment": env, "setup": setup, "load_end": load_end,
               "runs": [{**asdict(x), "total_us_per_job": x.total_us_per_job}
                        for x in runs]}  # fmt: skip
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
