"""The shortest life of a job, over the socket and over HTTP."""

from __future__ import annotations


def test_enqueue_claim_complete_over_socket_and_http(daemon):
    client = daemon.client()
    job = client.ok("enqueue", queue="q", type="t", payload={"n": 1})["job"]
    claimed = client.ok("claim_next", queues=["q"])["jobs"][0]["job"]
    assert claimed["id"] == job["id"] and claimed["status"] == "running"
    done = client.ok("complete", job_id=job["id"], lease=claimed["lease"], result={"ok": 1})
    assert done["job"]["status"] == "completed"
    with daemon.http() as http:
        got = http.get(f"/jobs/{job['id']}")
        assert got.status_code == 200 and got.json()["result"] == {"ok": 1}
    client.close()
