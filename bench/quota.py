"""Sluicegate quota benchmark: enqueue throughput with and without a quota in force.

Issue 4 asks for enqueue throughput with a quota document in force (depth,
rate and running limits set but never reached) within 1.2x of enqueue without
one, in the same run. One daemon (``synchronous = "normal"``) serves two
namespaces: ``free`` has no quota, ``capped`` has ``max_pending``,
``enqueue_rate`` and ``max_running`` far above what the run reaches. Phases
alternate between them (free, capped, free, capped, ...) so drift of this
shared machine hits both alike; each phase enqueues N jobs with ``enqueue_many``
batches (a window of requests in flight), and single ``enqueue`` calls.

Prints figures; asserts nothing about timing. Exit status 1 only if a job is
refused or lost.

    .venv/bin/python bench/quota.py [--jobs 100000] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

import orjson
from harness import BenchDaemon
from throughput import environment
from wire import WireClient

QUOTA = {"max_pending": 10**9, "enqueue_rate": "1000000000/s", "max_running": 10**6}
#: Issue 6: every door limit set, none reached (``--document door``).
DOOR = {
    "request_rate": {"capacity": 10**9, "refill_per_s": 10**9},
    "message_rate": {"capacity": 10**9, "refill_per_s": 10**9},
    "max_item_bytes": 1 << 20, "max_queues": 10**6, "max_retention_ms": 10**12,
    "max_waiting_claims": 10**6, "max_retained_bytes": 10**15, "monthly_jobs_quota": 10**12,
}  # fmt: skip


def batched(c: WireClient, namespace: str, jobs: int, batch: int, window: int) -> float:
    """Enqueue ``jobs`` in ``enqueue_many`` batches, ``window`` requests in flight; jobs/s."""
    body = [{"queue": "q", "type": "t", "payload": {"n": 1}}] * batch
    sent = done = 0
    start = time.perf_counter()
    while done < jobs:
        while sent < jobs and sent - done < window * batch:
            c.request("enqueue_many", namespace=namespace, jobs=body)
            sent += batch
        answer = c.read()
        if not answer.get("ok"):
            raise SystemExit(f"refused: {answer}")
        done += batch
    return jobs / (time.perf_counter() - start)


def single(c: WireClient, namespace: str, jobs: int, window: int) -> float:
    """Enqueue ``jobs`` one per ``enqueue``, ``window`` requests in flight; jobs/s."""
    sent = done = 0
    start = time.perf_counter()
    while done < jobs:
        while sent < jobs and sent - done < window:
            c.request("enqueue", namespace=namespace, queue="q", type="t")
            sent += 1
        answer = c.read()
        if not answer.get("ok"):
            raise SystemExit(f"refused: {answer}")
        done += 1
    return jobs / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per batched phase")
    parser.add_argument("--single-jobs", type=int, default=20_000, help="jobs per single phase")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of free/capped")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument(
        "--document", choices=("quota", "door"), default="quota",
        help="quota: depth, rate and running limits (issue 4); door: every door limit (issue 6)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    print("$", shlex.join([sys.executable, *sys.argv]))
    print("#", environment(), flush=True)
    figures: dict[str, dict[str, list[float]]] = {
        "batched": {"free": [], "capped": []},
        "single": {"free": [], "capped": []},
    }
    with BenchDaemon("normal") as daemon:
        daemon.start()
        with WireClient(daemon.socket) as c:
            c.ok("quota_set", namespace="capped", quota=QUOTA if args.document == "quota" else DOOR)
            for _ in range(args.rounds):
                for namespace in ("free", "capped"):
                    rate = batched(c, namespace, args.jobs, args.batch, 8)
                    figures["batched"][namespace].append(rate)
                    rate = single(c, namespace, args.single_jobs, 16)
                    figures["single"][namespace].append(rate)
                    print(f"  {namespace:7} batched {figures['batched'][namespace][-1]:9,.0f}"
                          f"  single {rate:8,.0f} jobs/s", flush=True)  # fmt: skip
            status = {q["queue"]: q for q in c.ok("status", namespace="capped")["queues"]}
            expected = args.rounds * (args.jobs + args.single_jobs)
            if status["q"]["pending"] != expected:
                print(f"PROBLEM: capped has {status['q']['pending']} pending, not {expected}")
                return 1
    print()
    print("| phase | no quota (best) | quota in force (best) | ratio |")
    print("|---|---|---|---|")
    summary: dict[str, Any] = {}
    for phase, runs in figures.items():
        free, capped = max(runs["free"]), max(runs["capped"])
        ratio = free / capped
        summary[phase] = {"free": runs["free"], "capped": runs["capped"], "ratio": ratio}
        print(f"| {phase} enqueue | {free:,.0f} jobs/s | {capped:,.0f} jobs/s | {ratio:.2f}x |")
    if args.json:
        with open(args.json, "wb") as out:
            out.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
