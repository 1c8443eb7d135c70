"""Namespace quotas end to end: ``sluice quota`` against a real daemon, and the same
limit with the same outcome on the socket and over HTTP (seed 000).

Each test starts one ``sluice serve`` and sets its quota with the CLI (a
subprocess, as an operator would), then enqueues over the socket
(``enqueue``/``enqueue_many``) and over HTTP (``POST /jobs``, one job and a
batch) and compares the refusals field by field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support import DaemonProcess, RawClient, metric, token_tables, wait_until

pytestmark = pytest.mark.e2e

SEED_000 = (
    "--max-pending", "10000", "--on-excess", "drop", "--enqueue-rate", "500/s",
    "--max-running", "50", "--max-archived-rows", "1000000", "--max-dead-rows", "50000",
)  # fmt: skip
SEED_000_DOC = {
    "max_pending": 10000, "on_excess": "drop", "enqueue_rate": "500/s", "max_running": 50,
    "max_archived_rows": 1000000, "max_dead_rows": 50000,
}  # fmt: skip
SEED_000_LISTING = """\
source             api
max_pending        10000
on_excess          drop
enqueue_rate       500/s
max_running        50
max_archived_rows  1000000
max_dead_rows      50000
"""


def sluice(daemon: DaemonProcess, *args: str, token: str | None = None) -> Any:
    """``sluice args... --socket S [--token T]``: the completed process, text output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
    extra = ("--token", token) if token else ()
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", *args, "--socket", str(daemon.socket), *extra],
        capture_output=True, text=True, timeout=30, env=env, cwd=daemon.workdir,
    )  # fmt: skip


def ok(daemon: DaemonProcess, *args: str, token: str | None = None) -> str:
    proc = sluice(daemon, *args, token=token)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return proc.stdout


def ok_json(daemon: DaemonProcess, *args: str, token: str | None = None) -> Any:
    return json.loads(ok(daemon, *args, "--json", token=token))  # one document, or it fails


def refused(daemon: DaemonProcess, *args: str, token: str | None = None) -> str:
    """A call the daemon refuses: exit 1, nothing on stdout; the stderr line."""
    proc = sluice(daemon, *args, token=token)
    assert (proc.returncode, proc.stdout) == (1, ""), (proc.returncode, proc.stdout, proc.stderr)
    return proc.stderr


def job(queue: str = "q", **extra: Any) -> dict[str, Any]:
    return {"queue": queue, "type": "t", "payload": {}, **extra}


def as_http(error: dict[str, Any]) -> dict[str, Any]:
    """A socket error object in the shape of the HTTP error body."""
    rest = {k: v for k, v in error.items() if k not in ("message", "status")}
    return {"error": error["message"], **rest}


def counted(c: RawClient, status: str) -> int:
    return len(c.ok("list", status=status, limit=1000)["jobs"])


# -- the CLI ------------------------------------------------------------------------


def test_seed_000_command_line_sets_and_shows_the_document(daemon):
    assert ok(daemon, "quota", "get") == "no quota: every limit is unlimited\n"
    assert ok_json(daemon, "quota", "get") == {"quota": None, "source": None}

    out = ok(daemon, "quota", "set", *SEED_000)
    assert out == "saved the quota of this token's namespace\n" + SEED_000_LISTING
    assert ok(daemon, "quota", "get") == SEED_000_LISTING
    assert ok_json(daemon, "quota", "get") == {"quota": SEED_000_DOC, "source": "api"}
    # The same document over HTTP.
    with daemon.http() as http:
        assert http.get("/api/v1/quota").json() == {"quota": SEED_000_DOC, "source": "api"}

    # set replaces the whole document: what is not given becomes unlimited.
    assert ok_json(daemon, "quota", "set", "--max-running", "0") == {
        "quota": {"on_excess": "reject", "max_running": 0}
    }
    listing = ok(daemon, "quota", "get")
    assert "max_running        0\n" in listing and "max_pending        unlimited\n" in listing
    assert "on_excess          reject\n" in listing

    assert ok(daemon, "quota", "clear") == (
        "cleared the quota of this token's namespace: every limit is unlimited\n"
    )
    assert ok_json(daemon, "quota", "get") == {"quota": None, "source": None}
    assert ok_json(daemon, "quota", "clear") == {}  # clearing nothing is fine

    # --namespace (open mode holds operator): another namespace's document.
    ok(daemon, "quota", "set", "--namespace", "billing", "--max-pending", "7")
    assert ok(daemon, "quota", "get", "--namespace", "billing").startswith(
        "namespace          billing\nsource             api\nmax_pending        7\n"
    )
    with daemon.http() as http:
        assert http.get("/api/v1/quota").json()["quota"] is None  # default untouched
        got = http.get("/api/v1/quota", params={"namespace": "billing"}).json()
        assert got == {"quota": {"max_pending": 7, "on_excess": "reject"}, "source": "api"}


