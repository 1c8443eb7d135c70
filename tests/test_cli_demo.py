"""``sluice demo``, run as a subprocess: the flow, then seed 003's budget timelines.

The demo starts its own daemon and workers. One shortened run (``--seconds 2
--job-seconds 1``; the time_based parts keep the default 6 s window, one job a
second) is checked for what each part must show, reading the workers' lines:
how many jobs run at once, and how far apart they start (the lines' stamps are
to the second, so spans are checked loosely).
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from daemon.cli.demo import timelines
from daemon.cli.main import main

LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d): Job (?P<id>\S+) "
    r"(?:running in process \d+|exited with status (?P<status>\d+))$"
)


def _sections(stdout: str) -> dict[str, list[str]]:
    """The demo's output cut at its ``demo: == <heading>`` lines, by heading."""
    sections: dict[str, list[str]] = {}
    current: list[str] = sections.setdefault("", [])
    for line in stdout.splitlines():
        if line.startswith("demo: == "):
            current = sections.setdefault(line.removeprefix("demo: == "), [])
        else:
            current.append(line)
    return sections


def _events(lines: list[str]) -> list[tuple[datetime, str, bool]]:
    """The workers' lines: (stamp, job id, True for running / False for exited)."""
    events = []
    for line in lines:
        if m := LINE.match(line):
            events.append((datetime.fromisoformat(m["at"]), m["id"], m["status"] is None))
    return events


def _most_at_once(events: list[tuple[datetime, str, bool]]) -> int:
    """The most jobs running at once, by the order of the lines.

    A job's ``exited`` line is printed before the worker acknowledges it, so a
    job that a freed token let start is always printed after it.
    """
    running = most = 0
    for _at, _id, started in events:
        running += 1 if started else -1
        most = max(most, running)
    return most


def _starts(events: list[tuple[datetime, str, bool]]) -> list[datetime]:
    return [at for at, _id, started in events if started]


@pytest.mark.e2e
def test_demo_shows_the_flow_and_seed_003s_timelines(tmp_path: Path):
    demo = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "demo", "--seconds", "2", "--job-seconds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert demo.returncode == 0, demo.stderr
    sections = _sections(demo.stdout)
    headings = list(sections)[1:]
    assert headings[0].startswith("flow: ")
    assert headings[1].startswith("budgets: ")
    assert headings[2] == "budgets 1/3: while_in_flight 5: 11 jobs of 1 s, five at a time"
    assert headings[3] == (
        "budgets 2/3: time_based 6 per 6 s, burst 1: one job every 1 s, each running 0.2 s "
        "(seed 003's 6 per minute sped up 10x)"
    )
    assert headings[4] == (
        "budgets 3/3: time_based 6 per 6 s, default burst (6): 6 jobs at once, then one every "
        "1 s (seed 003's 6 per minute sped up 10x)"
    )

    flow = _events(sections[headings[0]])
    assert flow and _most_at_once(flow) <= 4  # two workers, two each

    # (a) while_in_flight 5: 11 jobs, five at a time, never more.
    slots = _events(sections[headings[2]])
    assert len(_starts(slots)) == 11 and _most_at_once(slots) == 5
    assert "$ sluice budget create demo-slots --allocation 5 --strategy while_in_flight" in (
        demo.stdout
    )

    # (b) 6 per 6 s with burst 1: one at a time, a second apart (3 s from first to last).
    drip = _events(sections[headings[3]])
    starts = _starts(drip)
    assert len(starts) == 4 and _most_at_once(drip) == 1
    assert (starts[-1] - starts[0]).total_seconds() >= 2

    # (c) the default burst: six at once, then one a second (4 s from first to last).
    burst = _events(sections[headings[4]])
    starts = _starts(burst)
    assert len(starts) == 10
    assert all(started for _at, _id, started in burst[:6])  # six start before any ends
    assert (starts[5] - starts[0]).total_seconds() <= 1
    assert (starts[-1] - starts[0]).total_seconds() >= 3

    # Every budgeted job exited 0, and the summary counts all the jobs.
    for heading in headings[2:]:
        exits = [m["status"] for line in sections[heading] if (m := LINE.match(line))]
        assert {s for s in exits if s is not None} == {"0"}, heading
    assert re.search(r"^demo-slots\s+0\s+0\s+0\s+11\s+0$", demo.stdout, re.M)
    assert re.search(r"^demo\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+$", demo.stdout, re.M)
    assert re.search(r"^demo-burst\s+6\s+time_based 6/6s\s", demo.stdout, re.M)
    last = demo.stdout.splitlines()[-1]
    assert re.match(r"demo: (\d+) jobs enqueued, \1 completed\. ", last), last


def test_timelines_follow_the_window():
    slots, drip, burst = timelines(2.0, 60_000)
    assert (slots.jobs, slots.allocation, slots.job_seconds) == (11, 5, 2.0)
    assert drip.heading == (
        "time_based 6 per 60 s, burst 1: one job every 10 s, each running 2 s (seed 003's own pace)"
    )
    assert drip.strategy == {"type": "time_based", "duration_ms": 60_000, "burst": 1}
    assert burst.strategy == {"type": "time_based", "duration_ms": 60_000}
    assert (drip.jobs, burst.jobs, burst.job_seconds) == (4, 10, 2.0)
    assert drip.create_command() == (
        "sluice budget create demo-drip --allocation 6 --strategy time_based --duration 1m "
        "--burst 1"
    )
    assert "sped up 20x" in timelines(2.0, 3_000)[1].heading


@pytest.mark.parametrize(
    "args",
    [
        ["--seconds", "0"],
        ["--job-seconds", "0"],
        ["--window", "100ms"],
        ["--window", "2h"],
        ["--window", "soon"],
        ["--budgets-only", "--no-budgets"],
    ],
)
def test_demo_usage_errors_exit_2(args, capsys):
    assert main(["demo", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err
