"""The benchmarks that need no daemon still run against today's schema and verbs.

They assert nothing about time (DESIGN.md, Tests): only that a small run ends
with every job through its life and prints its figures. A statement shaped
after the store that the store no longer accepts (a changed index) fails here
rather than on the next person to measure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # every test here starts a process

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env=None if env is None else {**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout[-4000:]
    return done.stdout


def test_store_micro_runs_every_variant():
    out = _run("bench/store_micro.py", "--jobs", "200", "--batch", "50", "--repeat", "1")
    variants = [line for line in out.splitlines() if line.startswith("run 1")]
    assert len(variants) == 4
    assert all("jobs/s" in line for line in variants)


def test_inprocess_runs_both_phases_to_the_end():
    out = _run(
        "bench/inprocess.py", "--single-jobs", "40", "--jobs", "300", "--batch", "50",
        "--repeat", "1",
    )  # fmt: skip
    medians = [line.split()[0] for line in out.splitlines() if "median:" in line]
    assert medians == ["single", "batched"]


def test_framing_cost_frames_parses_and_encodes_the_three_requests():
    out = _run("bench/framing_cost.py", "--requests", "300", "--repeat", "2")
    assert "framing, parsing and answer encoding:" in out and "µs a request" in out


def test_commit_cost_measures_each_size_in_the_daemons_sqlite_mode():
    out = _run("bench/commit_cost.py", "--sizes", "1,3", "--commits", "20", "--repeat", "1")
    assert out.startswith("sqlite multi-thread")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["1", "3"]


def test_verb_costs_runs_every_verb_to_the_end():
    out = _run("bench/verb_costs.py", "--rounds", "3", "--batch", "20", "--repeat", "1")
    (median,) = [line for line in out.splitlines() if "median:" in line]
    assert all(verb in median for verb in ("enqueue_many", "claim_next", "complete_many"))


@pytest.mark.postgres
def test_cluster_runs_its_three_measurements(tmp_path, postgres_server):
    """bench/cluster.py, each subcommand at its smallest, on the session's server."""
    env = {"SLUICEGATE_BENCH_POSTGRES": postgres_server.admin_dsn}
    out = tmp_path / "out.json"

    _run("bench/cluster.py", "crossing", "--tries", "3", "--warmup", "0", "--json", str(out),
         env=env)  # fmt: skip
    assert len(json.loads(out.read_text())["tries"]) == 3

    _run("bench/cluster.py", "failover", "--tries", "1", "--daemons", "2", "--lease-ms", "300",
         "--kill-after", "0.1", "--json", str(out), env=env)  # fmt: skip
    (takeover,) = json.loads(out.read_text())["tries"]
    assert takeover["new_leader"] == "d1" and takeover["last_claim_s"] is not None

    _run("bench/cluster.py", "exactness-cost", "--rounds", "1", "--jobs", "200",
         "--kinds", "while_in_flight", "--json", str(out), env=env)  # fmt: skip
    (ratio,) = json.loads(out.read_text())["ratios"]
    assert len(ratio["rounds"]) == 1


def test_soak_kills_and_restarts_and_loses_nothing(tmp_path):
    """bench/soak.py at its smallest: two kill -9s, the checker's counts, a PNG. The
    drain is bounded well inside the run's timeout (the 10 s lease lapses in it), so
    that a job left missing fails with the checker's counts, not a timeout."""
    out, png = tmp_path / "soak.json", tmp_path / "soak.png"
    plotting = importlib.util.find_spec("matplotlib") is not None  # the bench extra's
    _run("bench/soak.py", "--minutes", "0.25", "--kill-every", "6", "--sample-every", "1",
         "--rate", "200", "--drain", "40", "--plot", str(png) if plotting else "",
         "--json", str(out))  # fmt: skip
    summary = json.loads(out.read_text())["summary"]
    assert summary["kills"] == 2 and summary["acked"] > 0
    assert (summary["lost"], summary["unexpected"], summary["duplicated_unexplained"]) == (0, 0, 0)
    assert png.stat().st_size > 10_000 if plotting else not png.exists()
