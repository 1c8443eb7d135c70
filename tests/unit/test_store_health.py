"""daemon/store/health.py and its use by GroupCommit: a store that cannot write
answers ``unavailable``; only bugs answer ``internal``, each with a logged ref.

SQLITE_FULL comes from ``PRAGMA max_page_count`` (a real SQLITE_FULL without a
small filesystem); the end-to-end test on a tmpfs is tests/e2e/test_disk_full.py.
"""

from __future__ import annotations

import logging
import sqlite3

import pytest
import trio

from actors.errors import Refused, internal_error
from daemon.store import database, probe
from daemon.store.database import PROBE_FIRST, PROBE_MAX, GroupCommit
from daemon.store.health import StoreHealth, StoreUnavailable, is_store_failure, store_refusal
from daemon.store.opening import open_database


@pytest.fixture
def db(tmp_path):
    db = open_database(tmp_path / "h.db")
    db.conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB)")
    yield db
    db.conn.close()


def _fill(conn: sqlite3.Connection) -> None:
    """Cap the database at its current size: the next new page is SQLITE_FULL."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")


def _free(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA max_page_count = 1073741823")


def _full_error(conn: sqlite3.Connection) -> sqlite3.Error:
    _fill(conn)
    try:
        conn.execute("INSERT INTO t VALUES ('big', zeroblob(100000))")
    except sqlite3.Error as exc:
        return exc
    finally:
        _free(conn)
    raise AssertionError("the insert did not fail")


def _put(key: str, size: int = 10):
    def fn(tx):
        tx.conn.execute("INSERT INTO t VALUES (?, zeroblob(?))", (key, size))
        return key

    return fn


def _keys(db) -> list[str]:
    return [k for (k,) in db.conn.execute("SELECT k FROM t ORDER BY k")]


def test_store_errors_are_unavailable_with_retry_after(db, tmp_path):
    full = _full_error(db.conn)
    ro = sqlite3.connect(f"file:{tmp_path / 'h.db'}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.Error) as readonly:
            ro.execute("INSERT INTO t VALUES ('x', 1)")
    finally:
        ro.close()
    with pytest.raises(sqlite3.Error) as cantopen:
        sqlite3.connect(str(tmp_path / "missing" / "x.db"))
    for exc, cause in (
        (full, "database or disk is full"),
        (readonly.value, "readonly"),
        (cantopen.value, "unable to open"),
    ):
        assert is_store_failure(exc), exc
        refused = store_refusal(exc)
        assert refused is not None
        assert (refused.code, refused.status, refused.details) == (
            "unavailable",
            503,
            {"retry_after": 1},
        )
        assert cause in refused.message and refused.message.endswith("; retry later")
    assert store_refusal(full).message == (
        "the store cannot write: database or disk is full; retry later"
    )


def test_sql_bugs_are_not_store_errors(db):
    db.conn.execute("INSERT INTO t VALUES ('a', 1)")
    with pytest.raises(sqlite3.IntegrityError) as constraint:
        db.conn.execute("INSERT INTO t VALUES ('a', 1)")
    with pytest.raises(sqlite3.OperationalError) as syntax:
        db.conn.execute("SELEC 1")
    for exc in (constraint.value, syntax.value, ValueError("x")):
        assert not is_store_failure(exc)
        assert store_refusal(exc) is None


def test_internal_error_answers_a_store_error_as_unavailable_and_a_bug_with_a_logged_ref(
    db, caplog
):
    assert store_refusal in database.OUTCOMES  # registered by the store
    with caplog.at_level(logging.ERROR):
        assert internal_error(_full_error(db.conn)).code == "unavailable"
        assert "internal error" not in caplog.text
        bug = internal_error(KeyError("oops"))
    assert bug.code == "internal"
    assert bug.details["ref"] in bug.message
    assert f"internal error ref={bug.details['ref']}" in caplog.text


async def test_a_full_disk_fails_the_whole_transaction_as_unavailable(
    db, tmp_path, autojump_clock, caplog
):
    health = StoreHealth(tmp_path / "h.db")
    # A generous time budget: the three writes of one round share a transaction.
    writer = GroupCommit(db.conn, lambda: 1000, budget_s=10, health=health)
    outcomes: dict[str, object] = {}
    settled = trio.Event()

    def done(key: str):
        def record(result, error) -> None:
            outcomes[key] = (error.code, error.details.get("retry_after")) if error else result
            if len(outcomes) == 3:
                settled.set()

        return record

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            _fill(db.conn)
            # One transaction, in this order: "a" and "c" fit, "big" needs new pages.
            for key, size in (("a", 10), ("c", 10), ("big", 100_000)):
                writer.submit(_put(key, size), done(key))
            await settled.wait()
            unavailable = ("unavailable", 1)
            assert outcomes == {"a": unavailable, "big": unavailable, "c": unavailable}
            assert _keys(db) == []  # nothing of the failed transaction committed
            assert not db.conn.in_transaction
            assert health.failing == "the store cannot write: database or disk is full"
            assert health.unusable() and "internal" not in caplog.text
            # Reads still work; once there is room, the next write commits and
            # the store is well again.
            assert db.conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
            _free(db.conn)
            assert await writer.write(_put("d")) == "d"
            assert health.failing is None and health.unusable() == []
            nursery.cancel_scope.cancel()
    assert _keys(db) == ["d"]


async def test_a_failing_store_is_probed_with_backoff_only_while_failing(
    db, tmp_path, autojump_clock
):
    # The disk stays "full" (no headroom) for three probes, then has room.
    health = StoreHealth(tmp_path / "h.db")
    room = {"free": False}
    health.has_headroom = lambda: room["free"]  # type: ignore[method-assign]
    writer = GroupCommit(db.conn, lambda: 1000, health=health)
    probes: list[float] = []
    probe = writer._probe

    def counted() -> None:
        probes.append(trio.current_time())
        if len(probes) == 3:
            room["free"] = True
        probe()

    writer._probe = counted  # type: ignore[method-assign]
    with trio.fail_after(4000):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            await trio.sleep(60)  # virtual time (autojump_clock)
            assert probes == []  # no task wakes while the store is well
            _fill(db.conn)
            with pytest.raises(Refused) as refused:
                await writer.write(_put("big", 100_000))
            assert refused.value.code == "unavailable"
            _free(db.conn)
            t0 = trio.current_time()

            async def empty_writes() -> None:  # commits that write nothing prove nothing
                while True:
                    await writer.write(lambda tx: None)
                    await trio.sleep(0.1)

            async with trio.open_nursery() as ticking:
                ticking.start_soon(empty_writes)
                await trio.sleep(PROBE_FIRST * 7 + 0.001)  # three probes, virtual time
                ticking.cancel_scope.cancel()
            assert health.failing is None
            assert [round(t - t0, 6) for t in probes] == [
                PROBE_FIRST,
                PROBE_FIRST * 3,
                PROBE_FIRST * 7,
            ]
            await trio.sleep(3600)  # virtual time (autojump_clock)
            assert len(probes) == 3  # well again: no more probes
            assert writer._probe_delay == PROBE_FIRST and PROBE_MAX >= 8 * PROBE_FIRST
            nursery.cancel_scope.cancel()


async def test_a_bug_that_breaks_a_transaction_is_internal_with_a_ref(db, autojump_clock, caplog):
    def ends_the_transaction(tx):  # a bug: COMMIT inside a write
        tx.conn.execute("COMMIT")

    writer = GroupCommit(db.conn, lambda: 1000)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            with caplog.at_level(logging.ERROR), pytest.raises(Refused) as refused:
                await writer.write(ends_the_transaction)
            nursery.cancel_scope.cancel()
    assert refused.value.code == "internal"
    ref = refused.value.details["ref"]
    assert ref in refused.value.message and f"ref={ref}" in caplog.text
    assert writer.health.failing is None


def test_open_database_names_the_path_and_the_cause(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreUnavailable) as exc:
        open_database(blocker / "x.db")
    assert str(exc.value) == f"cannot open the database {blocker / 'x.db'}: file exists"
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 1000)
    with pytest.raises(StoreUnavailable) as exc:
        open_database(garbage)
    assert str(exc.value) == f"cannot open the database {garbage}: file is not a database"


def test_a_postgres_session_ended_under_a_pooled_connection_is_a_store_error():
    """Found by tests/chaos/test_postgres_faults.py: ``pg_terminate_backend`` on an
    idle pooled connection leaves asyncpg consuming the server's FATAL when the
    next statement is sent; that was answered ``internal``."""
    import asyncpg

    ended = asyncpg.exceptions.InternalClientError(
        "cannot switch to state 15; another operation (2) is in progress")  # fmt: skip
    refused = store_refusal(ended)
    assert refused is not None and refused.code == "unavailable"
    assert "the database is unavailable" in refused.message


def test_a_rollback_on_a_connection_already_given_back_is_logged_not_raised(caplog):
    """Found by tests/chaos/test_postgres_faults.py: a session ended mid-transaction
    returns asyncpg's connection to the pool, whose proxy then raises on any
    call, ``is_in_transaction()`` included. Raised out of the rollback, the error
    left the transaction's writes unanswered (clients timed out)."""
    import asyncpg

    class Released:
        @property
        def in_transaction(self) -> bool:
            raise asyncpg.InterfaceError(
                "cannot call Connection.is_in_transaction(): connection has been "
                "released back to the pool")  # fmt: skip

    with caplog.at_level(logging.WARNING, logger="sluicegate.store"):
        probe.rollback(Released(), (asyncpg.InterfaceError,))
    assert "rollback failed" in caplog.text
