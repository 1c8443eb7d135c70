"""The verb path without sockets: what the throughput phases cost the daemon
when no byte crosses a socket.

One process runs a :class:`~daemon.core.Core` exactly as ``sluice serve``
builds it (``open_database`` with checkpoints on a thread, the group committer,
the actors), and Trio tasks call verbs through :func:`daemon.dispatch.dispatch`,
the HTTP transport's entry point: argument checks, the door, the verb's plan,
the group commit, the answer. Framing, the socket and the clients' processes
are left out, so the figures are a ceiling on what the socket phases of
``throughput.py`` can reach on the same machine, and the difference is what the
transport costs. The tasks' own work (building requests, encoding the claim
answers as the socket would) is in the CPU figure too.

    .venv/bin/python bench/inprocess.py [--phase single|batched|both] [--repeat 3]

Prints jobs/s and the process's CPU per job (µs); asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import trio

from actors.clock import Clock
from daemon.config import Config
from daemon.core import Core
from daemon.dispatch import dispatch
from daemon.store.checkpointer import Checkpointer
from daemon.store.opening import open_database

QUEUE = "bench"


async def _single(core: Core, jobs: int) -> None:
    session = core.auth.new_session()
    for i in range(jobs):
        await dispatch(core, session, "enqueue", {"queue": QUEUE, "type": "b", "payload": {"n": i}})
        claim = await dispatch(core, session, "claim_next", {"queues": [QUEUE], "max": 1})
        orjson.dumps(claim)
        job = claim["jobs"][0]["job"]
        await dispatch(core, session, "complete", {"job_id": job["id"], "lease": job["lease"]})


async def _producer(core: Core, jobs: int, batch: int) -> None:
    session = core.auth.new_session()
    for start in range(0, jobs, batch):
        items = [{"queue": QUEUE, "type": "b", "payload": {"n": start + i}} for i in range(batch)]
        orjson.dumps(await dispatch(core, session, "enqueue_many", {"jobs": items}))


async def _worker(core: Core, jobs: int, batch: int, done: list[int]) -> None:
    session = core.auth.new_session()
    args = {"queues": [QUEUE], "max": batch, "wait_ms": 200}
    while done[0] < jobs:
        claim = await dispatch(core, session, "claim_next", dict(args))
        orjson.dumps(claim)
        if claim["jobs"]:
            items = [{"job_id": j["job"]["id"], "lease": j["job"]["lease"]} for j in claim["jobs"]]
            orjson.dumps(await dispatch(core, session, "complete_many", {"jobs": items}))
            done[0] += len(items)


async def run_phase(phase: str, jobs: int, clients: int, batch: int) -> dict[str, Any]:
    """One phase on a fresh database; jobs/s, CPU µs per job, writes per commit."""
    with tempfile.TemporaryDirectory(prefix="sluice-inprocess-") as directory:
        path = Path(directory) / "sluicegate.db"
        db = open_database(path, "normal", autocheckpoint=False)
        try:
            core = Core(Config(), db, Clock())
            async with trio.open_nursery() as root:
                await root.start(core.run)
                checkpointer = Checkpointer(path)
                core.writer.after_commit.append(checkpointer.committed)
                await root.start(checkpointer.run)
                wall, cpu = time.perf_counter(), time.process_time()
                async with trio.open_nursery() as tasks:
                    if phase == "single":
                        for _ in range(clients):
                            tasks.start_soon(_single, core, jobs // clients)
                    else:
                        done = [0]
                        tasks.start_soon(_producer, core, jobs, batch)
                        for _ in range(2):
                            tasks.start_soon(_worker, core, jobs, batch, done)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                writer = core.writer
                root.cancel_scope.cancel()
        finally:
            db.conn.close()
    return {
        "phase": phase,
        "jobs_per_s": jobs / wall,
        "cpu_us_per_job": cpu / jobs * 1e6,
        "writes_per_commit": writer.writes / max(1, writer.commits),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the phases, print one line per run and the medians."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phase", choices=("single", "batched", "both"), default="both")
    p.add_argument("--single-jobs", type=int, default=20_000)
    p.add_argument("--jobs", type=int, default=100_000, help="batched jobs")
    p.add_argument("--clients", type=int, default=4, help="single: concurrent loops")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    phases = ("single", "batched") if args.phase == "both" else (args.phase,)
    print(f"python {sys.version.split()[0]}; in-process, no sockets; {' '.join(sys.argv)}")
    for phase in phases:
        jobs = args.single_jobs if phase == "single" else args.jobs
        runs = []
        for run in range(1, args.repeat + 1):
            r = trio.run(run_phase, phase, jobs, args.clients, args.batch)
            runs.append(r)
            print(f"{phase:<8} run {run}: {r['jobs_per_s']:8,.0f} jobs/s  "
                  f"{r['cpu_us_per_job']:6.1f} us CPU/job  "
                  f"{r['writes_per_commit']:.1f} writes/commit")  # fmt: skip
        rate = statistics.median(r["jobs_per_s"] for r in runs)
        cpu = statistics.median(r["cpu_us_per_job"] for r in runs)
        print(f"{phase:<8} median: {rate:8,.0f} jobs/s  {cpu:6.1f} us CPU/job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
