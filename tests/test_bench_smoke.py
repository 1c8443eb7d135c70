"""The benchmarks that need no daemon still run against today's schema and verbs.

They assert nothing about time (DESIGN.md, Tests): only that a small run ends
with every job through its life and prints its figures. A statement shaped
after the store that the store no longer accepts (a changed index) fails here
rather than on the next person to measure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # every test here starts a process

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
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