def test_the_door_limits_are_set_from_the_command_line_too(daemon):
    doc = ok_json(
        daemon, "quota", "set", "--request-rate", "100,20", "--message-rate", "50,2.5",
        "--max-item-bytes", "65536", "--max-queues", "10", "--max-retention-ms", "3600000",
        "--max-waiting-claims", "4", "--max-retained-bytes", "1000000",
        "--retained-release-band", "0.2", "--monthly-jobs-quota", "0",
    )["quota"]  # fmt: skip
    assert doc == {
        "on_excess": "reject", "request_rate": {"capacity": 100, "refill_per_s": 20.0},
        "message_rate": {"capacity": 50, "refill_per_s": 2.5}, "max_item_bytes": 65536,
        "max_queues": 10, "max_retention_ms": 3600000, "max_waiting_claims": 4,
        "max_retained_bytes": 1000000, "retained_release_band": 0.2, "monthly_jobs_quota": 0,
    }  # fmt: skip
    assert "\nmonthly_jobs_quota     0\n" in ok(daemon, "quota", "get")


def test_a_document_that_does_not_decode_is_shown_and_fails_closed(daemon):
    ok(daemon, "quota", "set", "--max-pending", "5")
    # Another process sharing the database stores a document that does not decode;
    # the settings watcher reloads it within about two seconds.
    daemon.sql("UPDATE settings SET value = ? WHERE key = 'quota:default'",
               ('{"max_pending": -3}',))  # fmt: skip
    with daemon.client() as c, daemon.http() as http:
        wait_until(lambda: http.get("/healthz").json()["status"] == "degraded",
                   timeout=6, interval=0.05, what="the bad document to be loaded")  # fmt: skip
        err = c.error("enqueue", **job())
        assert (err["code"], err["status"], err["limit"]) == ("quota_unavailable", 503, "quota")
        assert err["message"] == (
            "the quota of namespace 'default' cannot be read: "
            "max_pending cannot be negative, got -3"
        )
        r = http.post("/jobs", json=job())
        assert (r.status_code, r.json()) == (503, as_http(err))
        assert http.get("/healthz").json()["problems"] == [
            "namespace 'default' fails closed: its quota cannot be read "
            "(max_pending cannot be negative, got -3)"
        ]
        assert metric(daemon.metrics(), "sluicegate_namespace_quota_unavailable",
                      namespace="default") == 1  # fmt: skip

        got = ok_json(daemon, "quota", "get")
        assert got == {"quota": None, "source": "api",
                       "error": "max_pending cannot be negative, got -3"}  # fmt: skip
        listing = ok(daemon, "quota", "get")
        assert listing.startswith("source  api\nerror   max_pending cannot be negative, got -3\n")
        assert "fails closed" in listing

        # Setting it again (or clearing it) fixes the namespace at once.
        ok(daemon, "quota", "set", "--max-pending", "5")
        assert c.ok("enqueue", **job())["shed"] is False


# -- the same limit on both transports ----------------------------------------------------


