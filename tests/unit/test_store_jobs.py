"""daemon/store/jobs.py: the claim statement reads the partial ready index, whatever the backlog.

The plan is read with ``EXPLAIN QUERY PLAN`` on the very statements a claim runs
(captured with the connection's trace callback), so the property holds for the
SQL as written, not for a copy of it.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.store import jobs as sql
from daemon.store.opening import open_database

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
        "grp": None,
    }  # fmt: skip
    return tuple(values[c] for c in sql.COLUMNS)


def _claim(conn, queues, limit, lease="lease", lease_ms=None):
    return sql.mark_running(conn, sql.ready(conn, "ns", queues, limit), lease, lease_ms, NOW)


def _plan(conn, statement: str, params: tuple = ()) -> list[tuple[int, int, str]]:
    return [(r[0], r[1], r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + statement, params)]


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


def _stored(conn) -> dict[str, tuple]:
    return {r[0]: tuple(r) for r in conn.execute(f"SELECT {sql.COLS} FROM jobs")}


@pytest.fixture
def conn(tmp_path):
    db = open_database(tmp_path / "jobs.db")
    yield db.conn
    db.conn.close()


def test_insert_stores_plain_and_full_rows_alike(conn):
    # A fresh job binds 13 columns, a row with any later column set binds all 23:
    # both must read back exactly as given, in one batch.
    plain = _row("p", "q", "pending", 1, NOW)
    keyed = (*_row("k", "q", "pending", 1, NOW)[:16], "key", *(None,) * 6)
    grouped = (*_row("g", "q", "pending", 1, NOW)[:22], "gold")
    shed = _row("s", "q", "dead", 1, NOW)
    shed = (*shed[:13], NOW, None, None, None, '[{"key":"b","cost":1}]', "quota", None,
            '{"reason":"shed"}', None, None)  # fmt: skip
    zero = (*_row("z", "q", "pending", 0, 0)[:13], 0, *(None,) * 9)  # falsy, not NULL
    with conn:
        sql.insert(conn, [plain, keyed, shed, zero, grouped])
    assert _stored(conn) == {"p": plain, "k": keyed, "s": shed, "z": zero, "g": grouped}


def test_mark_running_marks_every_row_of_a_claim_whatever_its_size(conn):
    # One statement per up to 512 ids, padded to a power of two: 700 rows take
    # two statements, the second padded from 188 to 256 ids.
    rows = [_row(f"j{i:04d}", "q", "pending", 1, NOW) for i in range(700)]
    rows[5] = (*rows[5][: sql.LEASE_MS], 9_000, *rows[5][sql.LEASE_MS + 1 :])
    with conn:
        sql.insert(conn, [*rows, _row("other", "q", "pending", 1, NOW)])
        claimed = sql.mark_running(conn, rows, "L", None, NOW + 1)
    stored = _stored(conn)
    assert claimed == [stored[r[sql.ID]] for r in rows]
    assert {r[sql.STATE] for r in claimed} == {"running"}
    assert {r[sql.ATTEMPTS] for r in claimed} == {1}
    assert stored["j0005"][sql.LEASE_EXPIRES_AT] == NOW + 1 + 9_000  # its own lease_ms
    assert stored["j0006"][sql.LEASE_EXPIRES_AT] == NOW + 1 + 30_000
    assert stored["other"][sql.STATE] == "pending"  # padding never reaches another row
    with conn:  # their leases lapsed and they were reaped: claimed again
        lapsed = [r._replace(state="pending") for r in claimed[:3]]
        conn.executemany("UPDATE jobs SET state = 'pending' WHERE id = ?", [r[:1] for r in lapsed])
        again = sql.mark_running(conn, lapsed, "M", 1_000, NOW + 2)
    assert [r[sql.ATTEMPTS] for r in again] == [2, 2, 2]
    assert _stored(conn)["j0000"][sql.LEASE_EXPIRES_AT] == NOW + 2 + 1_000


def test_complete_many_groups_by_lease_and_result_and_refuses_as_a_whole(conn):
    with conn:
        sql.insert(conn, [_row(f"j{i:04d}", "q", "pending", 1, NOW) for i in range(600)])
        first = sql.mark_running(conn, sql.ready(conn, "ns", ["q"], 550), "A", None, NOW)
        second = sql.mark_running(conn, sql.ready(conn, "ns", ["q"], 50), "B", None, NOW)
    # A job named twice, or one whose lease is not its own: nothing changes.
    with conn:
        assert sql.complete_many(conn, [(first[0], None), (first[0], None)], NOW + 5) is None
        stale = (*first[1][: sql.LEASE], "B", *first[1][sql.LEASE + 1 :])
        assert sql.complete_many(conn, [(first[2], None), (stale, None)], NOW + 5) is None
    assert {r[sql.STATE] for r in _stored(conn).values()} == {"running"}
    items = [(row, None) for row in first[:540]] + [(first[540], '"x"'), (first[541], '"y"')]
    items += [(row, '"x"') for row in second]
    with conn:
        done = sql.complete_many(conn, items, NOW + 5)
    stored = _stored(conn)
    assert done == [stored[row[sql.ID]] for row, _r in items]
    assert {r[sql.STATE] for r in done} == {"completed"}
    assert stored[first[540][sql.ID]][sql.RESULT] == '"x"'
    assert stored[first[541][sql.ID]][sql.RESULT] == '"y"'
    assert stored[second[0][sql.ID]][sql.RESULT] == '"x"'
    assert stored[first[0][sql.ID]][sql.RESULT] is None
    left = [r for r in stored.values() if r[sql.STATE] == "running"]
    assert [r[sql.ID] for r in left] == [r[sql.ID] for r in first[542:]]


def test_the_id_list_updates_search_by_id_whatever_the_statistics(conn):
    # With few running jobs among many, the partial lease index looks cheap to
    # the planner; a claim or completion must still find its rows by id.
    rows = [_row(f"j{i:05d}", "q", "completed", 1, NOW) for i in range(3000)]
    rows += [_row(f"r{i:02d}", "q", "running", 1, NOW) for i in range(10)]
    with conn:
        sql.insert(conn, rows)
    conn.execute("ANALYZE")
    for size in (1, 3, 64, 512):
        ids = [f"r{i:02d}" for i in range(min(size, 10))] * (size // min(size, 10) + 1)
        for template, head in ((sql._MARK_RUNNING, ("L", NOW, None, NOW)),
                               (sql._COMPLETE_MANY, (NOW, NOW, None))):  # fmt: skip
            statement, params = sql._in_list(template, ids[:size])
            tail = ("L",) if template is sql._COMPLETE_MANY else ()
            plan = [d for _i, _p, d in _plan(conn, statement, (*head, *params, *tail))]
            assert plan == ["SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)"], plan
