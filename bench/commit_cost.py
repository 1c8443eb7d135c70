"""What one SQLite commit costs the daemon's store, by how many jobs it carries.

No daemon, no Trio, no sockets: the daemon's own ``open_database`` (schema,
indexes, pragmas, the checkpointer's ``wal_autocheckpoint = 0``) in the mode
``sluice serve`` runs SQLite in (``daemon.store.sqlite_mode``), and in each
transaction what an enqueue commits: ``BEGIN IMMEDIATE``, the rows through
``daemon.store.jobs.insert``, the usage meter's upsert
(``daemon.store.usage.meter``), ``COMMIT``. CPU time of the process (the
kernel's WAL writes included), per commit and per job, for ``--sizes`` jobs a
commit. It separates SQLite's own fixed cost of a commit from the rest of
the daemon's per-request cost (docs/performance.md, "What a commit costs").

    .venv/bin/python bench/commit_cost.py [--sizes 1,8,100] [--commits 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from daemon.store import jobs, usage
from daemon.store.opening import open_database
from daemon.store.rows import JobRow
from daemon.store.sqlite_mode import use_multithread_mode


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,8,100", help="jobs per commit, comma-separated")
    p.add_argument("--commits", type=int, default=2000, help="commits per run (a tenth at 100+)")
    p.add_argument("--repeat", type=int, default=5, help="runs per size; the median is shown")
    p.add_argument("--synchronous", choices=("normal", "full"), default="normal")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Print the CPU per commit and per job for each size."""
    args = parse_args(argv)
    mode = "multi-thread" if use_multithread_mode() else "serialized"
    with tempfile.TemporaryDirectory(prefix="sluice-commit-") as tmp:
        conn = open_database(Path(tmp) / "bench.db", args.synchronous, autocheckpoint=False).conn
        print(
            f"sqlite {mode}, synchronous={args.synchronous}; CPU of the process (time.process_time)"
        )
        made = 0
        for size in (int(s) for s in args.sizes.split(",")):
            commits = max(10, args.commits // 10 if size >= 100 else args.commits)
            runs = []
            for _ in range(args.repeat):
                started = time.process_time()
                for _ in range(commits):
                    rows = [JobRow(f"06h{made + i:023d}", "default", "q", "t", '{"n":1}', 32768,
                                   "pending", 0, 25, 60_000, made, made, made, None, None, None,
                                   None, None, None, None, None, None, None)
                            for i in range(size)]  # fmt: skip
                    made += size
                    conn.execute("BEGIN IMMEDIATE")
                    jobs.insert(conn, rows)
                    usage.meter(conn, [("default", made // 60_000, size)])
                    conn.execute("COMMIT")
                runs.append((time.process_time() - started) / commits * 1e6)
            per_commit = statistics.median(runs)
            print(f"{size:5} jobs a commit: {per_commit:8.1f} µs a commit, "
                  f"{per_commit / size:6.1f} µs a job (runs: "
                  f"{', '.join(f'{r:.1f}' for r in runs)})")  # fmt: skip
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
