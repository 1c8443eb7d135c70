"""/healthz and /metrics."""

from __future__ import annotations

import pytest

from tests.support import metric, parse_metrics, sqlite_only, wait_until

pytestmark = pytest.mark.e2e


def test_healthz(daemon):
    with daemon.http() as http:
        r = http.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert set(r.json()) == {"status", "database"}
    if daemon.dsn is None:  # SQLite: the file the daemon holds open, no host
        expected = {"store": "sqlite", "reachable": True, "host": None,
                    "name": str(daemon.state.absolute() / "sluicegate.db")}  # fmt: skip
        assert r.json()["database"] == expected
    else:  # the [postgres] run (tests/e2e/test_postgres_operations.py has more)
        assert r.json()["database"]["store"] == "postgresql"


@sqlite_only
def test_sqlite_only_the_per_daemon_metrics_carry_the_daemon_name(make_daemon, tmp_path):
    """SQLite only (it names its own database file; PostgreSQL's series are
    tests/e2e/test_postgres_operations.py): the leader gauge (a lone daemon holds
    the retention lease), labelled with ``[daemon] name``; no PostgreSQL pool or
    notice series."""
    daemon = make_daemon(f'database = "{tmp_path / "own.db"}"\nname = "alpha"\n')
    leads = lambda: metric(daemon.metrics(), "sluicegate_leader",  # noqa: E731
                           role="retention", daemon="alpha")  # fmt: skip
    assert wait_until(leads, what="the retention lease taken") == 1
    names = {name for name, _labels in daemon.metrics()}
    assert not {n for n in names if n.startswith(("sluicegate_pg_pool", "sluicegate_notify"))}
    with daemon.client() as c:
        assert c.ok("status")["daemon"]["store"] == "sqlite"


def test_metrics_count_what_happened(daemon, connect):
    c = connect(daemon)
    for _ in range(3):
        c.ok("enqueue", queue="q", type="t")
    c.ok("enqueue", queue="r", type="t")
    j1, j2 = (j["job"] for j in c.ok("claim_next", queues=["q"], max=2)["jobs"])
    c.ok("complete", job_id=j1["id"], lease=j1["lease"])
    c.ok("fail", job_id=j2["id"], lease=j2["lease"], error="e", retry_in_ms=0)
    lease = c.ok("claim", job_id=j2["id"])["job"]["lease"]
    c.ok("fail", job_id=j2["id"], lease=lease, error="e", dead=True)

    m = daemon.metrics()
    assert metric(m, "sluicegate_jobs_enqueued_total", queue="q") == 3
    assert metric(m, "sluicegate_jobs_enqueued_total", queue="r") == 1
    assert metric(m, "sluicegate_jobs_claimed_total", queue="q") == 3
    assert metric(m, "sluicegate_jobs_completed_total", queue="q") == 1
    assert metric(m, "sluicegate_jobs_failed_total", queue="q") == 2
    assert metric(m, "sluicegate_jobs_dead_total", queue="q") == 1
    assert metric(m, "sluicegate_jobs_claimed_total", queue="r") in (None, 0)
    gauges = {
        (dict(labels)["queue"], dict(labels)["status"]): value
        for (name, labels), value in m.items()
        if name == "sluicegate_jobs"
    }
    assert {k: v for k, v in gauges.items() if v} == {
        ("q", "pending"): 1, ("q", "completed"): 1, ("q", "dead"): 1, ("r", "pending"): 1,
    }  # fmt: skip
    assert metric(m, "sluicegate_claim_wait_seconds_count", queue="q") == 3
    assert metric(m, "sluicegate_claim_wait_seconds_bucket", queue="q", le="+Inf") == 3
    assert metric(m, "sluicegate_claim_wait_seconds_sum", queue="q") >= 0


def test_metrics_queue_label_is_capped(make_daemon, connect):
    daemon = make_daemon("metrics_max_queues = 2\n")
    c = connect(daemon)
    for queue in ["q1", "q2", "q3", "q4", "q1"]:
        c.ok("enqueue", queue=queue, type="t")
    m = daemon.metrics()
    assert metric(m, "sluicegate_jobs_enqueued_total", queue="q1") == 2
    assert metric(m, "sluicegate_jobs_enqueued_total", queue="q2") == 1
    assert metric(m, "sluicegate_jobs_enqueued_total", queue="__other__") == 2
    assert metric(m, "sluicegate_jobs", queue="__other__", status="pending") == 2
    labels = {dict(labels).get("queue") for (_name, labels) in m}
    assert not labels & {"q3", "q4"}


def test_metrics_token(make_daemon):
    daemon = make_daemon('metrics_token = "s3cret"\n')
    with daemon.http() as anonymous, daemon.http("wrong") as wrong:
        assert anonymous.get("/metrics").status_code == 401
        assert wrong.get("/metrics").status_code == 401
        assert anonymous.get("/healthz").status_code == 200
    with daemon.http("s3cret") as http:
        r = http.get("/metrics")
        assert r.status_code == 200
        assert metric(parse_metrics(r.text), "sluicegate_waiting_claims") == 0
