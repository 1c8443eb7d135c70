"""Sluicegate queue policy benchmark: the claim path with a policy in force, and without.

Issue 5 asks that a queue with an admission policy (limits never reached)
claims within 1.3x of a queue without one, and that a queue without a policy
claims as fast as before policies existed (seed 002 REQ-1: "no policy, no
change").

Part 1, one daemon (``synchronous = "normal"``): queue ``plain`` has no
policy; queue ``capped`` has ``max_in_flight`` 10,000 and
``max_claims_per_window`` 1,000,000 per day in America/Los_Angeles, far above
what the run reaches. Phases alternate (plain, capped, plain, capped, ...) so
drift of this shared machine hits both alike. Each phase enqueues its jobs
first (``enqueue_many`` of 100, not timed), then drains them:

* ``single``: ``claim_next max=1``, then ``complete``, one request in flight;
* ``batch``: ``claim_next max=100``, then the 100 ``complete`` pipelined.

It reports claims/s (the drain: claimed and completed per second) and the
``claim_next`` round trip's p50/p99, and the capped/plain ratio of each.

Part 2: the same ``plain`` phases against a daemon run from a snapshot of
commit ``b081e5e`` (before policies; ``git archive`` into a temp dir, as
``bench/throughput.py --source`` takes), alternating with a fresh daemon of
the current tree, so plain-now and plain-before are measured side by side.

Prints figures; asserts nothing about timing. Exit status 1 only if a job is
lost or a call refused.

    .venv/bin/python bench/policies.py [--single-jobs 5000] [--batch-jobs 20000]
        [--rounds 3] [--before b081e5e | --before-source DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from harness import ROOT, BenchDaemon
from throughput import environment
from wire import WireClient, WireError

POLICY = {
    "max_in_flight": 10_000,
    "max_claims_per_window": 1_000_000,
    "window": {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"},
}
BATCH = 100


def fill(c: WireClient, queue: str, jobs: int) -> None:
    """Enqueue ``jobs`` into ``queue`` (8 batches in flight); not timed."""
    body = [{"queue": queue, "type": "t", "payload": {"n": 1}}] * BATCH
    sent = done = 0
    while done < jobs:
        while sent < jobs and sent - done < 8 * BATCH:
            c.request("enqueue_many", jobs=body[: min(BATCH, jobs - sent)])
            sent += min(BATCH, jobs - sent)
        answer = c.read()
        if not answer.get("ok"):
            raise WireError(f"enqueue refused: {answer}")
        done += len(answer["results"])


def drain(c: WireClient, queue: str, jobs: int, per_claim: int) -> tuple[float, list[float]]:
    """Claim and complete ``jobs``, ``per_claim`` per ``claim_next``: (claims/s, latencies s)."""
    latencies: list[float] = []
    done = 0
    clock = time.perf_counter
    start = clock()
    while done < jobs:
        t0 = clock()
        answer = c.call("claim_next", queues=[queue], max=per_claim)
        latencies.append(clock() - t0)
        got = answer.get("jobs") or []
        if not answer.get("ok") or not got:
            raise WireError(f"claim_next: {answer}")
        ids = c.request_many(
            ("complete", {"job_id": j["job"]["id"], "lease": j["job"]["lease"]}) for j in got
        )
        for _ in ids:
            if not c.read().get("ok"):
                raise WireError("complete refused")
        done += len(got)
    return jobs / (clock() - start), latencies


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) in ms, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


Figures = dict[str, dict[str, list[dict[str, float]]]]


def phase(c: WireClient, queue: str, args: argparse.Namespace, label: str, out: Figures) -> None:
    """One phase of each kind on ``queue``; figures appended under ``label``."""
    for kind, jobs, per_claim in (("single", args.single_jobs, 1),
                                  ("batch", args.batch_jobs, BATCH)):  # fmt: skip
        fill(c, queue, jobs)
        rate, lat = drain(c, queue, jobs, per_claim)
        row = {"claims_s": rate, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
               "mean_ms": statistics.fmean(lat) * 1000}  # fmt: skip
        out.setdefault(kind, {}).setdefault(label, []).append(row)
        print(f"  {label:12} {kind:6} {rate:9,.0f} claims/s  claim_next p50 {row['p50_ms']:.3f} ms"
              f"  p99 {row['p99_ms']:.3f} ms", flush=True)  # fmt: skip


def best(rows: list[dict[str, float]]) -> dict[str, float]:
    """The best of the rounds (the least disturbed): highest rate, lowest percentiles."""
    return {"claims_s": max(r["claims_s"] for r in rows),
            "p50_ms": min(r["p50_ms"] for r in rows),
            "p99_ms": min(r["p99_ms"] for r in rows)}  # fmt: skip


def table(figures: Figures, left: str, right: str, title: str) -> list[str]:
    lines = [f"| {title} | {left} (best) | {right} (best) | time ratio {right}/{left} |",
             "|---|---|---|---|"]  # fmt: skip
    for kind in ("single", "batch"):
        a, b = best(figures[kind][left]), best(figures[kind][right])
        lines.append(f"| {kind} claims/s | {a['claims_s']:,.0f} | {b['claims_s']:,.0f} | "
                     f"{a['claims_s'] / b['claims_s']:.2f}x |")  # fmt: skip
        for p in ("p50_ms", "p99_ms"):
            lines.append(f"| {kind} claim_next {p[:3]} | {a[p]:.3f} ms | {b[p]:.3f} ms | "
                         f"{b[p] / a[p]:.2f}x |")  # fmt: skip
    return lines


def snapshot(rev: str) -> Path:
    """``git archive <rev> daemon actors`` into a temp dir (as bench/README.md says)."""
    out = Path(tempfile.mkdtemp(prefix=f"sluice-snap-{rev}-"))
    archive = subprocess.run(["git", "archive", rev, "daemon", "actors"], cwd=ROOT,
                             capture_output=True, check=True)  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--single-jobs", type=int, default=5_000, help="jobs per single phase")
    parser.add_argument("--batch-jobs", type=int, default=20_000, help="jobs per batch phase")
    parser.add_argument("--rounds", type=int, default=3, help="alternations per part")
    parser.add_argument("--before", default="b081e5e", help="the pre-policy commit")
    parser.add_argument("--before-source", type=Path, help="an existing snapshot instead")
    parser.add_argument("--skip-before", action="store_true", help="part 1 only")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    print("$", shlex.join([sys.executable, *sys.argv]))
    print("#", environment(), flush=True)
    figures: Figures = {}
    loads: list[str] = []

    print("part 1: one daemon, plain and capped alternating")
    with BenchDaemon("normal", loop_probe=None) as daemon:
        daemon.start()
        with WireClient(daemon.socket) as c:
            c.ok("policy_set", queue="capped", **POLICY)
            for _ in range(args.rounds):
                for queue in ("plain", "capped"):
                    phase(c, queue, args, queue, figures)
            status = c.ok("admission_status", queue="capped")["queues"][0]
            expected = args.rounds * (args.single_jobs + args.batch_jobs)
            if status["used"] != expected or status["status"]["state"] != "admitted":
                print(f"PROBLEM: capped used {status['used']}, expected {expected}: {status}")
                return 1
    loads.append(f"after part 1: {_load()}")

    if not args.skip_before:
        source = args.before_source or snapshot(args.before)
        print(f"part 2: plain on the current tree and on {args.before} ({source}), alternating")
        with BenchDaemon("normal", loop_probe=None) as now, \
                BenchDaemon("normal", loop_probe=None, source=source) as before:  # fmt: skip
            now.start()
            before.start()
            with WireClient(now.socket) as cn, WireClient(before.socket) as cb:
                for _ in range(args.rounds):
                    phase(cn, "plain", args, "plain-now", figures)
                    phase(cb, "plain", args, "plain-before", figures)
        loads.append(f"after part 2: {_load()}")

    print()
    print("\n".join(table(figures, "plain", "capped", "policy cost")))
    if not args.skip_before:
        print()
        print("\n".join(table(figures, "plain-before", "plain-now", "no-policy cost")))
    print()
    print("# load average " + "; ".join(loads))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    return 0


def _load() -> str:
    import os

    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
