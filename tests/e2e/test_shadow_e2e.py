"""Shadow mode end to end on one daemon: provisioned shadowed limits let a burst
through, the metric and the log say what they would have held, HTTP carries the
flag, and a config reload that enforces holds the next claim."""

from __future__ import annotations

import signal

import pytest

from tests.support import metric, parse_metrics, wait_until

pytestmark = pytest.mark.e2e

TABLES = """
[policies.default.q]
max_claims_per_window = 2
window = { period = "day", tz = "UTC", start = "00:00" }
enforce = false

[budgets.default.b]
allocation = 1
strategy = { type = "while_in_flight" }
enforce = false
"""


def test_shadowed_limits_count_then_enforce_after_a_reload(make_daemon, connect):
    daemon = make_daemon(TABLES)
    client = connect(daemon)
    client.ok("enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 5)
    client.ok("enqueue_many", jobs=[{"queue": "r", "type": "t", "budgets": [{"key": "b"}]}] * 3)
    claimed = [client.ok("claim_next", queues=["q", "r"])["jobs"] for _ in range(8)]
    assert [len(jobs) for jobs in claimed] == [1] * 8
    with daemon.http() as http:
        samples = parse_metrics(http.get("/metrics").text)
        budget = http.get("/budgets/b").json()
        bad = http.put("/api/v1/admission/other", json={"max_in_flight": 1, "enforce": "no"})
    name = "sluicegate_admission_decisions_total"
    assert metric(samples, name, limit="policy.window", outcome="would_block") == 3
    assert metric(samples, name, limit="budget", outcome="would_block") == 2
    assert budget["enforce"] is False and budget["state"]["in_flight"] == 3
    assert (bad.status_code, bad.json()["field"]) == (422, "enforce")
    wait_until(lambda: "limit=policy.window queue=q jobs=1 would_block=true" in daemon.log_text(),
               what="the would_block line")  # fmt: skip

    daemon.config_path.write_text(daemon.config_path.read_text().replace("enforce = false\n", ""))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "enforce" not in client.ok("policy_get", queue="q")["policy"],
               what="the reload")  # fmt: skip
    client.ok("enqueue", queue="q", type="t")
    held = client.ok("claim_next", queues=["q"])
    assert held["jobs"] == [] and held["deferred"][0]["reason"] == "window_exhausted"
    audit = client.ok("audit_list", target_kind="queue", target="q")["records"]
    assert audit[-1]["actor"] == "config" and audit[-1]["before"]["enforce"] is False
