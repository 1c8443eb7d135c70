"""A job's life end to end: enqueue, claim, complete, over the socket and over HTTP."""

from __future__ import annotations

import msgpack
import pytest

pytestmark = pytest.mark.e2e

MSGPACK = "application/msgpack"


def test_socket_enqueue_claim_heartbeat_complete(daemon, connect):
    c = connect(daemon)
    enq = c.ok("enqueue", queue="q", type="t", payload={"n": 1}, priority=7)
    job = enq["job"]
    assert (enq["duplicate"], enq["folded"], enq["shed"]) == (False, False, False)
    assert job["status"] == "pending" and job["attempts"] == 0 and job["priority"] == 7
    assert job["payload"] == {"n": 1} and job["namespace"] == "default"
    assert job["lease"] is None and job["ready_at"] <= job["created_at"]

    got = c.ok("claim_next", queues=["q"])
    assert got["empty"] is False and len(got["jobs"]) == 1
    claimed = got["jobs"][0]["job"]
    assert claimed["id"] == job["id"] and claimed["status"] == "running"
    assert claimed["attempts"] == 1 and isinstance(claimed["lease"], str)
    assert claimed["lease_expires_at"] > claimed["updated_at"]
    assert c.ok("claim_next", queues=["q"]) | {"id": None} == {
        "id": None, "ok": True, "jobs": [], "empty": True,
    }  # fmt: skip

    beat = c.ok("heartbeat", job_id=job["id"], lease=claimed["lease"], lease_ms=600_000)
    assert beat["lease_expires_at"] > claimed["lease_expires_at"]

    done = c.ok("complete", job_id=job["id"], lease=claimed["lease"], result={"ok": 1})["job"]
    assert done["status"] == "completed" and done["result"] == {"ok": 1}
    assert done["lease"] is None and done["attempts"] == 1

    assert c.ok("get", job_id=job["id"])["job"]["status"] == "completed"
    assert [j["id"] for j in c.ok("list", status="completed")["jobs"]] == [job["id"]]
    assert c.ok("list", status="pending")["jobs"] == []
    (row,) = c.ok("status")["queues"]
    assert row == {"queue": "q", "scheduled": 0, "pending": 0, "running": 0, "completed": 1,
                   "dead": 0}  # fmt: skip
    # A finished job's lease is gone: completing it again is lease_lost.
    again = c.error("complete", job_id=job["id"], lease=claimed["lease"])
    assert (again["code"], again["status"]) == ("lease_lost", 409)


def test_http_enqueue_claim_complete_get_list(daemon, connect):
    with daemon.http() as http:
        r = http.post("/jobs", json={"queue": "q", "type": "t", "payload": {"n": 2}})
        assert r.status_code == 201, r.text
        body = r.json()
        # The job's fields flattened, plus the enqueue flags; no nested "job".
        assert "job" not in body
        assert (body["duplicate"], body["folded"], body["shed"]) == (False, False, False)
        assert body["queue"] == "q" and body["status"] == "pending"
        assert body["payload"] == {"n": 2}
        job_id = body["id"]

        r = http.post("/v1/ops/claim_next", json={"queues": ["q"]})
        assert r.status_code == 200, r.text
        (item,) = r.json()["jobs"]
        assert item["job"]["id"] == job_id and item["job"]["status"] == "running"

        r = http.post(
            "/v1/ops/complete",
            json={"job_id": job_id, "lease": item["job"]["lease"], "result": [1, 2]},
        )
        assert r.status_code == 200, r.text
        assert r.json()["job"]["status"] == "completed"

        r = http.get(f"/jobs/{job_id}")
        assert r.status_code == 200
        assert r.json()["status"] == "completed" and r.json()["result"] == [1, 2]

        assert http.post("/jobs", json={"queue": "q", "type": "t"}).status_code == 201
        done = http.get("/jobs", params={"queue": "q", "status": "completed"}).json()
        assert [j["id"] for j in done["jobs"]] == [job_id] and done["next"] is None
        pending = http.get("/jobs", params={"queue": "q", "status": "pending"}).json()["jobs"]
        assert len(pending) == 1 and pending[0]["id"] != job_id
        assert http.get("/jobs", params={"queue": "other"}).json()["jobs"] == []

        missing = http.get("/jobs/01NOSUCHJOB")
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"
        assert isinstance(missing.json()["error"], str)

        batch = http.post("/jobs", json={"jobs": [{"queue": "b", "type": "t"}] * 2})
        assert batch.status_code == 201, batch.text
        assert [r["job"]["queue"] for r in batch.json()["results"]] == ["b", "b"]

    # Both transports serve the same store.
    c = connect(daemon)
    assert c.ok("get", job_id=job_id)["job"]["result"] == [1, 2]


def test_http_msgpack_request_and_response(daemon):
    job = {"queue": "q", "type": "t", "payload": {"text": "grüße ✓", "n": [1, 2**40, -3]}}
    with daemon.http() as http:
        r = http.post(
            "/jobs",
            content=msgpack.packb(job),
            headers={"content-type": MSGPACK, "accept": MSGPACK},
        )
        assert r.status_code == 201, r.content
        assert r.headers["content-type"] == MSGPACK
        body = msgpack.unpackb(r.content)
        assert body["payload"] == job["payload"] and body["duplicate"] is False
        job_id = body["id"]

        r = http.get(f"/jobs/{job_id}", headers={"accept": MSGPACK})
        assert r.status_code == 200 and r.headers["content-type"] == MSGPACK
        got = msgpack.unpackb(r.content)
        assert got["id"] == job_id and got["payload"] == job["payload"]

        # Without Accept the answer is JSON, whatever the request's encoding.
        r = http.get(f"/jobs/{job_id}")
        assert r.headers["content-type"] == "application/json"
        assert r.json()["payload"] == job["payload"]

        # A refusal is msgpack too when asked for.
        r = http.get("/jobs/01NOSUCHJOB", headers={"accept": MSGPACK})
        assert r.status_code == 404 and msgpack.unpackb(r.content)["code"] == "not_found"


