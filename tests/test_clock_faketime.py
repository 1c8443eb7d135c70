"""A real daemon under libfaketime (Debian ``faketime``): the host's wall clock steps
-1 h, +1 h and +24 h while it runs, and across a restart.

The decision (tests/unit/test_clock_steps.py holds it whole): the daemon reads the
host's wall clock once, at start, and times everything after on the monotonic
clock, so a step while it runs changes none of its instants and no lease lapses
early or late; a restart adopts the step. libfaketime steps ``CLOCK_REALTIME``
(``time.time()``) from a file it re-reads on every call, and leaves the monotonic
clock alone (``FAKETIME_DONT_FAKE_MONOTONIC=1``), as NTP or ``date -s`` would.

Skipped without libfaketime; under ``CI=true`` it fails instead (.ci/run installs
``faketime``).
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import DaemonProcess

LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)
HOUR = 3_600_000
STEPS = {"back_1h": ("-1h", -HOUR), "forward_1h": ("+1h", HOUR), "forward_24h": ("+1d", 24 * HOUR)}
#: Slack between the test's reading of the real clock and the daemon's (ms).
SLACK = 5_000

if LIBFAKETIME is None and os.environ.get("CI") == "true":
    raise RuntimeError("libfaketime is missing under CI=true: .ci/run installs faketime")
pytestmark = pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime (faketime) not installed")


def real_ms() -> int:
    return int(time.time() * 1000)


def created_at(daemon: DaemonProcess) -> int:
    """The daemon's wall time now: the ``created_at`` of a job it enqueues."""
    with daemon.client() as client:
        return client.ok("enqueue", queue="probe", type="t")["job"]["created_at"]


def state_of(daemon: DaemonProcess, job_id: str) -> str:
    with daemon.client() as client:
        return client.ok("get", job_id=job_id)["job"]["status"]


def test_a_stepped_host_clock_moves_nothing_live_and_is_adopted_at_restart(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    stamp = tmp_path / "faketime"
    stamp.write_text("+0\n")
    env = {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(stamp),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    daemon = make_daemon(start=False)
    daemon.start(env=env)
    assert abs(created_at(daemon) - real_ms()) < SLACK
    with daemon.client() as client:
        job = client.ok("enqueue", queue="q", type="t")["job"]
        (claimed,) = client.ok("claim_next", queues=["q"], lease_ms=3_000)["jobs"]
        assert claimed["job"]["id"] == job["id"]
    taken = time.monotonic()
    for offset, _step_ms in STEPS.values():  # the host's clock steps; the daemon runs on
        stamp.write_text(f"{offset}\n")
        assert abs(created_at(daemon) - real_ms()) < SLACK  # its instants do not move
        assert state_of(daemon, job["id"]) == "running"  # +24 h lapses no lease
    while time.monotonic() - taken < 3.0 + 2.0:  # -1 h extends none: lapsed at ~3 s
        if state_of(daemon, job["id"]) != "running":
            break
        time.sleep(0.1)
    assert state_of(daemon, job["id"]) != "running"
    assert time.monotonic() - taken >= 3.0

    for name in ("back_1h", "forward_24h"):  # a restart adopts the step
        offset, step_ms = STEPS[name]
        stamp.write_text(f"{offset}\n")
        daemon.stop()
        daemon.start(env=env)
        assert abs(created_at(daemon) - (real_ms() + step_ms)) < SLACK, name
