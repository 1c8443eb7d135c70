"""Sluicegate fairness benchmark: a round-robin claim's cost against the backlog.

Issue 18 asks that the claim not scan the backlog: with 1,000,000 pending jobs
in one group and 1,000 groups, ``claim_next`` p50/p99 within 1.3x of a queue
with 1,000 pending jobs and 10 groups, measured in the same run.

One daemon (``synchronous = "normal"``), two queues with
``fairness = "round_robin"``:

* ``big``: 1,000,000 pending jobs in group ``g0000`` and 100 in each of 999
  more groups (1,099,900 jobs, 1,000 groups);
* ``small``: 100 pending jobs in each of 10 groups (1,000 jobs), topped up
  after each of its phases with as many as were claimed.

The backlog is written straight into the daemon's SQLite file while it is
stopped (1.1 million enqueues over the socket would take minutes and measure
nothing of interest here); the daemon then starts on it, which rebuilds the
group rings from one grouped count each (its start-up time is printed).
After a warm-up (one turn of each of big's 1,000 groups and 1,000 claims of
small, not counted: the restart left the page cache cold), phases alternate
(big, small, big, small, ...) so drift of this shared machine hits both
alike; each phase is ``--claims`` rounds of ``claim_next
max=1`` then ``complete``, one request in flight. Prints the ``claim_next``
round trip's p50/p99 per queue (all rounds pooled) and big/small ratios.
Asserts nothing about timing; exit status 1 if a claim comes back empty.

    .venv/bin/python bench/fairness.py [--claims 1000] [--rounds 4] [--big 1000000]
"""

from __future__ import annotations

import argparse
import shlex
import sqlite3
import sys
import time

from harness import BenchDaemon
from policies import pct
from throughput import environment
from wire import WireClient, WireError

ROUND_ROBIN = {"fairness": "round_robin"}


def backlog(db: str, big: int, now_ms: int) -> int:
    """Write the two queues' pending jobs straight into the store; how many."""
    rows = [("big", "g0000", big)] + [("big", f"g{g:04d}", 100) for g in range(1, 1000)]
    rows += [("small", f"s{g}", 100) for g in range(10)]
    conn = sqlite3.connect(db)
    n = 0
    with conn:
        for queue, group, count in rows:
            conn.executemany(
                "INSERT INTO jobs (id, namespace, queue, type, payload, priority, state, "
                "attempts, max_attempts, lease_ms, ready_at, created_at, updated_at, grp) "
                "VALUES (?, 'default', ?, 't', '{}', 32768, 'pending', 0, 25, 60000, ?, ?, ?, ?)",
                ((f"00bench{n + i:012d}", queue, now_ms, now_ms, now_ms, group)
                 for i in range(count)),
            )  # fmt: skip
            n += count
    # Into the main file: a daemon reading through a WAL of a million rows
    # would measure the WAL, not the claim.
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return n


def phase(c: WireClient, queue: str, claims: int) -> list[float]:
    """``claims`` rounds of claim_next max=1 and complete: the claim round trips (s)."""
    latencies = []
    clock = time.perf_counter
    for _ in range(claims):
        t0 = clock()
        answer = c.call("claim_next", queues=[queue])
        latencies.append(clock() - t0)
        jobs = answer.get("jobs") or []
        if not answer.get("ok") or not jobs:
            raise WireError(f"claim_next {queue}: {answer}")
        job = jobs[0]["job"]
        c.ok("complete", job_id=job["id"], lease=job["lease"])
    return latencies


def top_up(c: WireClient, claims: int) -> None:
    """Put back into ``small`` as many jobs as a phase claimed, over its 10 groups."""
    jobs = [{"queue": "small", "type": "t", "group": f"s{i % 10}"} for i in range(claims)]
    for start in range(0, len(jobs), 1000):
        c.ok("enqueue_many", jobs=jobs[start : start + 1000])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, default=1000, help="claims per phase")
    parser.add_argument("--rounds", type=int, default=4, help="alternations")
    parser.add_argument("--big", type=int, default=1_000_000, help="jobs in big's group g0000")
    args = parser.parse_args(argv)
    print("$", shlex.join([sys.executable, *sys.argv]))
    print("#", environment(), flush=True)
    with BenchDaemon("normal", loop_probe=None) as daemon:
        daemon.start()
        with WireClient(daemon.socket) as c:
            for queue in ("big", "small"):
                c.ok("policy_set", queue=queue, **ROUND_ROBIN)
                c.ok("queue_configure", queue=queue)
        daemon.stop()
        t0 = time.perf_counter()
        n = backlog(str(daemon.state / "sluicegate.db"), args.big, int(time.time() * 1000))
        print(f"backlog: {n:,} jobs written in {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        daemon.start(timeout=600)
        print(f"start-up on it (group rings counted): {time.perf_counter() - t0:.1f} s")
        figures: dict[str, list[float]] = {"big": [], "small": []}
        with WireClient(daemon.socket) as c:
            # Warm-up, not counted: after the restart each group's index pages are
            # read once from the file (one turn of every group of big).
            phase(c, "big", 1000)
            phase(c, "small", 1000)
            top_up(c, 1000)
            for round_ in range(args.rounds):
                for queue in ("big", "small"):
                    lat = phase(c, queue, args.claims)
                    figures[queue] += lat
                    print(f"  round {round_ + 1} {queue:5} claim_next p50 {pct(lat, 0.5):.3f} ms"
                          f"  p99 {pct(lat, 0.99):.3f} ms", flush=True)  # fmt: skip
                    if queue == "small":
                        top_up(c, args.claims)
            groups = {q["queue"]: len(q["groups"]) for q in c.ok("admission_status")["queues"]}
    big, small = figures["big"], figures["small"]
    print()
    print(
        "| claim_next (max=1), all rounds | big: 1,000 groups, "
        f"{n - 1000:,} pending | small: 10 groups, 1,000 pending | big/small |"
    )
    print("|---|---|---|---|")
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        print(f"| {label} | {pct(big, q):.3f} ms | {pct(small, q):.3f} ms | "
              f"{pct(big, q) / pct(small, q):.2f}x |")  # fmt: skip
    print(f"# groups with work at the end: {groups}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