def test_fail_retry_dead_replay(daemon, connect):
    c = connect(daemon)
    job_id = c.ok("enqueue", queue="q", type="t", max_attempts=2)["job"]["id"]

    lease = c.ok("claim_next", queues=["q"])["jobs"][0]["job"]["lease"]
    retried = c.ok("fail", job_id=job_id, lease=lease, error="boom", retry_in_ms=0)["job"]
    assert retried["status"] == "pending" and retried["attempts"] == 1
    assert retried["error"] == "boom" and retried["lease"] is None and retried["dead"] is None

    again = c.ok("claim_next", queues=["q"])["jobs"][0]["job"]
    assert again["id"] == job_id and again["attempts"] == 2
    dead = c.ok("fail", job_id=job_id, lease=again["lease"], error="boom2", retry_in_ms=0)["job"]
    assert dead["status"] == "dead" and dead["attempts"] == 2
    assert dead["dead"]["reason"] == "attempts_exhausted" and isinstance(dead["dead"]["at"], int)
    assert dead["error"] == "boom2"
    assert c.ok("claim_next", queues=["q"])["empty"] is True

    assert [j["id"] for j in c.ok("dead_list")["jobs"]] == [job_id]
    assert [j["id"] for j in c.ok("dead_list", queue="q")["jobs"]] == [job_id]

    (result,) = c.ok("dead_replay", job_ids=[job_id])["results"]
    replayed = result["job"]
    assert result["duplicate"] is False
    assert replayed["id"] == job_id and replayed["status"] == "pending"
    assert replayed["attempts"] == 0 and replayed["dead"] is None
    assert c.ok("dead_list")["jobs"] == []
    (row,) = c.ok("status")["queues"]
    assert (row["pending"], row["dead"]) == (1, 0)

    # Replayed, it is claimable again with a fresh attempt count.
    back = c.ok("claim_next", queues=["q"])["jobs"][0]["job"]
    assert back["id"] == job_id and back["attempts"] == 1


def test_fail_dead_true_is_reason_failed(daemon, connect):
    c = connect(daemon)
    job_id = c.ok("enqueue", queue="q", type="t")["job"]["id"]
    lease = c.ok("claim", job_id=job_id)["job"]["lease"]
    dead = c.ok("fail", job_id=job_id, lease=lease, error="poison", dead=True)["job"]
    # Attempts remain (1 of 25), but the worker asked for dead.
    assert dead["status"] == "dead" and dead["attempts"] == 1
    assert dead["dead"]["reason"] == "failed"
    assert [j["id"] for j in c.ok("dead_list")["jobs"]] == [job_id]


def test_fail_without_retry_in_ms_backs_off(daemon, connect):
    c = connect(daemon)
    job_id = c.ok("enqueue", queue="q", type="t")["job"]["id"]
    lease = c.ok("claim", job_id=job_id)["job"]["lease"]
    job = c.ok("fail", job_id=job_id, lease=lease, error="flaky")["job"]
    # Backoff: scheduled, ready_at after the instant of the failure.
    assert job["status"] == "scheduled" and job["attempts"] == 1
    assert job["ready_at"] > job["updated_at"]
    assert c.ok("claim_next", queues=["q"])["empty"] is True
    assert c.error("claim", job_id=job_id)["job_status"] == "scheduled"
    # It does come back, no earlier than its ready_at.
    back = c.ok("claim_next", queues=["q"], wait_ms=10_000)["jobs"][0]["job"]
    assert back["id"] == job_id and back["attempts"] == 2
    assert back["updated_at"] >= job["ready_at"]


def test_minimal_answers_over_the_socket_and_http(daemon, connect):
    """``answer: "minimal"`` (PROTOCOL.md, "Smaller answers") on both transports:
    POST /jobs flattens the small job as it flattens a whole one."""
    c = connect(daemon)
    small = c.ok("enqueue", queue="q", type="t", payload={"n": 1}, answer="minimal")
    job_id = small["job"]["id"]
    assert small["job"] == {"id": job_id, "status": "pending"}
    claimed = c.ok("claim_next", queues=["q"])["jobs"][0]["job"]
    beat = c.ok("heartbeat", job_id=job_id, lease=claimed["lease"], answer="minimal")
    assert beat["job"] == {"id": job_id, "status": "running", "lease": claimed["lease"]}
    bad = c.error("complete", job_id=job_id, lease=claimed["lease"], answer="short")
    assert (bad["code"], bad["field"]) == ("invalid_argument", "answer")
    done = c.ok("complete", job_id=job_id, lease=claimed["lease"], answer="minimal")
    assert done["job"] == {"id": job_id, "status": "completed"}
    with daemon.http() as http:
        r = http.post("/jobs", json={"queue": "q", "type": "t", "answer": "minimal"})
        assert r.status_code == 201, r.text
        body = r.json()
        assert set(body) == {"id", "status", "duplicate", "folded", "shed"}
        r = http.post("/v1/ops/enqueue", json={"queue": "q", "type": "t", "answer": "minimal"})
        assert r.status_code == 200 and set(r.json()["job"]) == {"id", "status"}
