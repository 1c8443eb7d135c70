"""The door end to end: the same burst over the socket and over HTTP meets the
same limit with the same outcome; shadow mode lets it through and says so."""

from __future__ import annotations

import pytest

from tests.support import wait_until

pytestmark = pytest.mark.e2e

BUCKET = {"request_rate": {"capacity": 2, "refill_per_s": 0.001}}


def test_a_burst_over_the_socket_and_over_http_meets_the_same_limit(make_daemon):
    daemon = make_daemon()
    with daemon.client() as c:
        for ns in ("s", "h"):
            c.ok("quota_set", namespace=ns, quota=BUCKET)
        socket_answers = [c.call("status", namespace="s") for _ in range(3)]
    with daemon.http() as http:
        replies = [http.post("/v1/ops/status", json={"namespace": "h"}) for _ in range(3)]
    assert [a["ok"] for a in socket_answers] == [True, True, False]
    assert [r.status_code for r in replies] == [200, 200, 429]
    refused = socket_answers[2]["error"]
    body = replies[2].json()
    assert (refused["code"], refused["message"]) == ("rate_limited", "request rate limit exceeded")
    assert {k: body[k] for k in ("error", "code")} == {
        "error": "request rate limit exceeded", "code": "rate_limited",
    }  # fmt: skip
    assert int(replies[2].headers["retry-after"]) == body["retry_after"] == refused["retry_after"]
    assert 1 <= refused["retry_after"] <= 60


def test_shadow_mode_lets_the_burst_through_and_logs_would_block(make_daemon):
    daemon = make_daemon("enforce = false\n")
    with daemon.client() as c:
        c.ok("quota_set", quota=BUCKET)
        assert all(c.call("status")["ok"] for _ in range(4))
        job = c.ok("enqueue", queue="q", type="t", payload={"a": 1})["job"]
        c.ok("quota_set", quota={"max_item_bytes": 6})
        too_big = c.error("enqueue", queue="q", type="t", payload={"a": 1})
    assert job["payload"] == {"a": 1}
    assert (too_big["code"], too_big["message"]) == (
        "payload_too_large",
        "max_item_bytes exceeded: 7 > 6",
    )  # hard even in shadow mode
    wait_until(
        lambda: "limits namespace=default limit=request_rate would_block=true" in daemon.log_text(),
        what="the would_block line",
    )


def test_the_monthly_quota_blocks_over_http_and_a_restart_re_blocks(make_daemon):
    daemon = make_daemon('rollup_interval = "1s"\n')
    job = {"queue": "q", "type": "t", "payload": {}}
    with daemon.client() as c:
        c.ok("quota_set", quota={"monthly_jobs_quota": 2})
        c.ok("enqueue_many", jobs=[job, job])
        wait_until(lambda: c.ok("status")["quota"]["usage"]["monthly_blocked"],
                   what="the roll-up tick")  # fmt: skip
    expected = {
        "error": "monthly_jobs_quota exceeded: 2 >= 2; the block lifts at the next calendar month",
        "code": "quota_exceeded", "limit": "monthly_jobs_quota", "value": 2, "max": 2,
    }  # fmt: skip
    with daemon.http() as http:
        reply = http.post("/jobs", json=job)
        assert (reply.status_code, reply.json()) == (403, expected)
        assert "retry-after" not in reply.headers  # a 403: retrying will not help
    daemon.stop()
    daemon.start()
    with daemon.client() as c:  # the first tick runs at start: blocked again at once
        wait_until(lambda: c.ok("status")["quota"]["usage"]["monthly_blocked"],
                   what="the first tick")  # fmt: skip
        assert c.error("enqueue", **job)["code"] == "quota_exceeded"
    assert "limit=monthly_jobs_quota level=100 used=2 max=2" in daemon.log_text()