def test_max_pending_reject_is_the_same_on_socket_and_http(daemon):
    ok(daemon, "quota", "set", "--max-pending", "3")
    with daemon.client() as c, daemon.http() as http:
        # Scheduled jobs count as well as pending ones.
        first = c.ok("enqueue_many", jobs=[job(unique_key="u1"), job(delay_ms=3_600_000)])
        assert [r["job"]["status"] for r in first["results"]] == ["pending", "scheduled"]

        # Over the cap by this call: "<pending> pending + <n> new > max_pending <cap>".
        over = c.error("enqueue_many", jobs=[job(), job()])
        assert over == {
            "code": "queue_full", "status": 429, "reason": "QUEUE_FULL", "limit": "max_pending",
            "message": "queue 'q' is full: 2 pending + 2 new > max_pending 3", "value": 4, "max": 3,
        }  # fmt: skip
        r = http.post("/jobs", json={"jobs": [job(), job()]})
        assert (r.status_code, r.json()) == (429, as_http(over))
        # <q> is the queue of the call's first job.
        r = http.post("/jobs", json={"jobs": [job("other"), job()]})
        assert r.json()["error"] == "queue 'other' is full: 2 pending + 2 new > max_pending 3"
        assert counted(c, "pending") + counted(c, "scheduled") == 2  # nothing of them landed

        assert http.post("/jobs", json=job()).status_code == 201  # the last room

        # At the cap: "<pending> pending >= max_pending <cap>", for one job or a batch.
        at_cap = c.error("enqueue", **job())
        assert at_cap == {
            "code": "queue_full", "status": 429, "reason": "QUEUE_FULL", "limit": "max_pending",
            "message": "queue 'q' is full: 3 pending >= max_pending 3", "value": 4, "max": 3,
        }  # fmt: skip
        r = http.post("/jobs", json=job())
        assert (r.status_code, r.json()) == (429, as_http(at_cap))
        assert "retry-after" not in r.headers
        r = http.post("/jobs", json={"jobs": [job()]})
        assert (r.status_code, r.json()) == (429, as_http(at_cap))
        batch = c.error("enqueue_many", jobs=[job(), job()])
        assert batch["message"] == "queue 'q' is full: 3 pending >= max_pending 3"
        assert batch["value"] == 5

        # Admission runs before dedup: a duplicate is refused too while at the cap.
        dup = c.error("enqueue", **job(unique_key="u1"))
        assert dup["code"] == "queue_full"

        samples = daemon.metrics()
        assert metric(samples, "sluicegate_quota_refusals_total",
                      namespace="default", reason="queue_full") == 8  # fmt: skip
        assert metric(samples, "sluicegate_namespace_pending", namespace="default") == 3
        assert metric(samples, "sluicegate_namespace_max_pending", namespace="default") == 3

        # Raising the limit applies at once; clearing it lifts every limit.
        ok(daemon, "quota", "set", "--max-pending", "4")
        assert c.ok("enqueue", **job())["shed"] is False
        assert c.error("enqueue", **job())["message"] == (
            "queue 'q' is full: 4 pending >= max_pending 4"
        )
        ok(daemon, "quota", "clear")
        assert c.ok("enqueue_many", jobs=[job()] * 5)["results"][0]["shed"] is False


def test_enqueue_rate_reject_is_the_same_on_socket_and_http(daemon):
    ok(daemon, "quota", "set", "--enqueue-rate", "2/m")
    with daemon.client() as c, daemon.http() as http:
        c.ok("enqueue_many", jobs=[job(), job()])  # the bucket starts full: 2 tokens
        err = c.error("enqueue", **job())
        r = http.post("/jobs", json=job())
        assert err == {
            "code": "rate_limited", "status": 429, "reason": "RATE_LIMITED",
            "limit": "enqueue_rate", "retry_after": err["retry_after"],
            "message": "rate limit exceeded for: namespace 'default' enqueue_rate 2/m",
        }  # fmt: skip
        assert 1 <= err["retry_after"] <= 30  # one token at 2 a minute: 30 s at most
        assert (r.status_code, r.json()) == (429, as_http(err))
        assert r.headers["retry-after"] == str(err["retry_after"])
        r = http.post("/jobs", json={"jobs": [job()]})
        assert (r.status_code, r.json()["code"]) == (429, "rate_limited")
        assert r.headers["retry-after"] == str(err["retry_after"])
        assert counted(c, "pending") == 2
        assert metric(daemon.metrics(), "sluicegate_quota_refusals_total",
                      namespace="default", reason="rate_limited") == 3  # fmt: skip


def test_depth_is_checked_before_rate_so_a_depth_refusal_spends_no_token(daemon):
    ok(daemon, "quota", "set", "--max-pending", "1", "--enqueue-rate", "2/m")
    with daemon.client() as c:
        c.ok("enqueue", **job())  # one token left
        assert c.error("enqueue", **job())["code"] == "queue_full"  # spends none
        assert c.error("enqueue", **job())["code"] == "queue_full"
        claimed = c.ok("claim_next", queues=["q"])["jobs"][0]["job"]
        c.ok("complete", job_id=claimed["id"], lease=claimed["lease"])
        c.ok("enqueue", **job())  # the token the refusals did not spend
        c.ok("claim_next", queues=["q"])
        assert c.error("enqueue", **job())["code"] == "rate_limited"


