"""Queue admission policies end to end (seed 002): a real ``sluice serve``.

The race of REQ-4 over many connections, the deferred answers of REQ-7 on the
socket and over HTTP, the ``/api/v1/admission`` routes with their grants and
404s (REQ-10, Security), the policies the config file provisions (read-only,
failing closed, reloaded at SIGHUP), and ``sluice queue budget show|set|clear``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from daemon.cli.main import main as sluice_main
from tests.support import DaemonProcess, RawClient, metric, token_tables, wait_until

pytestmark = pytest.mark.e2e

LA = ZoneInfo("America/Los_Angeles")
DAY_LA = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}
OWNER, WORKER, AGENT, OWNER_B = "tok-owner-a", "tok-worker-a", "tok-agent-a", "tok-owner-b"
TOKENS = token_tables(
    {"name": "owner-a", "token": OWNER, "namespace": "A",
     "grants": ["produce", "consume", "manage"]},
    {"name": "worker-a", "token": WORKER, "namespace": "A", "grants": ["produce", "consume"]},
    {"name": "agent-a", "token": AGENT, "namespace": "A",
     "grants": ["consume", "set_admission_policy"], "queues": ["lane-*"]},
    {"name": "owner-b", "token": OWNER_B, "namespace": "B",
     "grants": ["produce", "consume", "manage"]},
)  # fmt: skip
PROVISIONED = """
[policies.default.investigations]
max_claims_per_window = 100
window = { period = "day", tz = "America/Los_Angeles", start = "00:00" }

[policies.default.broken]
max_in_flight = 5
window = { period = "day", tz = "Mars/Olympus", start = "00:00" }
"""


def audit_rows(daemon: DaemonProcess) -> list[tuple[Any, ...]]:
    return daemon.sql(
        "SELECT namespace, actor, target, action FROM audit WHERE target_kind = 'queue' ORDER BY id"
    )


def enqueue(c: RawClient, queue: str, n: int) -> list[str]:
    jobs = [{"queue": queue, "type": "t"} for _ in range(n)]
    return [r["job"]["id"] for r in c.ok("enqueue_many", jobs=jobs)["results"]]


def result(frame: dict[str, Any]) -> dict[str, Any]:
    """A socket answer without its ``id`` and ``ok``: the verb's result."""
    return {k: v for k, v in frame.items() if k not in ("id", "ok")}


def http_error(frame_error: dict[str, Any]) -> dict[str, Any]:
    """A socket error object in the shape of the HTTP error body."""
    rest = {k: v for k, v in frame_error.items() if k not in ("message", "status")}
    return {"error": frame_error["message"], **rest}


# -- REQ-4: the race ----------------------------------------------------------------


