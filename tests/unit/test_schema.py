"""daemon/store/schema.py: versioned migrations in PRAGMA user_version."""

from __future__ import annotations

import sqlite3

import pytest
import sqlite_utils

from daemon.store import schema
from daemon.store.migration import SchemaTooNew
from daemon.store.opening import open_database


@pytest.fixture
def db(tmp_path):
    conn = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    yield sqlite_utils.Database(conn)
    conn.close()


def _schema_sql(db) -> list[tuple]:
    return db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def test_migrate_a_new_database(db):
    assert schema.schema_version(db) == 0
    assert schema.migrate(db) == len(schema.MIGRATIONS)
    assert schema.schema_version(db) == len(schema.MIGRATIONS)
    assert {"jobs", "queues", "settings", "audit"} <= set(db.table_names())
    indexes = {name for _t, name, _s in _schema_sql(db)}
    assert {"ix_jobs_ready", "ix_jobs_scheduled", "ix_jobs_lease", "ux_jobs_unique"} <= indexes
    assert not db.conn.in_transaction


def test_the_ready_index_is_partial_on_pending():
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db = sqlite_utils.Database(conn)
        schema.migrate(db)
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'ix_jobs_ready'"
        ).fetchone()
        assert "WHERE state = 'pending'" in sql
        assert "(namespace, queue, priority, ready_at, id)" in sql
    finally:
        conn.close()


def test_rerunning_is_a_no_op(db):
    schema.migrate(db)
    before = _schema_sql(db)
    db["jobs"].insert({"id": "x", "namespace": "n", "queue": "q", "type": "t", "payload": "{}",
                       "priority": 1, "state": "pending", "attempts": 0, "max_attempts": 1,
                       "lease_ms": 1, "ready_at": 0, "created_at": 0, "updated_at": 0})  # fmt: skip
    assert schema.migrate(db) == len(schema.MIGRATIONS)
    assert _schema_sql(db) == before
    assert db["jobs"].count == 1


def test_open_database_twice_keeps_the_data(tmp_path):
    path = tmp_path / "d.db"
    db = open_database(path)
    db.conn.execute("INSERT INTO settings (key, value, updated_at) VALUES ('k', 'v', 1)")
    db.conn.close()
    db = open_database(path)
    try:
        assert db.execute("SELECT value FROM settings").fetchall() == [("v",)]
        assert schema.schema_version(db) == len(schema.MIGRATIONS)
    finally:
        db.conn.close()


def test_a_newer_database_is_refused(db):
    db.execute(f"PRAGMA user_version = {len(schema.MIGRATIONS) + 1}")
    with pytest.raises(RuntimeError, match="newer than this sluicegate"):
        schema.migrate(db)
    assert db.table_names() == []
    assert schema.schema_version(db) == len(schema.MIGRATIONS) + 1


def test_a_failing_migration_leaves_the_previous_version(db, monkeypatch):
    schema.migrate(db)
    version = schema.schema_version(db)

    def broken(d):
        d["half_made"].create({"id": int}, pk="id")
        raise ValueError("boom")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, broken])
    with pytest.raises(ValueError, match="boom"):
        schema.migrate(db)
    assert schema.schema_version(db) == version
    assert "half_made" not in db.table_names()
    assert not db.conn.in_transaction


def test_migrations_apply_in_order_from_the_stored_version(db, monkeypatch):
    schema.migrate(db)
    seen = []
    monkeypatch.setattr(
        schema, "MIGRATIONS",
        [*schema.MIGRATIONS, lambda d: seen.append(schema.schema_version(d)),
         lambda d: seen.append(schema.schema_version(d))],
    )  # fmt: skip
    assert schema.migrate(db) == len(schema.MIGRATIONS)
    base = len(schema.MIGRATIONS) - 2
    assert seen == [base, base + 1]
    assert schema.schema_version(db) == base + 2


