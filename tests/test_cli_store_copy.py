"""``sluice store copy``: a whole store, SQLite to PostgreSQL and back, row for row.

The source is made by the real core on a virtual clock (budgets with their pool
state, a queue policy with window usage, a quota, queue TTLs, jobs in every
state and parked, a periodic entry that fired, audit, usage meters and a level,
the retention leader's row), plus rows at the edges of what a column holds
(64-bit integers, NULLs, text beyond ASCII). Every table of the schema must hold
a row, so a table a new migration adds fails here until the builder fills it.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import trio
import trio.testing

from actors.clock import Clock
from daemon.cli.main import main
from daemon.config import parse_config
from daemon.core import Core
from daemon.main import periodic_scheduler
from daemon.store.copier import copy_store
from daemon.store.copy_layout import schema_tables
from daemon.store.opening import open_database
from daemon.store.schema import MIGRATIONS
from tests.postgres import run_asyncio
from tests.unit.harness import WALL0, call, claim_jobs, enqueue_job

Dump = dict[str, list[tuple[Any, ...]]]

_CONFIG = {
    "daemon": {"rollup_interval": "1m"},
    "periodic": [{"name": "tick", "queue": "cron", "type": "t", "every": "1m"}],
}
_DAY_LA = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}
#: Rows at the edges: the largest and smallest 64-bit integers, NULLs, text of every kind.
_EDGE_SQL = (
    (
        "INSERT INTO jobs (id, namespace, queue, type, payload, priority, state, attempts, "
        "max_attempts, lease_ms, ready_at, created_at, updated_at, finished_at, lease, "
        "lease_expires_at, unique_key, budgets, error, result, dead, parked_on) "
        "VALUES ('zz-edge', 'ns ✓', 'q''\"', 'τύπος', '{\"a\":\"😀\\n\\t\"}', ?, 'scheduled', "
        "0, ?, 1, ?, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        (-(2**63), 2**63 - 1, 2**63 - 1),
    ),
    (
        "INSERT INTO audit (id, at, actor, namespace, target_kind, target, action, before, after) "
        "VALUES (?, ?, 'öpërätor', 'default', 'budget', 'x', 'delete', '', NULL)",
        (2**40, -1),
    ),
    ("INSERT INTO settings (key, value, updated_at) VALUES ('', '', ?)", (2**63 - 1,)),
)


async def _drive(path: Path) -> None:
    cfg = parse_config(_CONFIG, "test.toml")
    db = open_database(path)
    try:
        core = Core(cfg, db, Clock(wall_start_ms=WALL0))
        scheduler = periodic_scheduler(core, cfg.periodic)
        async with trio.open_nursery() as nursery:
            await nursery.start(core.run)
            await nursery.start(scheduler.run)
            await call(core, "budget_create", key="pool", allocation=2,
                       strategy={"type": "while_in_flight"})  # fmt: skip
            drip = {"type": "time_based", "duration_ms": 60_000, "burst": 2}
            await call(core, "budget_create", key="drip", allocation=6, strategy=drip)
            await call(core, "policy_set", queue="q", max_in_flight=5,
                       max_claims_per_window=50, window=_DAY_LA)  # fmt: skip
            await call(core, "quota_set", quota={"max_pending": 1000, "monthly_jobs_quota": 12})
            await call(core, "queue_configure", queue="q", completed_ttl_ms=86_400_000,
                       dead_ttl_ms=86_400_000)  # fmt: skip
            for i in range(4):  # two run on the pool, two wait parked on it
                await enqueue_job(core, payload={"i": i, "text": "ünïcødé ✓"},
                                  budgets=[{"key": "pool", "cost": 1}])  # fmt: skip
            await enqueue_job(core, budgets=[{"key": "drip", "cost": 2}], priority=5)
            await enqueue_job(core, unique_key="u1", payload=None)
            await enqueue_job(core, queue="fair", group="customer ✓")  # grp, schema 8
            await trio.sleep(150)  # virtual time (autojump_clock): a periodic fire, a roll-up
            await enqueue_job(core, delay_ms=86_400_000, payload={"later": True})
            claimed = await claim_jobs(core, max=5)
            done, failed = claimed[:2]
            await call(core, "complete", job_id=done["id"], lease=done["lease"], result={"ok": 1})
            await call(core, "fail", job_id=failed["id"], lease=failed["lease"], error="boom",
                       dead=True)  # fmt: skip
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    finally:
        db.conn.close()


def build_store(path: Path) -> Path:
    """A SQLite store with a row in every table and a job in every state."""
    trio.run(_drive, path, clock=trio.testing.MockClock(autojump_threshold=0))
    conn = sqlite3.connect(path)
    with conn:
        for sql, args in _EDGE_SQL:
            conn.execute(sql, args)
    conn.close()
    return path


def sqlite_dump(path: Path) -> Dump:
    """Every table of the schema, every row, in key order."""
    conn = sqlite3.connect(path)
    try:
        return {t.name: conn.execute(_all_rows(t)).fetchall() for t in schema_tables()}
    finally:
        conn.close()


def pg_dump(dsn: str) -> Dump:
    """The same, read from PostgreSQL."""

    async def read() -> Dump:
        conn = await asyncpg.connect(dsn)
        try:
            return {
                t.name: [tuple(r) for r in await conn.fetch(_all_rows(t))] for t in schema_tables()
            }
        finally:
            await conn.close()

    return run_asyncio(read())


def _all_rows(table: Any) -> str:
    columns = ", ".join(f'"{c}"' for c in table.columns)
    return f'SELECT {columns} FROM "{table.name}" ORDER BY {", ".join(table.key)}'


def assert_equal_stores(left: Dump, right: Dump) -> None:
    """Equal row for row and value for value (``repr``: 1 is not True, nor 1.0)."""
    assert list(left) == list(right)
    for table in left:
        assert repr(left[table]) == repr(right[table]), table


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = build_store(tmp_path_factory.mktemp("source") / "sluicegate.db")
    dump = sqlite_dump(path)
    empty = [table for table, rows in dump.items() if not rows]
    assert not empty, f"the builder leaves these tables empty: {empty}"
    states = {row[6] for row in dump["jobs"]}
    assert states == {"scheduled", "pending", "running", "completed", "dead"}
    assert any(row[21] == "pool" for row in dump["jobs"])  # parked on its budget
    assert any(row[22] == "customer ✓" for row in dump["jobs"])  # a job's group
    return path


def copy(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["store", "copy", *args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.postgres
def test_sqlite_to_postgresql_and_back_gives_equal_stores(source, pg_dsn, tmp_path, capsys):
    # Small batches: every table is read over several keyset pages. (The server
    # trusts the tests' user: the password file is read, and not needed.)
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    status, out, err = copy(capsys, "--from", str(source), "--to", pg_dsn, "--batch", "3",
                            "--to-password-file", str(password))  # fmt: skip
    assert (status, err) == (0, "")
    rows = sum(len(r) for r in sqlite_dump(source).values())
    assert out.startswith(f"copied {rows:,} rows in {len(schema_tables())} tables from ")
    assert_equal_stores(sqlite_dump(source), pg_dump(pg_dsn))
    back = tmp_path / "back.db"
    assert copy(capsys, "--from", pg_dsn, "--to", str(back))[0] == 0
    assert_equal_stores(sqlite_dump(source), sqlite_dump(back))

    async def next_audit_id() -> int:  # the identity sequence was moved past the copied ids
        conn = await asyncpg.connect(pg_dsn)
        try:
            return await conn.fetchval(
                "INSERT INTO audit (at, actor, namespace, target_kind, target, action) "
                "VALUES (0, 'a', 'n', 'k', 't', 'x') RETURNING id"
            )
        finally:
            await conn.close()

    assert run_asyncio(next_audit_id()) == 2**40 + 1


def test_sqlite_to_sqlite_gives_an_equal_store(source, tmp_path, capsys):
    target = tmp_path / "new" / "copy.db"
    status, out, _err = copy(capsys, "--json", "--from", str(source), "--to", str(target))
    assert status == 0
    assert_equal_stores(sqlite_dump(source), sqlite_dump(target))
    assert f'"schema_version": {len(MIGRATIONS)}' in out and '"jobs": ' in out


def test_progress_counts_every_row_and_the_copy_is_one_snapshot(source, tmp_path):
    # The source is read in one read transaction: a row written to it while the
    # copy runs (here from the progress callback, after the first batch) is not copied.
    moving = tmp_path / "moving.db"
    moving.write_bytes(source.read_bytes())
    writer = sqlite3.connect(moving, isolation_level=None)
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        if len(seen) == 1:
            writer.execute("INSERT INTO settings (key, value, updated_at) VALUES ('late', 'x', 0)")
        seen.append((done, total))

    report = copy_store(str(moving), str(tmp_path / "copy.db"), batch_rows=4, progress=progress)
    writer.close()
    rows = sum(len(r) for r in sqlite_dump(source).values())
    assert report.rows == rows and seen[0] == (0, rows) and seen[-1] == (rows, rows)
    steps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
    assert all(1 <= step <= 4 for step in steps)
    assert_equal_stores(sqlite_dump(source), sqlite_dump(tmp_path / "copy.db"))
    assert ("late", "x", 0) in sqlite_dump(moving)["settings"]


def test_a_non_empty_sqlite_target_is_refused_and_left_unchanged(source, tmp_path, capsys):
    target = tmp_path / "busy.db"
    db = open_database(target)
    db.conn.execute("INSERT INTO leader (role, holder, expires_at) VALUES ('r', 'h', 1)")
    db.conn.close()
    before = target.read_bytes()
    status, out, err = copy(capsys, "--from", str(source), "--to", str(target))
    assert (status, out) == (1, "")
    assert err == (
        f"sluice: the target {target} is not empty (table leader has rows): "
        "copy into a new file or an empty database\n"
    )
    assert target.read_bytes() == before


@pytest.mark.postgres
def test_a_non_empty_postgresql_target_is_refused_and_left_unchanged(source, pg_dsn, capsys):
    assert copy(capsys, "--from", str(source), "--to", pg_dsn)[0] == 0
    before = pg_dump(pg_dsn)
    status, _out, err = copy(capsys, "--from", str(source), "--to", pg_dsn)
    assert status == 1 and "is not empty (table jobs has rows)" in err
    assert_equal_stores(before, pg_dump(pg_dsn))


@pytest.mark.postgres
def test_a_value_the_target_refuses_rolls_the_whole_copy_back(source, pg_dsn, tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_bytes(source.read_bytes())
    conn = sqlite3.connect(bad)
    with conn:  # SQLite keeps text in an INTEGER column; PostgreSQL's bigint will not
        conn.execute("UPDATE usage_days SET jobs = 'many'")
    conn.close()
    status, _out, err = copy(capsys, "--from", str(bad), "--to", pg_dsn)
    assert status == 1
    assert err.startswith("sluice: copying table usage_days failed: ")
    assert err.endswith("; nothing was copied\n") and err.count("\n") == 1
    assert all(rows == [] for rows in pg_dump(pg_dsn).values())


def test_a_source_behind_this_schema_is_refused_naming_the_migration(tmp_path, capsys):
    old = tmp_path / "old.db"
    db = open_database(old)
    db.conn.execute("PRAGMA user_version = 5")
    db.conn.close()
    status, _out, err = copy(capsys, "--from", str(old), "--to", str(tmp_path / "new.db"))
    assert status == 1
    assert err == (
        f"sluice: the source {old} is at schema version 5 of {len(MIGRATIONS)}: "
        "run `sluice db migrate` on it first (with it as [daemon] database)\n"
    )
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize(
    ("source", "target", "status", "message"),
    [
        ("mysql://u:hunter2@h/db", "x.db", 2,
         "unknown scheme mysql:// in mysql://u:***@h/db: give a SQLite file path or a "
         "postgresql:// DSN"),
        ("{tmp}/none.db", "{tmp}/x.db", 1, "no database at {tmp}/none.db"),
        ("{tmp}/not-a.db", "{tmp}/x.db", 1,
         "cannot read the database {tmp}/not-a.db: file is not a database"),
        ("{tmp}/not-a.db", "{tmp}/not-a.db", 2, "--from and --to name the same store"),
        ("postgresql://u:hunter2@127.0.0.1:1/db", "{tmp}/x.db", 1,
         "cannot reach postgresql://u:***@127.0.0.1:1/db: "),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_it(tmp_path, capsys, source, target, status, message):
    (tmp_path / "not-a.db").write_text("hello")
    got, out, err = copy(
        capsys, "--from", source.format(tmp=tmp_path), "--to", target.format(tmp=tmp_path)
    )
    assert (got, out) == (status, "")
    assert err.startswith("sluice: " + message.format(tmp=tmp_path))
    assert err.count("\n") == 1 and "hunter2" not in err and "Traceback" not in err
    assert not (tmp_path / "x.db").exists()


def test_a_password_file_is_for_a_dsn_and_must_be_readable(source, tmp_path, capsys):
    missing = tmp_path / "none"
    status, _out, err = copy(capsys, "--from", str(source), "--to", "x.db",
                             "--from-password-file", str(missing))  # fmt: skip
    assert (status, err) == (2, f"sluice: cannot read the password file {missing}: "
                                "No such file or directory\n")  # fmt: skip
    missing.write_text("pw")
    status, _out, err = copy(capsys, "--from", str(source), "--to", str(tmp_path / "x.db"),
                             "--from-password-file", str(missing))  # fmt: skip
    assert status == 2 and "a password file is for a postgresql:// DSN" in err
    assert not (tmp_path / "x.db").exists()