def test_fifty_claim_next_calls_race_and_exactly_ten_commit(daemon, connect):
    """50 claim_next calls on 10 connections (5 pipelined each, released together)
    on a queue with max_claims_per_window = 10 and 50 pending: exactly 10 commit."""
    c = connect(daemon)
    c.ok("policy_set", queue="lane", max_claims_per_window=10, window=DAY_LA)
    enqueue(c, "lane", 50)
    clients = [connect(daemon) for _ in range(10)]
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(clients))

    def race(client: RawClient) -> None:
        barrier.wait()
        ids = [client.request("claim_next", queues=["lane"]) for _ in range(5)]
        got = [client.answer(i) for i in ids]
        with lock:
            answers.extend(got)

    threads = [threading.Thread(target=race, args=(cl,)) for cl in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(answers) == 50 and all(a["ok"] for a in answers), answers
    claimed = [j["job"]["id"] for a in answers for j in a["jobs"]]
    assert len(claimed) == len(set(claimed)) == 10
    empties = [a for a in answers if a["empty"]]
    assert len(empties) == 40
    for a in empties:  # told to wait, not to poll
        assert a["jobs"] == [] and [d["queue"] for d in a["deferred"]] == ["lane"]
        assert a["deferred"][0]["reason"] == "window_exhausted"
        assert a["deferred"][0]["exact"] is True
    headrooms = sorted(j["admission"]["used"] for a in answers for j in a["jobs"])
    assert headrooms[-1] == 10

    status = c.ok("admission_status", queue="lane")["queues"][0]
    assert (status["used"], status["in_flight"], status["pending"]) == (10, 10, 40)
    assert status["status"]["reason"] == "window_exhausted"
    pending = c.ok("list", queue="lane", status="pending", limit=100)["jobs"]
    assert len(pending) == 40
    assert {(j["attempts"], j["admission"]["reason"]) for j in pending} == {(0, "window_exhausted")}
    assert daemon.sql("SELECT sum(used) FROM policy_usage") == [(10,)]
    samples = daemon.metrics()
    assert metric(samples, "sluicegate_admission_charged_total", queue="lane") == 10
    assert metric(samples, "sluicegate_admission_policies", queue="lane",
                  status="window_exhausted") == 1  # fmt: skip
    assert metric(samples, "sluicegate_admission_deferred_jobs", queue="lane",
                  reason="window_exhausted") == 40  # fmt: skip


# -- REQ-7: deferred answers on both transports ------------------------------------------


def test_deferred_claims_on_the_socket_and_over_http(daemon, connect):
    c = connect(daemon)
    c.ok("policy_set", queue="paused", max_in_flight=0)
    c.ok("policy_set", queue="daily", max_claims_per_window=1, window=DAY_LA)
    (held,) = enqueue(c, "paused", 1)
    enqueue(c, "daily", 2)
    (free,) = enqueue(c, "free", 1)

    # A deferred queue does not starve the others: claim_next skips it.
    got = c.ok("claim_next", queues=["paused", "daily", "free"], max=10)
    assert sorted(j["job"]["queue"] for j in got["jobs"]) == ["daily", "free"]
    daily = next(j for j in got["jobs"] if j["job"]["queue"] == "daily")
    resets = daily["admission"]["window_resets_at"]
    assert daily["admission"] == {"max_in_flight": None, "in_flight": 1,
                                  "max_claims_per_window": 1, "used": 1, "remaining": 0,
                                  "window_resets_at": resets}  # fmt: skip
    free_job = next(j for j in got["jobs"] if j["job"]["id"] == free)
    assert free_job["admission"] is None

    empty = c.ok("claim_next", queues=["paused", "daily", "free"])
    assert empty["empty"] is True and empty["jobs"] == []
    assert sorted(empty["deferred"], key=lambda d: d["queue"]) == [
        {"queue": "daily", "reason": "window_exhausted", "pending": 1,
         "next_eligible_at": resets, "exact": True},
        {"queue": "paused", "reason": "paused", "pending": 1, "next_eligible_at": None,
         "exact": False},
    ]  # fmt: skip
    # empty without deferred: no pending work at all.
    assert result(c.ok("claim_next", queues=["free"])) == {"jobs": [], "empty": True}

    before = c.ok("get", job_id=held)["job"]
    err = c.error("claim", job_id=held)
    assert err == {"code": "deferred", "status": 409, "queue": "paused", "reason": "paused",
                   "next_eligible_at": None, "exact": False,
                   "message": f"job '{held}' is deferred: paused"}  # fmt: skip
    with daemon.http() as http:
        r = http.post("/v1/ops/claim", json={"job_id": held})
        assert (r.status_code, r.json()) == (409, http_error(err))
        r = http.post("/v1/ops/claim_next", json={"queues": ["paused"]})
        assert r.status_code == 200
        assert r.json()["deferred"] == [{"queue": "paused", "reason": "paused", "pending": 1,
                                         "next_eligible_at": None, "exact": False}]  # fmt: skip
    after = c.ok("get", job_id=held)["job"]
    assert after == before  # neither changed nor charged
    assert after["status"] == "pending" and after["attempts"] == 0
    assert after["admission"] == {"state": "deferred", "reason": "paused",
                                  "next_eligible_at": None, "exact": False}  # fmt: skip

    # Raising the limit admits at once.
    c.ok("policy_set", queue="paused", max_in_flight=1)
    assert c.ok("claim", job_id=held)["admission"]["in_flight"] == 1


# -- REQ-10 and Security: the HTTP routes ---------------------------------------------


def test_admission_routes_in_open_mode(daemon):
    body = {"max_in_flight": 2, "max_claims_per_window": 100, "window": DAY_LA}
    with daemon.http() as http:
        assert http.get("/api/v1/admission").json() == {"policies": []}
        missing = http.get("/api/v1/admission/lane")
        assert (missing.status_code, missing.json()["code"]) == (404, "not_found")

        r = http.put("/api/v1/admission/lane", json=body)
        assert r.status_code == 200
        policy = r.json()["policy"]
        assert {k: policy[k] for k in body} == body
        assert (policy["queue"], policy["source"], policy["updated_by"]) == ("lane", "api", "open")
        assert http.get("/api/v1/admission/lane").json() == {"policy": policy}
        assert http.get("/api/v1/admission").json() == {"policies": [policy]}

        # A bad field: 422 naming it, the stored policy unchanged.
        bad = {**body, "window": {**DAY_LA, "tz": "Mars/Olympus"}}
        r = http.put("/api/v1/admission/lane", json=bad)
        assert (r.status_code, r.json()["code"], r.json()["field"]) == (
            422, "invalid_argument", "window.tz")  # fmt: skip
        assert http.get("/api/v1/admission/lane").json() == {"policy": policy}
        r = http.put("/api/v1/admission/lane", json={**body, "queue": "other"})
        assert (r.status_code, r.json()["field"]) == (422, "queue")

        # Bodies over 16 KiB: 413, by content-length or by the bytes as they come.
        padded = json.dumps(body).encode()
        exact = padded[:-1] + b" " * (16384 - len(padded)) + b"}"
        assert len(exact) == 16384
        r = http.put("/api/v1/admission/lane", content=exact,
                     headers={"content-type": "application/json"})  # fmt: skip
        assert r.status_code == 200
        policy = r.json()["policy"]  # the same fields, a new updated_at
        too_big = exact[:-1] + b" }"
        r = http.put("/api/v1/admission/lane", content=too_big,
                     headers={"content-type": "application/json"})  # fmt: skip
        assert (r.status_code, r.json()) == (413, {
            "error": "body exceeds 16384 bytes", "code": "payload_too_large", "limit": "body",
            "max": 16384})  # fmt: skip

        def chunks():
            yield too_big[:10000]
            yield too_big[10000:]

        r = http.put("/api/v1/admission/lane", content=chunks())  # chunked: no length
        assert (r.status_code, r.json()["code"]) == (413, "payload_too_large")
        assert http.post("/api/v1/admission/lane").status_code == 405

        # ?namespace= (open mode holds operator).
        r = http.put("/api/v1/admission/lane", params={"namespace": "other"},
                     json={"max_in_flight": 1})  # fmt: skip
        assert r.json()["policy"]["max_in_flight"] == 1
        assert http.get("/api/v1/admission/lane").json() == {"policy": policy}
        listed = http.get("/api/v1/admission", params={"namespace": "other"}).json()
        assert [p["max_in_flight"] for p in listed["policies"]] == [1]

        r = http.delete("/api/v1/admission/lane")
        assert (r.status_code, r.content) == (204, b"")
        assert http.delete("/api/v1/admission/lane").status_code == 404
        assert http.get("/api/v1/admission/lane").json() == missing.json()
    assert [row[3] for row in audit_rows(daemon)] == ["set_policy"] * 3 + ["clear_policy"]


def test_admission_routes_with_tokens(make_daemon, connect):
    daemon = make_daemon(TOKENS)
    body = {"max_claims_per_window": 50, "window": DAY_LA}
    owner, worker, agent, owner_b = (daemon.http(t) for t in (OWNER, WORKER, AGENT, OWNER_B))
    with owner, worker, agent, owner_b:
        unknown_to_agent = agent.get("/api/v1/admission/other")
        unknown_to_b = owner_b.get("/api/v1/admission/lane-m")
        # A produce/consume token may not set a policy, whatever the queue.
        r = worker.put("/api/v1/admission/lane-m", json=body)
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
        # An agent granted set_admission_policy for lane-*: its own queue, audited.
        r = agent.put("/api/v1/admission/lane-m", json=body)
        assert r.status_code == 200
        assert r.json()["policy"]["updated_by"] == "agent-a"
        # An owner (manage) may set any queue of its namespace.
        r = owner.put("/api/v1/admission/other", json={"max_in_flight": 3})
        assert r.status_code == 200
        # Outside the agent's scope: not_found, the same answer as for no policy.
        for method in ("GET", "PUT"):
            r = agent.request(method, "/api/v1/admission/other",
                              json=body if method == "PUT" else None)  # fmt: skip
            assert (r.status_code, r.json()) == (404, unknown_to_agent.json()), method
        listed = agent.get("/api/v1/admission").json()["policies"]
        assert [p["queue"] for p in listed] == ["lane-m"]
        # Another namespace's queue reads exactly as a queue that does not exist.
        r = owner_b.get("/api/v1/admission/lane-m")
        assert (r.status_code, r.json()) == (404, unknown_to_b.json())
        assert unknown_to_b.status_code == 404
        assert owner_b.get("/api/v1/admission").json() == {"policies": []}
        r = owner_b.get("/api/v1/admission/lane-m", params={"namespace": "A"})
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
        # The agent lacks clear_admission_policy; the owner clears.
        r = agent.delete("/api/v1/admission/lane-m")
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
        assert owner.put("/api/v1/admission/lane-m", json={"max_in_flight": 4}).status_code == 200
        assert owner.delete("/api/v1/admission/lane-m").status_code == 204
        assert owner.get("/api/v1/admission/lane-m").status_code == 404
        # Unauthenticated: 401.
        assert httpx.get(f"{daemon.http_url}/api/v1/admission").status_code == 401
    assert audit_rows(daemon) == [
        ("A", "agent-a", "lane-m", "set_policy"),
        ("A", "owner-a", "other", "set_policy"),
        ("A", "owner-a", "lane-m", "set_policy"),
        ("A", "owner-a", "lane-m", "clear_policy"),
    ]

    # REQ-7: admission_status is scoped to the caller.
    c = connect(daemon)
    c.ok("hello", token=AGENT)
    assert c.error("admission_status", queue="other")["code"] == "forbidden"
    assert c.ok("admission_status")["queues"] == []  # "other" is outside lane-*
    w = connect(daemon)
    w.ok("hello", token=WORKER)
    assert [q["queue"] for q in w.ok("admission_status")["queues"]] == ["other"]
    assert w.error("policy_set", queue="other", max_in_flight=9)["code"] == "forbidden"


# -- provisioning --------------------------------------------------------------------


def test_provisioned_policies_are_read_only_fail_closed_and_reloaded(make_daemon, connect):
    daemon = make_daemon(PROVISIONED)
    c = connect(daemon)
    got = c.ok("policy_get", queue="investigations")["policy"]
    assert (got["max_claims_per_window"], got["source"], got["created_by"]) == (
        100, "config", "config")  # fmt: skip
    err = c.error("policy_set", queue="investigations", max_in_flight=1)
    assert (err["code"], err["status"]) == ("conflict", 409)
    assert c.error("policy_clear", queue="investigations")["code"] == "conflict"
    with daemon.http() as http:
        r = http.put("/api/v1/admission/investigations", json={"max_in_flight": 1})
        assert (r.status_code, r.json()["code"]) == (409, "conflict")
        health = http.get("/healthz").json()
        assert health["status"] == "degraded"
        assert any("queue 'default/broken' fails closed" in p for p in health["problems"])

    # The table that does not decode fails its queue closed, no other.
    enqueue(c, "broken", 1)
    enqueue(c, "investigations", 1)
    got = c.ok("claim_next", queues=["broken", "investigations"], max=5)
    assert [j["job"]["queue"] for j in got["jobs"]] == ["investigations"]
    empty = c.ok("claim_next", queues=["broken"])
    assert empty["deferred"] == [{"queue": "broken", "reason": "admission_unavailable",
                                  "pending": 1, "next_eligible_at": None,
                                  "exact": False}]  # fmt: skip
    assert metric(daemon.metrics(), "sluicegate_admission_refusals_total", queue="broken",
                  reason="admission_unavailable") >= 1  # fmt: skip

    check = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "config", "check", str(daemon.config_path)],
        capture_output=True, text=True, timeout=30, cwd=daemon.workdir,
    )  # fmt: skip
    assert check.returncode == 1
    assert f"{daemon.config_path}: policies.default.broken.window.tz: " in check.stderr

    # SIGHUP: a changed table is rewritten, a fixed one admits, a removed one is the API's.
    text = daemon.config_path.read_text()
    text = text.replace("max_claims_per_window = 100", "max_claims_per_window = 200")
    text = text.replace('tz = "Mars/Olympus"', 'tz = "UTC"').replace(
        'max_in_flight = 5\nwindow = { period = "day", tz = "UTC", start = "00:00" }',
        "max_in_flight = 5",
    )
    daemon.config_path.write_text(text)
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: c.ok("policy_get", queue="investigations")["policy"][
        "max_claims_per_window"] == 200, what="the reload")  # fmt: skip
    assert [j["job"]["queue"] for j in c.ok("claim_next", queues=["broken"])["jobs"]] == ["broken"]
    with daemon.http() as http:
        health = http.get("/healthz").json()
        assert (health["status"], health.get("problems")) == ("ok", None)

    daemon.config_path.write_text(text.split("[policies.default.broken]")[0])
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: c.ok("policy_get", queue="broken")["policy"]["source"] == "api",
               what="the removed table to become the API's")  # fmt: skip
    assert result(c.ok("policy_clear", queue="broken")) == {}
    assert audit_rows(daemon) == [
        ("default", "config", "broken", "set_policy"),
        ("default", "config", "investigations", "set_policy"),
        ("default", "config", "broken", "set_policy"),
        ("default", "config", "investigations", "set_policy"),
        ("default", "config", "broken", "set_policy"),
        ("default", "open", "broken", "clear_policy"),
    ]