def test_one_list_numbers_its_migrations_in_order():
    assert [m.version for m in schema.MIGRATIONS] == list(range(1, len(schema.MIGRATIONS) + 1))
    assert len({m.name for m in schema.MIGRATIONS}) == len(schema.MIGRATIONS)
    assert all(m.postgres and callable(m.sqlite) for m in schema.MIGRATIONS)


def test_a_newer_database_is_refused_naming_both_versions(db):
    latest = len(schema.MIGRATIONS)
    db.execute(f"PRAGMA user_version = {latest + 1}")
    with pytest.raises(SchemaTooNew) as refused:
        schema.migrate(db)
    assert str(refused.value) == (
        f"database schema version {latest + 1} is newer than this sluicegate ({latest}); "
        "upgrade sluicegate"
    )
    assert (refused.value.found, refused.value.known) == (latest + 1, latest)


def test_status_before_and_after_migrating(db):
    names = [m.name for m in schema.MIGRATIONS]
    before = schema.sqlite_status(db)
    assert (before.dialect, before.current, before.latest) == ("sqlite", 0, len(names))
    assert before.applied == ()
    assert [(s.version, s.name) for s in before.pending] == list(enumerate(names, start=1))
    assert not before.up_to_date and not before.too_new

    schema.migrate(db)
    after = schema.sqlite_status(db)
    assert (after.current, after.latest, after.pending) == (len(names), len(names), ())
    assert [s.name for s in after.applied] == names
    # user_version is a bare number: SQLite cannot say when.
    assert {s.applied_at for s in after.applied} == {None}
    assert after.up_to_date and not after.too_new


def test_status_of_a_newer_database(db):
    latest = len(schema.MIGRATIONS)
    db.execute(f"PRAGMA user_version = {latest + 2}")
    status = schema.sqlite_status(db)
    assert (status.current, status.latest, status.pending) == (latest + 2, latest, ())
    assert len(status.applied) == latest  # the versions past this build have no names here
    assert status.too_new and not status.up_to_date


#: Rows before version 9 (stacked windows): a windowed policy's usage, an
#: in-flight-only policy's none, a cleared policy's, and a policy failing closed.
USAGE_BEFORE_V9 = (
    "INSERT INTO policies VALUES ('ns', 'daily', '{\"max_in_flight\":null,"
    '"max_claims_per_window":3,"window":{"period":"day","tz":"UTC","start":"00:00"}}'
    "', 1, 1, 'a', 'a', 'api')",
    "INSERT INTO policies VALUES ('ns', 'bad', 'not json', 1, 1, 'a', 'a', 'api')",
    "INSERT INTO policy_usage VALUES ('ns', 'daily', 100, 3)",
    "INSERT INTO policy_usage VALUES ('ns', 'daily', 200, 1)",
    "INSERT INTO policy_usage VALUES ('ns', 'gone', 100, 2)",
    "INSERT INTO policy_usage VALUES ('ns', 'bad', 100, 1)",
)
USAGE_AFTER_V9 = [("ns", "bad", "", 100, 1), ("ns", "daily", "day", 100, 3),
                  ("ns", "daily", "day", 200, 1), ("ns", "gone", "", 100, 2)]  # fmt: skip


def test_version_9_keys_each_usage_row_by_its_policys_window(db, monkeypatch):
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:7])
    schema.migrate(db)
    for statement in USAGE_BEFORE_V9:
        db.execute(statement)
    monkeypatch.undo()
    assert schema.migrate(db) == len(schema.MIGRATIONS)
    rows = db.execute("SELECT namespace, queue, window_key, window_start, used FROM policy_usage "
                      "ORDER BY 1, 2, 3, 4").fetchall()  # fmt: skip
    assert rows == USAGE_AFTER_V9
    # A second's row and a day's at the same instant are two rows now.
    db.execute("INSERT INTO policy_usage (namespace, queue, window_key, window_start, used) "
               "VALUES ('ns', 'daily', 'second', 100, 5)")  # fmt: skip
    at_100 = db.execute("SELECT count(*) FROM policy_usage WHERE window_start = 100")
    assert at_100.fetchone() == (4,)
