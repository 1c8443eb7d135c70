"""SIGSTOP of a worker past its lease: another worker takes the job over and
completes it; the stopped worker, continued, has its late ``complete`` refused
``lease_lost``. The history checker counts the second delivery as a duplicate
explained by the lease's lapse, and catches a build whose claim skips the lease
check (daemon/failpoints.py ``claim_skips_lease_check``).

Real time, as an end-to-end necessity: a lease of 1 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.chaos.history import COMPLETE, FAIL, OK, History, check, in_flight_peaks
from tests.support import ROOT, RawClient

pytestmark = pytest.mark.e2e

LEASE_MS = 1000


def run_sigstop(daemon, tmp_path, history: History) -> dict:
    """Worker A claims and is SIGSTOPped; worker B claims the job as soon as the
    daemon gives it, and completes it; A continues and completes late.
    Returns A's last line (its ``complete`` answer)."""
    with RawClient(daemon.socket) as producer:
        invoke = history.enqueue("p0", "job-1", "s")
        history.enqueued(invoke, OK, producer.ok("enqueue", queue="s", type="t",
                                                 payload={"k": "job-1"})["job"])  # fmt: skip
    go = tmp_path / "go"
    a = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.stopped_worker", str(daemon.socket), "s",
         str(LEASE_MS), str(go)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[dict] = []
    try:
        first = json.loads(a.stdout.readline())
        assert first["op"] == "claimed", first
        history.claimed("A", first["job"])
        os.kill(a.pid, signal.SIGSTOP)
        stopped_at = time.time()
        with RawClient(daemon.socket) as b:
            got: list = []
            while not got and time.time() - stopped_at < 10 * LEASE_MS / 1000:
                got = b.ok("claim_next", queues=["s"], lease_ms=10_000, wait_ms=200)["jobs"]
            assert got, "the job never came back to another worker"
            job = got[0]["job"]
            history.claimed("B", job)
            time.sleep(0.05)  # B's work
            invoke = history.finish("B", COMPLETE, job)
            assert b.ok("complete", job_id=job["id"], lease=job["lease"])
            history.finished(invoke, OK)
        go.touch()
        os.kill(a.pid, signal.SIGCONT)
        out, _ = a.communicate(timeout=30)
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait(10)
    lines = [json.loads(line) for line in out.splitlines()]
    for line in lines:
        if line["op"] == "heartbeat":
            history.heartbeat("A", first["job"], line["lease_expires_at"], time_ms=line["t"])
    late = lines[-1]
    assert late["op"] == "complete", lines
    answer = late["answer"]
    error = None if answer["ok"] else answer["error"]["code"]
    invoke = history.add("A", "invoke", COMPLETE, key="job-1", job_id=first["job"]["id"],
                         lease=first["job"]["lease"], time_ms=late["t"])  # fmt: skip
    history.finished(invoke, OK if error is None else FAIL, error=error)
    return answer


def test_a_worker_stopped_past_its_lease_is_refused_lease_lost_after_a_takeover(
    make_daemon, tmp_path
):
    daemon = make_daemon(http=False)
    history = History()
    answer = run_sigstop(daemon, tmp_path, history)
    assert not answer["ok"] and answer["error"]["code"] == "lease_lost", answer
    with RawClient(daemon.socket) as c:
        job = c.ok("list", queue="s")["jobs"][0]
        assert (job["status"], job["attempts"]) == ("completed", 2)
    report = check(history.ops, final={"job-1": job["status"]})
    assert report.valid, report.summary()
    assert [d.explained_by for d in report.duplicates] == ["lease_lapse"]
    assert in_flight_peaks(history.ops) == {"queue:s": 1}


def test_sigstop_catches_a_claim_that_skips_the_lease_check(make_daemon, tmp_path, monkeypatch):
    monkeypatch.setenv("SLUICEGATE_FAILPOINTS", "claim_skips_lease_check=on")
    daemon = make_daemon(http=False)
    history = History()
    run_sigstop(daemon, tmp_path, history)
    report = check(history.ops)
    assert not report.valid
    assert [d.explained_by for d in report.duplicates] == [None], report.summary()
    assert in_flight_peaks(history.ops) == {"queue:s": 2}