# -- the command line ------------------------------------------------------------------


@pytest.fixture
def cli(daemon, capsys, monkeypatch):
    """``sluice ARGS --socket S`` in this process, the viewer in UTC: (status, out, err)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()

    def run(*args: str) -> tuple[int, str, str]:
        status = sluice_main([*args, "--socket", str(daemon.socket)])
        out, err = capsys.readouterr()
        return status, out, err

    yield run
    monkeypatch.delenv("TZ")
    time.tzset()


def _clock(ms: int, zone: Any) -> str:
    return datetime.fromtimestamp(ms / 1000, zone).strftime("%H:%M %Z")


def test_queue_budget_show_set_clear(daemon, connect, cli):
    c = connect(daemon)
    assert cli("queue", "budget", "show", "lane") == (
        0, "no policy on queue 'lane': claims are not limited\n", "")  # fmt: skip
    status, out, err = cli("queue", "budget", "set", "lane", "--max-in-flight", "5",
                           "--max-claims-per-window", "3", "--period", "day",
                           "--tz", "America/Los_Angeles", "--start", "00:00")  # fmt: skip
    assert (status, err) == (0, "")
    assert out == ("saved the policy of queue 'lane': max_in_flight 5 · max_claims_per_window 3 "
                   "per day from 00:00 America/Los_Angeles\n")  # fmt: skip
    enqueue(c, "lane", 4)
    c.ok("claim_next", queues=["lane"])
    resets = c.ok("admission_status", queue="lane")["queues"][0]["window_resets_at"]
    when = f"{_clock(resets, LA)} ({_clock(resets, ZoneInfo('UTC'))})"
    status, out, _err = cli("queue", "budget", "show", "lane")
    assert status == 0
    assert f"usage    1 of 3 used · 1 of 5 in flight · resets {when}\n" in out
    assert "status   admitted\n" in out
    c.ok("claim_next", queues=["lane"], max=2)  # the window is used up
    status, out, _err = cli("queue", "budget", "show", "lane")
    assert "usage    3 of 3 used · 3 of 5 in flight" in out
    assert f"status   deferred, window exhausted until {when} · 1 pending held back\n" in out
    # --json prints the verb's result exactly.
    status, out, _err = cli("queue", "budget", "show", "lane", "--json")
    frame = c.ok("admission_status", queue="lane")
    assert json.loads(out) == result(frame)

    # In-flight only: no window limit, nothing resets.
    assert cli("queue", "budget", "set", "solo", "--max-in-flight", "0")[0] == 0
    status, out, _err = cli("queue", "budget", "show", "solo")
    assert "usage    no window limit · 0 of 0 in flight\n" in out
    assert "status   deferred, paused: a limit is 0 · 0 pending held back\n" in out

    # Values the CLI rejects itself: exit 2, naming the option; nothing sent.
    for args, named in (
        (("--max-in-flight", "-1"), "--max-in-flight"),
        (("--max-in-flight", "10001"), "--max-in-flight"),
        (("--max-claims-per-window", "5", "--period", "day", "--tz", "Mars/Olympus"), "--tz"),
        (("--max-claims-per-window", "5", "--period", "day", "--tz", "UTC", "--start", "7:00"),
         "--start"),
        (("--max-claims-per-window", "5", "--period", "day"), "--tz"),
        (("--max-claims-per-window", "5", "--period", "day", "--tz", "UTC", "--weekday", "Mon"),
         "--weekday"),
        (("--max-claims-per-window", "5", "--period", "week", "--tz", "UTC"), "--weekday"),
        (("--max-in-flight", "1", "--period", "day"), "--period"),
        ((), "--max-in-flight"),
    ):  # fmt: skip
        status, out, err = cli("queue", "budget", "set", "x", *args)
        assert (status, out) == (2, ""), args
        assert named in err, (args, err)
    assert c.ok("policy_list")["policies"][0]["queue"] == "lane"
    assert len(c.ok("policy_list")["policies"]) == 2

    # The daemon's refusals: exit 1 with the code and message.
    assert cli("queue", "budget", "clear", "nothing") == (
        1, "", "sluice: not_found: policy of queue 'nothing' not found\n")  # fmt: skip
    assert cli("queue", "budget", "clear", "lane") == (
        0, "cleared the policy of queue 'lane': claims are not limited\n", "")  # fmt: skip
    assert cli("queue", "budget", "clear", "solo", "--json") == (0, "{}\n", "")

    # The real entry point, once.
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "queue", "budget", "show", "lane", "--json",
         "--socket", str(daemon.socket)],
        capture_output=True, text=True, timeout=30, env={**os.environ, "TZ": "UTC"},
    )  # fmt: skip
    assert (proc.returncode, json.loads(proc.stdout)) == (0, {"queues": []})
