"""Soak: mixed load on a real ``sluice serve`` for N minutes, with kill -9s (issue 17, part 7).

Producers enqueue (three queues: plain, bound to a budget, under a windowed
queue policy), workers claim, complete and fail (one job in ten fails its
first attempt), and every ``--kill-every`` seconds the daemon is SIGKILLed
and restarted on the same state directory (bench/soak_load.py). Every
``--sample-every`` seconds the daemon's RSS, open file descriptors
(``/proc/PID/fd``), the ``-wal`` file's size and the p99 of claim calls (no
waiting: the daemon's time) are sampled. At the end the producers stop, the
workers drain, and the checker's counts are printed: every acknowledged job
must complete (lost 0; a ``complete`` a kill cut off before its answer counts
when the daemon's ``get`` says the job completed), nothing unsent may be
delivered (unexpected 0), and a second delivery of a job not failed in
between is a duplicate, explained when a kill fell between the two. A table
of samples is printed and a PNG plotted.

Drift: RSS and fds are compared between the first and the last tenth of the
run, each leaving out the first 30 s of a daemon's life (start-up and the
restart's warm-up), as a percentage of the first.

    .venv/bin/python bench/soak.py --minutes 30 --kill-every 300 --plot docs/soak.png

Exit status 1 when lost, unexpected or unexplained duplicates are not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness import BenchDaemon
from soak_load import Ledger, producer, setup, worker
from wire import WireClient

#: Samples this soon after a (re)start are left out of the drift.
WARMUP_S = 30.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _p99(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.quantiles(values, n=100, method="inclusive")[98]


class Soak:
    """The daemon, the clients, the sampler and the killer of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # Completed jobs expire quickly, so the jobs table holds a steady state
        # and retention's sweep is part of the load.
        extra = (f'lease = "{args.lease}"\n\n[retention]\n'
                 f'completed_ttl = "{args.completed_ttl}"\ninterval = "10s"\n')  # fmt: skip
        self.daemon = BenchDaemon(args.synchronous, keep=args.keep, extra_config=extra)
        self.ledger = Ledger()
        self.samples: list[dict[str, Any]] = []
        self.kills: list[float] = []
        self.started_at = 0.0
        self.life_began = 0.0
        self.restart_s: list[float] = []

    def _now(self) -> float:
        return time.monotonic() - self.started_at

    def sample(self) -> None:
        """One row: RSS, fds, WAL, p99 of the claims since the last row, counts."""
        pid = self.daemon.pid
        with self.ledger.lock:
            latencies, self.ledger.latencies = self.ledger.latencies, []
            completed = len(self.ledger.completed)
        try:
            rss, fds = _rss_mb(pid), len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:  # killed between two readings
            return
        wal = self.daemon.state / "sluicegate.db-wal"
        p99 = _p99(latencies)
        self.samples.append({
            "t": round(self._now(), 1), "age": round(time.monotonic() - self.life_began, 1),
            "rss_mb": round(rss, 1), "fds": fds,
            "wal_mb": round(wal.stat().st_size / 2**20, 2) if wal.exists() else 0.0,
            "p99_ms": None if p99 is None else round(p99 * 1000, 2), "claims": len(latencies),
            "completed": completed,
        })  # fmt: skip

    def kill_and_restart(self) -> None:
        """SIGKILL the daemon; start it again on the same state directory."""
        self.daemon.proc.send_signal(signal.SIGKILL)
        self.daemon.proc.wait()
        with self.ledger.lock:
            self.ledger.epoch += 1
        self.kills.append(self._now())
        began = time.monotonic()
        self.daemon.start()
        self.restart_s.append(time.monotonic() - began)
        self.life_began = time.monotonic()
        setup(str(self.daemon.socket), self.args.rate)

    def run(self) -> dict[str, Any]:
        """The whole run; the summary."""
        args, sock = self.args, str(self.daemon.socket)
        self.daemon.start()
        self.started_at = self.life_began = time.monotonic()
        setup(sock, args.rate)
        stop_producing, stop_working = threading.Event(), threading.Event()
        per = args.rate / args.producers
        threads = [
            threading.Thread(target=producer, args=(sock, self.ledger, i, args.producers, per,
                                                    stop_producing), daemon=True)
            for i in range(args.producers)
        ] + [
            threading.Thread(target=worker, args=(sock, self.ledger, stop_working), daemon=True)
            for _ in range(args.workers)
        ]  # fmt: skip
        for t in threads:
            t.start()
        end = self.started_at + args.minutes * 60
        next_sample = self.started_at
        next_kill = self.started_at + args.kill_every if args.kill_every > 0 else float("inf")
        while (now := time.monotonic()) < end:
            if now >= next_kill:
                self.kill_and_restart()
                next_kill += args.kill_every
            if now >= next_sample:
                self.sample()
                next_sample += args.sample_every
            time.sleep(0.05)
        stop_producing.set()
        drained = self._drain(args.drain)
        stop_working.set()
        for t in threads:
            t.join(30)
        self.sample()
        self.daemon.stop()
        if self.args.keep:
            print(f"state kept in {self.daemon.workdir}", file=sys.stderr)
        else:
            shutil.rmtree(self.daemon.workdir, ignore_errors=True)
        return self.summary(drained)

    def _drain(self, limit: float) -> float:
        began = time.monotonic()
        with WireClient(str(self.daemon.socket), timeout=10) as client:
            while time.monotonic() - began < limit:
                self.ledger.confirm(client)
                if self.ledger.counts()["lost"] == 0:
                    break
                time.sleep(0.25)
        return time.monotonic() - began

    def _drift(self, key: str) -> dict[str, float] | None:
        steady = [s for s in self.samples if s["age"] >= WARMUP_S]
        if len(steady) < 4:
            return None
        tenth = max(1, len(steady) // 10)
        first = statistics.mean(s[key] for s in steady[:tenth])
        last = statistics.mean(s[key] for s in steady[-tenth:])
        return {"first": round(first, 1), "last": round(last, 1),
                "drift_pct": round(100 * (last - first) / first, 1) if first else 0.0}  # fmt: skip

    def summary(self, drained: float) -> dict[str, Any]:
        """The figures of the run."""
        p99s = [s["p99_ms"] for s in self.samples if s["p99_ms"] is not None]
        return {
            "minutes": self.args.minutes, "kills": len(self.kills),
            "restart_s": [round(r, 2) for r in self.restart_s], "drain_s": round(drained, 1),
            "rss": self._drift("rss_mb"), "fds": self._drift("fds"), "lives": lives(self.samples),
            "rss_max_mb": max(s["rss_mb"] for s in self.samples),
            "fds_max": max(s["fds"] for s in self.samples),
            "wal_max_mb": max(s["wal_mb"] for s in self.samples),
            "p99_ms_median": statistics.median(p99s) if p99s else None,
            "p99_ms_max": max(p99s) if p99s else None,
            **self.ledger.counts(),
        }  # fmt: skip


def lives(samples: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Each daemon life's last sample (age, RSS, fds, WAL): a leak grows these from
    life to life, where the drift also shows each life's warm-up."""
    ends: list[dict[str, float]] = []
    for s, after in zip(samples, [*samples[1:], None], strict=True):
        if after is None or after["age"] < s["age"]:
            ends.append({k: s[k] for k in ("t", "age", "rss_mb", "fds", "wal_mb")})
    return ends


def print_table(samples: list[dict[str, Any]], every: float) -> None:
    """One row per ``every`` seconds of the run."""
    print(f"{'t (s)':>7} {'age':>6} {'RSS MB':>7} {'fds':>5} {'WAL MB':>7} {'p99 ms':>7} "
          f"{'claims':>7} {'done':>8}")  # fmt: skip
    shown = -every
    for s in samples:
        if s["t"] - shown < every and s is not samples[-1]:
            continue
        shown = s["t"]
        p99 = "-" if s["p99_ms"] is None else f"{s['p99_ms']:.1f}"
        print(f"{s['t']:>7.0f} {s['age']:>6.0f} {s['rss_mb']:>7.1f} {s['fds']:>5} "
              f"{s['wal_mb']:>7.2f} {p99:>7} {s['claims']:>7} {s['completed']:>8}")  # fmt: skip


def plot(samples: list[dict[str, Any]], kills: list[float], path: Path, title: str) -> None:
    """RSS, fds, WAL size and p99 over the run, kills as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["t"] / 60 for s in samples]
    panels = [("rss_mb", "RSS (MB)"), ("fds", "open fds"), ("wal_mb", "WAL (MB)"),
              ("p99_ms", "p99 claim (ms)")]  # fmt: skip
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 9), sharex=True)
    for ax, (key, label) in zip(axes, panels, strict=True):
        points = [(m, s[key]) for m, s in zip(minutes, samples, strict=True) if s[key] is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], lw=1)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        for k in kills:
            ax.axvline(k / 60, color="red", ls="--", lw=0.8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes (red: kill -9 and restart)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    """Parse, run, print, plot; 1 when the checker finds a loss or an unexplained duplicate."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5.0, help="load time (default 5)")
    p.add_argument("--kill-every", type=float, default=120.0, metavar="S",
                   help="seconds between kill -9s (default 120; 0: none)")  # fmt: skip
    p.add_argument("--sample-every", type=float, default=2.0, metavar="S")
    p.add_argument("--rate", type=float, default=400.0, help="jobs/s enqueued (default 400)")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--lease", default="10s", help="the daemon's default lease (default 10s)")
    p.add_argument("--completed-ttl", default="2m",
                   help="[retention] completed_ttl (default 2m; swept every 10 s)")  # fmt: skip
    p.add_argument("--drain", type=float, default=120.0, metavar="S",
                   help="most seconds to wait for every acked job to complete")  # fmt: skip
    p.add_argument("--synchronous", choices=("normal", "full"), default="normal")
    p.add_argument("--plot", default="soak.png",
                   help='the PNG (soak.png; "": none; matplotlib: bench extra)')  # fmt: skip
    p.add_argument("--json", type=Path, help="also write the summary and samples here")
    p.add_argument("--keep", action="store_true", help="keep the state dir")
    args = p.parse_args()
    soak = Soak(args)
    summary = soak.run()
    print_table(soak.samples, max(args.sample_every, args.minutes * 60 / 30))
    print(json.dumps(summary, indent=1))
    title = (
        f"soak: {args.minutes:g} min, {summary['kills']} kill -9, {summary['acked']:,} jobs "
        f"acked, lost {summary['lost']}, dup {summary['duplicated']} "
        f"({summary['duplicated_unexplained']} unexplained)"
    )
    if args.plot:
        plot(soak.samples, soak.kills, Path(args.plot), title)
        print(f"plot: {args.plot}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "samples": soak.samples}))
    bad = summary["lost"] or summary["unexpected"] or summary["duplicated_unexplained"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
