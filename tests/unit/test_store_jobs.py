"""daemon/store/jobs.py: the claim statement reads the partial ready index, whatever the backlog.

The plan is read with ``EXPLAIN QUERY PLAN`` on the very statements a claim runs
(captured with the connection's trace callback), so the property holds for the
SQL as written, not for a copy of it.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.store import jobs as sql
from daemon.store.database import open_database

NOW = 1_700_000_000_000
STATES = ("scheduled", "pending", "parked", "running", "completed", "dead")


def _row(job_id: str, queue: str, state: str, priority: int, ready_at: int) -> tuple:
    parked_on = None
    if state == "parked":  # pending, but parked on a budget: not claimable
        state, parked_on = "pending", "budget"
    values = {
        "id": job_id, "namespace": "ns", "queue": queue, "type": "t", "payload": "{}",
        "priority": priority, "state": state, "attempts": 0, "max_attempts": 5,
        "lease_ms": 30_000, "ready_at": ready_at, "created_at": NOW, "updated_at": NOW,
        "finished_at": None, "lease": None, "lease_expires_at": None, "unique_key": None,
        "budgets": None, "error": None, "result": None, "dead": None, "parked_on": parked_on,
    }  # fmt: skip
    return tuple(values[c] for c in sql.COLUMNS)


def _claim(conn, queues, limit, lease="lease", lease_ms=None):
    return sql.mark_running(conn, sql.ready(conn, "ns", queues, limit), lease, lease_ms, NOW)


def _plan(conn, statement: str) -> list[tuple[int, int, str]]:
    return [(r[0], r[1], r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + statement)]


def _claim_capturing(conn, queues, limit):
    """Run a claim in a transaction that is rolled back; return its rows and statements."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = _claim(conn, queues, limit)
    finally:
        conn.execute("ROLLBACK")
        conn.set_trace_callback(None)
    return rows, [s for s in statements if s.split()[0] in ("SELECT", "UPDATE", "WITH")]


def _check_plan(conn, statements: list[str], n_queues: int) -> None:
    reads = [s for s in statements if "ix_jobs_ready" in s]
    assert len(reads) == 1, statements
    plan = _plan(conn, reads[0])
    details = [d for _i, _p, d in plan]
    probes = [(i, p) for i, p, d in plan if d.startswith("SEARCH jobs USING INDEX ix_jobs_ready")]
    assert len(probes) == n_queues, details
    for _i, _p, d in plan:
        # Every read of jobs is an indexed search: never a scan of the table.
        assert not d.startswith("SCAN jobs"), details
    for _probe, parent in probes:
        siblings = [d for _i, p, d in plan if p == parent]
        assert not any("TEMP B-TREE" in d for d in siblings), details
        assert "(namespace=? AND queue=?)" in next(d for i, _p, d in plan if i == _probe)
    # Writes that follow find their rows by primary key.
    for statement in statements:
        if statement.startswith("UPDATE"):
            for _i, _p, d in _plan(conn, statement):
                assert "SCAN jobs" not in d, d


@given(
    counts=st.dictionaries(st.sampled_from(STATES), st.integers(0, 400), min_size=1),
    n_queues=st.integers(1, 3),
    limit=st.integers(1, 20),
    analyze=st.booleans(),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_claim_reads_the_ready_index_whatever_the_backlog(counts, n_queues, limit, analyze, seed):
    rng = random.Random(seed)
    db = open_database(":memory:")
    try:
        conn = db.conn
        queues = [f"q{i}" for i in range(n_queues)]
        rows = []
        n = 0
        for state, count in counts.items():
            for _ in range(count):
                n += 1
                rows.append(_row(f"{n:026d}", rng.choice([*queues, "other"]), state,
                                 rng.choice([0, 5, 32768]), NOW - rng.randint(0, 10)))  # fmt: skip
        conn.execute("BEGIN")
        sql.insert(conn, rows)
        conn.execute("COMMIT")
        if analyze:
            conn.execute("ANALYZE")
        claimed, statements = _claim_capturing(conn, queues, limit)
        _check_plan(conn, statements, n_queues)
        expected = sorted(
            (
                r
                for r in rows
                if r[sql.STATE] == "pending" and r[sql.PARKED_ON] is None and r[sql.QUEUE] in queues
            ),
            key=lambda r: (r[sql.PRIORITY], r[sql.READY_AT], r[sql.ID]),
        )[:limit]
        assert [r[sql.ID] for r in claimed] == [r[sql.ID] for r in expected]
        assert all(r[sql.STATE] == "running" and r[sql.ATTEMPTS] == 1 for r in claimed)
    finally:
        db.conn.close()


def test_claim_marks_rows_running_with_one_lease(tmp_path):
    db = open_database(tmp_path / "c.db")
    try:
        conn = db.conn
        conn.execute("BEGIN")
        sql.insert(conn, [_row("a", "q", "pending", 1, NOW), _row("b", "q", "pending", 2, NOW),
                          _row("c", "q", "scheduled", 0, NOW + 10)])  # fmt: skip
        claimed = _claim(conn, ["q"], 5, "L", 2_000)
        conn.execute("COMMIT")
        assert [r[sql.ID] for r in claimed] == ["a", "b"]
        stored = conn.execute(
            "SELECT id, state, attempts, lease, lease_expires_at FROM jobs ORDER BY id"
        ).fetchall()
        assert stored == [("a", "running", 1, "L", NOW + 2_000),
                          ("b", "running", 1, "L", NOW + 2_000),
                          ("c", "scheduled", 0, None, None)]  # fmt: skip
    finally:
        db.conn.close()


def test_promote_and_lapse_queries_are_indexed(tmp_path):
    db = open_database(tmp_path / "p.db")
    try:
        conn = db.conn
        for statement, index in [
            ("SELECT min(ready_at) FROM jobs WHERE state = 'scheduled'", "ix_jobs_scheduled"),
            ("SELECT min(lease_expires_at) FROM jobs WHERE state = 'running'", "ix_jobs_lease"),
        ]:
            details = " ".join(d for _i, _p, d in _plan(conn, statement))
            assert index in details, details
        # And the store's own functions answer from those rows.
        conn.execute("BEGIN")
        sql.insert(conn, [_row("s", "q", "scheduled", 1, NOW + 5)])
        conn.execute("COMMIT")
        assert sql.earliest_scheduled(conn) == NOW + 5
        assert sql.earliest_lease_expiry(conn) is None
    finally:
        db.conn.close()
