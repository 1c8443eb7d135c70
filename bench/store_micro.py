"""Store micro-benchmark: the cost of the job life's SQL alone, on the daemon's schema.

No daemon, no Trio, no sockets: one connection opened with the daemon's own
``open_database`` (so the schema, indexes and pragmas are the daemon's), and
raw statements shaped like the hot paths, in transactions of ``--batch`` jobs:
insert, claim (select from the ready index, then update by id), complete.
Variants compare what the daemon could do differently:

* ``complete``: ``get+update`` (read the row, then update by id), ``guarded``
  (one ``UPDATE ... WHERE id AND namespace AND state AND lease``, no read),
  ``returning`` (the guarded update with ``RETURNING`` every column);
* ``--no-autocheckpoint``: ``PRAGMA wal_autocheckpoint = 0`` (what COMMIT costs
  when checkpoints are taken elsewhere, e.g. by a thread).

    .venv/bin/python bench/store_micro.py [--synchronous full] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.store.opening import open_database

COMPLETES = ("get+update", "guarded", "returning")
_GUARDED = (
    "UPDATE jobs SET state = 'completed', lease = NULL, lease_expires_at = NULL, "
    "updated_at = ?, finished_at = ?, result = ? "
    "WHERE id = ? AND namespace = ? AND state = 'running' AND lease = ?"
)
_BY_ID = (
    "UPDATE jobs SET state = 'completed', lease = NULL, lease_expires_at = NULL, "
    "updated_at = ?, finished_at = ?, result = ? WHERE id = ?"
)
_CLAIM = (
    "SELECT id, lease_ms FROM jobs INDEXED BY ix_jobs_ready WHERE namespace = ? AND queue = ? "
    "AND state = 'pending' AND parked_on IS NULL ORDER BY priority, ready_at, id LIMIT ?"
)
_MARK = (
    "UPDATE jobs SET state = 'running', attempts = attempts + 1, lease = ?, "
    "lease_expires_at = ?, updated_at = ? WHERE id = ?"
)


def _connect(directory: str, synchronous: str, autocheckpoint: bool) -> sqlite3.Connection:
    conn = open_database(Path(directory) / "db.sqlite", synchronous).conn
    if not autocheckpoint:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
    return conn


def _row(columns: list[str], n: int, now: int) -> tuple[object, ...]:
    values = {
        "id": f"{now:012x}{n:014x}", "namespace": "default", "queue": "bench", "type": "bench",
        "payload": f'{{"n":{n}}}', "priority": 32768, "state": "pending", "attempts": 0,
        "max_attempts": 25, "lease_ms": 60000, "ready_at": now, "created_at": now,
        "updated_at": now,
    }  # fmt: skip
    return tuple(values.get(c) for c in columns)


def _timed(conn: sqlite3.Connection, work: Callable[..., None], *args: Any) -> tuple[float, float]:
    """Run ``work(*args)`` in one transaction: (seconds in all, seconds in COMMIT)."""
    t0 = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    work(*args)
    c0 = time.perf_counter()
    conn.execute("COMMIT")
    t1 = time.perf_counter()
    return t1 - t0, t1 - c0


def _claim(conn: sqlite3.Connection, batch: int, now: int, claimed: list[str]) -> None:
    found = conn.execute(_CLAIM, ("default", "bench", batch)).fetchall()
    conn.executemany(_MARK, [("lease", now + ms, now, job_id) for job_id, ms in found])
    claimed += [job_id for job_id, _ms in found]


def _complete(conn: sqlite3.Connection, how: str, statement: str, now: int,
              claimed: list[str]) -> None:  # fmt: skip
    for job_id in claimed:
        if how == "get+update":
            conn.execute(statement, (job_id, "default")).fetchone()
            conn.execute(_BY_ID, (now, now, None, job_id))
        elif how == "guarded":
            conn.execute(_GUARDED, (now, now, None, job_id, "default", "lease"))
        else:
            conn.execute(statement, (now, now, None, job_id, "default", "lease")).fetchone()


def job_life(conn: sqlite3.Connection, jobs: int, batch: int, how: str) -> dict[str, float]:
    """Run ``jobs`` through insert, claim, complete; µs per job per step, COMMIT times."""
    columns = [r[1] for r in conn.execute("PRAGMA table_info(jobs)")]
    insert = f"INSERT INTO jobs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    if how == "get+update":
        statement = f"SELECT {', '.join(columns)} FROM jobs WHERE id = ? AND namespace = ?"
    else:
        statement = f"{_GUARDED} RETURNING {', '.join(columns)}"
    now = 1_700_000_000_000
    spent = {"insert": 0.0, "claim": 0.0, "complete": 0.0}
    commits: list[float] = []
    for start in range(0, jobs, batch):
        rows = [_row(columns, n, now) for n in range(start, min(start + batch, jobs))]
        claimed: list[str] = []
        steps = (
            ("insert", conn.executemany, (insert, rows)),
            ("claim", _claim, (conn, batch, now, claimed)),
            ("complete", _complete, (conn, how, statement, now, claimed)),
        )
        for step, work, args in steps:
            total, commit = _timed(conn, work, *args)
            spent[step] += total
            commits.append(commit)
        now += 1
    commits.sort()
    result = {step: s / jobs * 1e6 for step, s in spent.items()}
    result["jobs_per_s"] = jobs / sum(spent.values())
    result["commit_p50_ms"] = commits[len(commits) // 2] * 1000
    result["commit_p99_ms"] = commits[min(len(commits) - 1, int(len(commits) * 0.99))] * 1000
    result["commit_max_ms"] = commits[-1] * 1000
    return result


def main(argv: list[str] | None = None) -> int:
    """Print one line per variant and repetition."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--synchronous", choices=("normal", "full"), default="normal")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print(f"synchronous={args.synchronous}, {args.jobs} jobs, transactions of {args.batch}; "
          "us per job for each step")  # fmt: skip
    variants = [(c, True) for c in COMPLETES] + [("guarded", False)]
    for run in range(1, args.repeat + 1):
        for complete, autocheckpoint in variants:
            with tempfile.TemporaryDirectory(prefix="sluice-store-micro-") as directory:
                conn = _connect(directory, args.synchronous, autocheckpoint)
                r = job_life(conn, args.jobs, args.batch, complete)
                conn.close()
            label = complete + ("" if autocheckpoint else ", no autocheckpoint")
            print(f"run {run}  complete={label:<30} insert {r['insert']:5.1f}  "
                  f"claim {r['claim']:5.1f}  complete {r['complete']:5.1f}  "
                  f"=> {r['jobs_per_s']:7,.0f} jobs/s  COMMIT p50 {r['commit_p50_ms']:.2f} "
                  f"p99 {r['commit_p99_ms']:.2f} max {r['commit_max_ms']:.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