def test_drop_sheds_the_over_quota_jobs_on_both_transports(daemon):
    ok(daemon, "quota", "set", "--max-pending", "3", "--on-excess", "drop")
    with daemon.client() as c, daemon.http() as http:
        first = c.ok("enqueue_many", jobs=[job(), job()])["results"]
        assert [r["shed"] for r in first] == [False, False]
        # A batch over the cap lands whole: the first jobs live, the rest shed.
        r = http.post("/jobs", json={"jobs": [job(), job(unique_key="k")]})
        assert r.status_code == 201
        results = r.json()["results"]
        assert [x["shed"] for x in results] == [False, True]
        shed = [results[1]["job"]]
        r = http.post("/jobs", json=job())
        assert r.status_code == 201 and r.json()["shed"] is True
        shed.append({k: v for k, v in r.json().items() if k not in ("duplicate", "folded", "shed")})
        one = c.ok("enqueue", **job())
        assert (one["shed"], one["duplicate"], one["folded"]) == (True, False, False)
        shed.append(one["job"])
        batch = c.ok("enqueue_many", jobs=[job(), job()])["results"]
        assert [x["shed"] for x in batch] == [True, True]
        shed += [x["job"] for x in batch]

        for j in shed:
            assert j["status"] == "dead" and j["attempts"] == 0 and j["unique_key"] is None
            assert j["error"] == "quota: namespace 'default' over max_pending 3"
            assert (j["dead"]["reason"], j["dead"]["shed"]) == ("shed", "quota")
            assert http.get(f"/jobs/{j['id']}").json()["status"] == "dead"
        assert counted(c, "pending") == 3 and counted(c, "dead") == 5
        # A shed job holds no unique key: the same work can be enqueued once there is room.
        ok(daemon, "quota", "set", "--max-pending", "4", "--on-excess", "drop")
        again = c.ok("enqueue", **job(unique_key="k"))
        assert again["shed"] is False and again["duplicate"] is False
        samples = daemon.metrics()
        assert metric(samples, "sluicegate_jobs_shed_total",
                      namespace="default", limit="max_pending") == 5  # fmt: skip
        assert metric(samples, "sluicegate_quota_refusals_total",
                      namespace="default", reason="queue_full") is None  # fmt: skip

        # The rate sheds the same way (limit enqueue_rate).
        ok(daemon, "quota", "set", "--enqueue-rate", "2/m", "--on-excess", "drop")
        results = c.ok("enqueue_many", jobs=[job(), job(), job()])["results"]
        assert [x["shed"] for x in results] == [False, False, True]
        r = http.post("/jobs", json=job())
        assert r.status_code == 201 and r.json()["shed"] is True
        assert r.json()["error"] == "quota: namespace 'default' over enqueue_rate 2/m"
        assert results[2]["job"]["error"] == r.json()["error"]
        assert metric(daemon.metrics(), "sluicegate_jobs_shed_total",
                      namespace="default", limit="enqueue_rate") == 2  # fmt: skip


def test_max_running_defers_claims_without_spending_an_attempt(daemon):
    ok(daemon, "quota", "set", "--max-running", "1")
    with daemon.client() as c, daemon.http() as http:
        c.ok("enqueue_many", jobs=[job(), job()])
        got = c.ok("claim_next", queues=["q"], max=2)["jobs"]
        assert len(got) == 1  # nothing is claimed past the cap
        running = got[0]["job"]
        empty = c.ok("claim_next", queues=["q"])
        assert empty["empty"] is True and empty["jobs"] == []
        [deferred] = empty["deferred"]
        assert (deferred["queue"], deferred["reason"], deferred["pending"], deferred["exact"]) == (
            "q", "running_full", 1, False,
        )  # fmt: skip
        r = http.post("/v1/ops/claim_next", json={"queues": ["q"]})
        assert r.status_code == 200 and r.json()["deferred"][0]["reason"] == "running_full"
        [held] = c.ok("list", status="pending")["jobs"]
        assert held["attempts"] == 0 and held["admission"]["reason"] == "running_full"
        refusal = c.error("claim", job_id=held["id"])
        assert (refusal["code"], refusal["reason"]) == ("deferred", "running_full")
        samples = daemon.metrics()
        assert metric(samples, "sluicegate_namespace_running", namespace="default") == 1
        assert metric(samples, "sluicegate_namespace_max_running", namespace="default") == 1

        c.ok("complete", job_id=running["id"], lease=running["lease"])
        [nxt] = c.ok("claim_next", queues=["q"])["jobs"]
        assert nxt["job"]["id"] == held["id"] and nxt["job"]["attempts"] == 1


