"""Time and waiting: lapsed leases, delayed jobs, long-poll claims, shutdown."""

from __future__ import annotations

import signal
import stat
import time

import httpx
import pytest

from tests.support import wait_until

pytestmark = pytest.mark.e2e


def test_lapsed_lease_is_taken_over_and_stale_lease_is_lost(daemon, connect):
    worker1, worker2 = connect(daemon), connect(daemon)
    job_id = worker1.ok("enqueue", queue="q", type="t")["job"]["id"]
    first = worker1.ok("claim_next", queues=["q"], lease_ms=300)["jobs"][0]["job"]
    assert first["attempts"] == 1

    # Nothing is pending now: this claim waits until the reaper returns the job
    # (lapsed lease) and the doorbell wakes it.
    second = worker2.ok("claim_next", queues=["q"], wait_ms=10_000)["jobs"][0]["job"]
    assert second["id"] == job_id
    assert second["attempts"] == 2  # the lapsed attempt stays counted
    assert second["lease"] != first["lease"]
    assert second["updated_at"] >= first["lease_expires_at"]  # not taken before it lapsed

    for verb, args in [
        ("complete", {}),
        ("heartbeat", {}),
        ("fail", {"error": "late", "retry_in_ms": 0}),
        ("release", {}),
    ]:
        err = worker1.error(verb, job_id=job_id, lease=first["lease"], **args)
        assert (err["code"], err["status"]) == ("lease_lost", 409), (verb, err)
    with daemon.http() as http:
        r = http.post("/v1/ops/complete", json={"job_id": job_id, "lease": first["lease"]})
        assert r.status_code == 409 and r.json()["code"] == "lease_lost"

    # The stale calls changed nothing; the new holder finishes the job.
    now = worker2.ok("get", job_id=job_id)["job"]
    assert (now["status"], now["lease"], now["attempts"]) == ("running", second["lease"], 2)
    done = worker2.ok("complete", job_id=job_id, lease=second["lease"])["job"]
    assert done["status"] == "completed"


def test_delayed_job_is_claimable_only_from_ready_at(daemon, connect):
    c = connect(daemon)
    job = c.ok("enqueue", queue="q", type="t", delay_ms=400)["job"]
    assert job["status"] == "scheduled"
    assert job["ready_at"] == job["created_at"] + 400

    assert c.ok("claim_next", queues=["q"], wait_ms=0) | {"id": 0} == {
        "id": 0, "ok": True, "jobs": [], "empty": True,
    }  # fmt: skip
    err = c.error("claim", job_id=job["id"])
    assert (err["code"], err["job_status"]) == ("conflict", "scheduled")

    started = time.monotonic()
    got = c.ok("claim_next", queues=["q"], wait_ms=5000)
    waited = time.monotonic() - started
    claimed = got["jobs"][0]["job"]
    assert claimed["id"] == job["id"] and claimed["attempts"] == 1
    # By the daemon's own clock: claimed at or after ready_at, and promptly.
    assert job["ready_at"] <= claimed["updated_at"] <= job["ready_at"] + 1000
    assert waited < 4  # answered by the delay timer, not by the wait running out


def test_waiting_claim_is_answered_by_enqueue_on_another_connection(daemon, connect):
    waiter, producer = connect(daemon), connect(daemon)
    req = waiter.request("claim_next", queues=["q"], wait_ms=10_000)
    wait_until(lambda: daemon.waiting_claims() == 1, what="the claim to be waiting")

    started = time.monotonic()
    job_id = producer.ok("enqueue", queue="q", type="t")["job"]["id"]
    answer = waiter.answer(req)
    assert time.monotonic() - started < 5  # well before the 10 s wait runs out
    assert answer["ok"] and answer["empty"] is False
    assert [j["job"]["id"] for j in answer["jobs"]] == [job_id]
    assert daemon.waiting_claims() == 0


def test_sigterm_answers_waiting_claim_empty_and_exits_0(daemon, connect):
    c = connect(daemon)
    req = c.request("claim_next", queues=["q"], wait_ms=60_000)
    wait_until(lambda: daemon.waiting_claims() == 1, what="the claim to be waiting")

    daemon.proc.send_signal(signal.SIGTERM)
    answer = c.answer(req)
    assert answer == {"id": req, "ok": True, "jobs": [], "empty": True}
    assert c.read_until_closed() == []
    # Wait for the exit; stop() would send a second SIGTERM.
    assert daemon.proc.wait(20) == 0, daemon.log_text()
    daemon.stop()  # closes the log file
    assert not daemon.socket.exists()


def test_socket_file_is_not_world_accessible(daemon):
    mode = daemon.socket.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert mode & 0o007 == 0, oct(mode)


def _job_goes_to_a_live_worker(daemon, connect) -> None:
    live = connect(daemon)
    job_id = live.ok("enqueue", queue="q", type="t")["job"]["id"]
    got = live.ok("claim_next", queues=["q"], wait_ms=2000)
    assert [j["job"]["id"] for j in got["jobs"]] == [job_id], live.ok("get", job_id=job_id)


def test_waiting_claim_of_an_http_client_that_left_takes_no_job(daemon, connect):
    with (
        httpx.Client(base_url=daemon.http_url, timeout=0.3) as http,
        pytest.raises(httpx.TimeoutException),
    ):
        http.post("/v1/ops/claim_next", json={"queues": ["q"], "wait_ms": 30_000})
    # The client gave up and closed its connection: its claim stops waiting...
    wait_until(lambda: daemon.waiting_claims() == 0, timeout=5, what="the claim to be dropped")
    # ...so the next job goes to a worker that is there, not to the departed one.
    _job_goes_to_a_live_worker(daemon, connect)


def test_waiting_claim_of_a_socket_client_that_left_takes_no_job(daemon, connect):
    gone = connect(daemon)
    gone.request("claim_next", queues=["q"], wait_ms=30_000)
    wait_until(lambda: daemon.waiting_claims() == 1, what="the claim to be waiting")
    gone.close()
    wait_until(lambda: daemon.waiting_claims() == 0, timeout=2, what="the claim to be dropped")
    _job_goes_to_a_live_worker(daemon, connect)
