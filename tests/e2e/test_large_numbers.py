"""Issue 13 item 7: an integer beyond 64 bits is refused, naming its field; never stored as a float.

Integers from -2**63 to 2**64-1 round-trip exactly over the socket, HTTP JSON
and HTTP msgpack; wider ones are ``invalid_argument`` with the value's path,
and nothing is written.
"""

from __future__ import annotations

import json
import subprocess
import sys

import msgpack
import pytest

from tests.support import ROOT

pytestmark = pytest.mark.e2e

WIDE = 12345678901234567890123
EDGES = {"max": 2**64 - 1, "min": -(2**63), "wide_text": str(WIDE), "f": 0.1}


def _raw(client, frame: str) -> dict:
    client.send_raw(frame.encode() + b"\n")
    return client.read()


def test_socket_refuses_a_wide_payload_integer_and_stores_nothing(daemon, connect):
    c = connect(daemon)
    answer = _raw(
        c, f'{{"id": 1, "op": "enqueue", "queue": "q", "type": "t", "payload": {{"n": {WIDE}}}}}'
    )
    assert answer["id"] == 1 and not answer["ok"], answer
    error = answer["error"]
    assert (error["code"], error["status"], error["field"]) == (
        "invalid_argument",
        422,
        "payload.n",
    )
    assert str(WIDE) in error["message"]
    assert c.ok("list", queue="q")["jobs"] == []
    # The connection is still usable; the edges of the range round-trip exactly.
    job = c.ok("enqueue", queue="q", type="t", payload=EDGES)["job"]
    assert c.ok("get", job_id=job["id"])["job"]["payload"] == EDGES


def test_socket_names_the_path_in_a_batch_and_writes_none_of_it(daemon, connect):
    c = connect(daemon)
    jobs = [
        {"queue": "q", "type": "t"},
        {"queue": "q", "type": "t", "payload": {"ids": [1, -WIDE]}},
    ]
    error = c.error("enqueue_many", jobs=jobs)
    assert (error["code"], error["field"]) == ("invalid_argument", "jobs[1].payload.ids[1]")
    assert c.ok("list", queue="q")["jobs"] == []


def test_socket_numeric_arguments_are_never_coerced(daemon, connect):
    c = connect(daemon)
    assert c.error("enqueue", queue="q", type="t", priority=WIDE)["field"] == "priority"
    assert c.error("enqueue", queue="q", type="t", priority=5.0)["field"] == "priority"
    assert c.error("list", limit=2**70)["field"] == "limit"
    c.ok("enqueue", queue="q", type="t")
    job = c.ok("claim_next", queues=["q"])["jobs"][0]["job"]
    error = c.error("complete", job_id=job["id"], lease=job["lease"], result={"total": WIDE})
    assert (error["code"], error["field"]) == ("invalid_argument", "result.total")
    c.ok("complete", job_id=job["id"], lease=job["lease"], result={"total": 2**64 - 1})
    assert c.ok("get", job_id=job["id"])["job"]["result"] == {"total": 2**64 - 1}


def test_http_json_refuses_a_wide_integer_naming_it(daemon):
    body = f'{{"queue": "q", "type": "t", "payload": {{"n": {WIDE}}}}}'
    headers = {"content-type": "application/json"}
    with daemon.http() as http:
        for route in ("/jobs", "/v1/ops/enqueue"):
            r = http.post(route, content=body, headers=headers)
            assert r.status_code == 422, r.text
            assert (r.json()["code"], r.json()["field"]) == ("invalid_argument", "payload.n")
        r = http.post(
            "/budgets/b",
            content=f'{{"allocation": {WIDE}, "strategy": {{"type": "while_in_flight"}}}}',
            headers=headers,
        )
        assert (r.status_code, r.json()["field"]) == (422, "allocation")
        assert http.get("/jobs", params={"queue": "q"}).json()["jobs"] == []
        r = http.post("/jobs", content=json.dumps({"queue": "q", "type": "t", "payload": EDGES}))
        assert r.status_code == 201, r.text
        assert http.get(f"/jobs/{r.json()['id']}").json()["payload"] == EDGES


def test_http_msgpack_carries_64_bit_integers_exactly(daemon):
    mp = "application/msgpack"
    body = msgpack.packb({"queue": "q", "type": "t", "payload": EDGES})
    with daemon.http() as http:
        r = http.post("/jobs", content=body, headers={"content-type": mp, "accept": mp})
        assert r.status_code == 201, r.content
        job_id = msgpack.unpackb(r.content)["id"]
        r = http.get(f"/jobs/{job_id}", headers={"accept": mp})
        assert msgpack.unpackb(r.content)["payload"] == EDGES


def test_the_cli_refuses_a_wide_payload_integer_instead_of_rounding_it(daemon, connect):
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "enqueue", "q", "t",
         "--payload", f'{{"n": {WIDE}}}', "--socket", str(daemon.socket)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "payload.n is an integer outside the 64-bit range" in done.stderr
    assert connect(daemon).ok("list", queue="q")["jobs"] == []