# -- the HTTP routes and tokens mode ---------------------------------------------------------


def test_http_quota_routes(daemon):
    with daemon.http() as http:
        assert http.get("/api/v1/quota").json() == {"quota": None, "source": None}
        doc = {"max_pending": 2, "enqueue_rate": "10/s"}
        r = http.put("/api/v1/quota", json=doc)
        assert r.status_code == 200
        assert r.json() == {"quota": {"max_pending": 2, "on_excess": "reject",
                                      "enqueue_rate": "10/s"}}  # fmt: skip
        assert http.get("/api/v1/quota").json() == {**r.json(), "source": "api"}
        assert ok_json(daemon, "quota", "get") == {**r.json(), "source": "api"}

        bad = http.put("/api/v1/quota", json={"max_pending": -1})
        assert bad.status_code == 422
        assert (bad.json()["code"], bad.json()["field"]) == ("invalid_argument", "max_pending")
        assert http.put("/api/v1/quota", json={"max_pendng": 1}).json()["field"] == "max_pendng"
        assert http.get("/api/v1/quota").json()["quota"]["max_pending"] == 2  # unchanged

        r = http.delete("/api/v1/quota")
        assert (r.status_code, r.content) == (204, b"")
        assert http.get("/api/v1/quota").json() == {"quota": None, "source": None}
        assert http.put("/api/v1/quota", params={"namespace": "x"}, json={}).status_code == 200
        assert http.get("/api/v1/quota", params={"namespace": "x"}).json() == {
            "quota": {"on_excess": "reject"},
            "source": "api",
        }


OPERATOR, OWNER, PRODUCER = "tok-operator-1", "tok-owner-a-2", "tok-producer-a-3"
TOKENS = token_tables(
    {"name": "ops", "token": OPERATOR, "namespace": "ops", "grants": ["operator"]},
    {"name": "owner-a", "token": OWNER, "namespace": "A",
     "grants": ["produce", "consume", "manage"]},
    {"name": "producer-a", "token": PRODUCER, "namespace": "A", "grants": ["produce"]},
) + "\n[quotas.billing]\nmax_pending = 10\non_excess = \"drop\"\n"  # fmt: skip


def test_tokens_mode_operator_writes_owner_reads(make_daemon, connect):
    d = make_daemon(TOKENS)
    # The operator sets namespace A's quota; A's owner reads it.
    ok(d, "quota", "set", "--namespace", "A", "--max-pending", "1", token=OPERATOR)
    assert ok_json(d, "quota", "get", token=OWNER) == {
        "quota": {"max_pending": 1, "on_excess": "reject"},
        "source": "api",
    }
    assert ok_json(d, "quota", "get", token=OPERATOR) == {"quota": None, "source": None}  # ops

    # A non-operator may neither set nor clear, nor name another namespace.
    assert refused(d, "quota", "set", "--max-pending", "9", token=OWNER) == (
        "sluice: forbidden: this token is not granted 'quota_set'\n"
    )
    assert refused(d, "quota", "clear", token=OWNER) == (
        "sluice: forbidden: this token is not granted 'quota_clear'\n"
    )
    assert refused(d, "quota", "get", "--namespace", "billing", token=OWNER) == (
        "sluice: forbidden: naming another namespace needs the operator grant\n"
    )
    assert refused(d, "quota", "get", token=PRODUCER) == (
        "sluice: forbidden: this token is not granted 'quota_get'\n"
    )
    with d.http(OWNER) as http:
        assert http.put("/api/v1/quota", json={"max_pending": 9}).json()["code"] == "forbidden"
        r = http.delete("/api/v1/quota")
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
        r = http.get("/api/v1/quota")
        assert r.status_code == 200 and r.json()["quota"]["max_pending"] == 1

    # A provisioned document is read-only through the API, even for an operator.
    assert ok_json(d, "quota", "get", "--namespace", "billing", token=OPERATOR) == {
        "quota": {"max_pending": 10, "on_excess": "drop"},
        "source": "config",
    }
    assert refused(d, "quota", "clear", "--namespace", "billing", token=OPERATOR) == (
        "sluice: conflict: the quota of namespace 'billing' is managed by config file\n"
    )
    with d.http(OPERATOR) as http:
        r = http.put("/api/v1/quota", params={"namespace": "billing"}, json={"max_pending": 1})
        assert (r.status_code, r.json()["code"]) == (409, "conflict")
        assert http.get("/api/v1/quota", params={"namespace": "A"}).json()["source"] == "api"

    # The limit holds for A's producer on both transports.
    producer = connect(d)
    producer.ok("hello", token=PRODUCER)
    producer.ok("enqueue", **job())
    err = producer.error("enqueue", **job())
    assert err["message"] == "queue 'q' is full: 1 pending >= max_pending 1"
    with d.http(PRODUCER) as http:
        r = http.post("/jobs", json=job())
        assert (r.status_code, r.json()) == (429, as_http(err))

    # The operator clears it: the limit lifts at once.
    assert ok(d, "quota", "clear", "--namespace", "A", token=OPERATOR) == (
        "cleared the quota of namespace 'A': every limit is unlimited\n"
    )
    producer.ok("enqueue", **job())
    assert ok_json(d, "quota", "get", token=OWNER) == {"quota": None, "source": None}


def test_the_cli_retries_a_429_as_the_sdk_does_and_says_so(daemon):
    ok(daemon, "quota", "set", "--max-pending", "1")
    ok(daemon, "enqueue", "q", "t")
    # 3 attempts (backoff about 0.5 s, then 1 s), then exit 1 with the code.
    stderr = refused(daemon, "enqueue", "q", "t", "--call-attempts", "3").splitlines()
    full = "queue_full: queue 'q' is full: 1 pending >= max_pending 1"
    assert len(stderr) == 3 and stderr[-1] == f"sluice: {full}"
    for line, attempt in zip(stderr, (2, 3), strict=False):
        assert line.startswith(f"sluice: {full}; trying again in ")
        assert line.endswith(f" s (attempt {attempt})")
    # A 403 is not retried: it surfaces at once with its code.
    ok(daemon, "quota", "set", "--max-queues", "1")
    stderr = refused(daemon, "enqueue", "other", "t").splitlines()
    assert stderr == ["sluice: quota_exceeded: max_queues exceeded: 2 > 1"]


def test_the_cli_honours_retry_after_and_then_succeeds(daemon):
    ok(daemon, "quota", "set", "--request-rate", "1,0.5")  # one request each 2 s
    ok(daemon, "quota", "get")  # spends the token (a token's hello is free)
    proc = sluice(daemon, "enqueue", "q", "t")  # refused once, retry_after 1-2, then lands
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("sluice: rate_limited: request rate limit exceeded; "
                                  "trying again in ")  # fmt: skip
    delay = float(proc.stderr.split("trying again in ")[1].split()[0])
    assert 0.8 <= delay <= 2.4  # Retry-After 1 or 2 s (by the time it asks), ±20% jitter


def test_a_quota_set_while_work_runs_unlimited_applies_at_the_next_call(daemon):
    """A namespace without a quota skips the door and quota steps (one lookup per
    call); a document set mid-traffic must hold from the very next call, and a
    clear must lift it."""
    with daemon.client() as c:
        c.ok("enqueue_many", jobs=[job() for _ in range(4)])
        first = c.ok("claim_next", queues=["q"], max=1)["jobs"][0]["job"]  # unlimited: taken
        ok(daemon, "quota", "set", "--max-running", "1")
        empty = c.ok("claim_next", queues=["q"], max=2)  # 1 running already: none more
        assert empty["jobs"] == [] and empty["deferred"][0]["reason"] == "running_full"
        c.ok("complete", job_id=first["id"], lease=first["lease"])
        assert len(c.ok("claim_next", queues=["q"], max=2)["jobs"]) == 1  # the cap, not 2
        ok(daemon, "quota", "clear")
        assert len(c.ok("claim_next", queues=["q"], max=2)["jobs"]) == 2  # unlimited again
        # A door limit set now holds at once too (last: it would also hold the CLI back).
        ok(daemon, "quota", "set", "--request-rate", "2,0.001")
        c.ok("list", status="pending")
        c.ok("list", status="pending")
        refused = c.error("list", status="pending")  # the bucket of 2 is spent: 429
        assert refused["code"] == "rate_limited" and refused["limit"] == "request_rate"
