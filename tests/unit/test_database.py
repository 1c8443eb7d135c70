"""daemon/store/database.py: open_database, and GroupCommit (one transaction per round)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from actors.errors import Refused
from daemon.store.database import GroupCommit
from daemon.store.opening import open_database


@pytest.fixture
def db(tmp_path):
    db = open_database(tmp_path / "g.db")
    db.conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    yield db
    db.conn.close()


def _rows(db) -> dict[str, int]:
    return dict(db.conn.execute("SELECT k, v FROM t").fetchall())


def _put(key: str, value: int = 1, effects: list | None = None):
    def fn(tx):
        tx.conn.execute("INSERT INTO t VALUES (?, ?)", (key, value))
        if effects is not None:
            tx.after(lambda: effects.append(key))
        return key

    return fn


def _put_then_refuse(key: str, effects: list):
    def fn(tx):
        tx.conn.execute("INSERT INTO t VALUES (?, ?)", (key, 0))
        tx.after(lambda: effects.append(key))
        raise Refused("conflict", f"{key} refused")

    return fn


def test_open_database_settings(tmp_path):
    db = open_database(tmp_path / "sub" / "dir" / "x.db", synchronous="full")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert not db.conn.in_transaction
    finally:
        db.conn.close()
    db = open_database(tmp_path / "y.db")
    try:
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        db.conn.close()


def test_open_database_refuses_an_unknown_synchronous(tmp_path):
    with pytest.raises(ValueError, match="synchronous"):
        open_database(tmp_path / "x.db", synchronous="off")


async def _submit(writer: GroupCommit, outcomes: dict, key: str, fn) -> None:
    """Write ``fn``; record its result, or the code it was refused with, under ``key``."""
    try:
        outcomes[key] = await writer.write(fn)
    except Refused as exc:
        outcomes[key] = exc.code


@asynccontextmanager
async def _committing(db, now=lambda: 1000) -> AsyncIterator[GroupCommit]:
    """A GroupCommit on ``db`` whose committer runs for the block (10 s at most).

    Its time budget per transaction (wall time, there so a burst of big writes
    never stalls the event loop) is a minute: a loaded machine must not split
    the rounds these tests count.
    """
    with trio.fail_after(10):
        writer = GroupCommit(db.conn, now, budget_s=60)
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            yield writer
            nursery.cancel_scope.cancel()


async def test_one_round_of_writes_is_one_transaction(db, autojump_clock):
    effects: list[str] = []
    results: dict[str, str] = {}
    async with _committing(db) as writer:

        async def put(key):
            results[key] = await writer.write(_put(key, effects=effects))

        async with trio.open_nursery() as writers:
            for i in range(20):
                writers.start_soon(put, f"k{i}")
        assert writer.commits == 1
        assert writer.writes == 20
        assert results == {f"k{i}": f"k{i}" for i in range(20)}
        assert sorted(effects) == sorted(results)
    assert len(_rows(db)) == 20


async def test_a_refused_write_rolls_back_alone(db, autojump_clock):
    effects: list[str] = []
    outcomes: dict[str, object] = {}
    async with _committing(db) as writer, trio.open_nursery() as writers:
        writers.start_soon(_submit, writer, outcomes, "a", _put("a", effects=effects))
        writers.start_soon(_submit, writer, outcomes, "bad", _put_then_refuse("bad", effects))
        writers.start_soon(_submit, writer, outcomes, "c", _put("c", effects=effects))
        writers.start_soon(_submit, writer, outcomes, "d", _put("d", effects=effects))
    assert writer.commits == 1
    assert outcomes == {"a": "a", "bad": "conflict", "c": "c", "d": "d"}
    assert _rows(db) == {"a": 1, "c": 1, "d": 1}
    assert sorted(effects) == ["a", "c", "d"]  # the refused write's effects never run


def _counting(key: str, counter: dict[str, int], *, refuse: bool = False):
    """A write that changes memory at once (with its undo), then maybe is refused."""

    def fn(tx):
        tx.conn.execute("INSERT INTO t VALUES (?, ?)", (key, 0))
        counter["n"] += 1
        tx.undo(lambda: counter.__setitem__("n", counter["n"] - 1))
        if refuse:
            raise Refused("conflict", f"{key} refused")
        return key

    return fn


async def test_memory_changed_by_writes_follows_their_rollback(db, autojump_clock):
    # "bad" is refused after changing rows: the batch is rolled back whole and
    # run again with savepoints, so every write runs twice and every undo must
    # run exactly when its statements were undone.
    counter = {"n": 0}
    outcomes: dict[str, object] = {}
    async with _committing(db) as writer, trio.open_nursery() as writers:
        for key in ("a", "bad", "c"):
            fn = _counting(key, counter, refuse=key == "bad")
            writers.start_soon(_submit, writer, outcomes, key, fn)
    assert outcomes == {"a": "a", "bad": "conflict", "c": "c"}
    assert _rows(db) == {"a": 0, "c": 0}
    assert counter["n"] == 2


async def test_a_bug_in_a_write_is_an_internal_refusal_for_it_alone(db, autojump_clock, caplog):
    outcomes: dict[str, object] = {}

    def buggy(tx):
        tx.conn.execute("INSERT INTO t VALUES ('bug', 0)")
        raise KeyError("oops")

    with caplog.at_level(logging.ERROR):
        async with _committing(db) as writer, trio.open_nursery() as writers:
            writers.start_soon(_submit, writer, outcomes, "bug", buggy)
            writers.start_soon(_submit, writer, outcomes, "ok", _put("ok"))
    assert outcomes == {"bug": "internal", "ok": "ok"}
    assert _rows(db) == {"ok": 1}


async def test_a_constraint_error_in_a_write_fails_it_alone(db, autojump_clock, caplog):
    GroupCommit(db.conn, lambda: 1000).run_now(_put("dup"))
    outcomes: dict[str, object] = {}
    with caplog.at_level(logging.ERROR):
        async with _committing(db) as writer, trio.open_nursery() as writers:
            writers.start_soon(_submit, writer, outcomes, "x", _put("x"))
            writers.start_soon(_submit, writer, outcomes, "dup", _put("dup"))
            writers.start_soon(_submit, writer, outcomes, "y", _put("y"))
    assert outcomes == {"x": "x", "dup": "internal", "y": "y"}
    assert _rows(db) == {"dup": 1, "x": 1, "y": 1}


async def test_writes_of_later_rounds_get_their_own_transaction(db, autojump_clock):
    async with _committing(db) as writer:
        await writer.write(_put("a"))
        await writer.write(_put("b"))
        await trio.sleep(1)  # virtual time: autojump_clock
        await writer.write(_put("c"))
        assert writer.commits == 3


async def test_tx_now_is_read_once_per_transaction(db, autojump_clock):
    ticks = iter(range(1000, 2000))
    seen: list[int] = []
    async with _committing(db, lambda: next(ticks)) as writer:
        async with trio.open_nursery() as writers:
            for _ in range(5):
                writers.start_soon(writer.write, lambda tx: seen.append(tx.now_ms))
        await writer.write(lambda tx: seen.append(tx.now_ms))
    assert seen == [1000] * 5 + [1001]


async def test_a_write_that_ran_commits_even_if_its_caller_is_then_cancelled(db, autojump_clock):
    async with _committing(db) as writer:
        with trio.CancelScope() as scope:

            def put_then_cancel(tx):
                _put("ran")(tx)
                scope.cancel()  # the caller is cancelled once its write ran

            await writer.write(put_then_cancel)
        await writer.write(_put("after"))
    assert _rows(db) == {"ran": 1, "after": 1}


async def test_a_write_whose_caller_is_cancelled_before_it_ran_is_withdrawn(db, autojump_clock):
    async with _committing(db) as writer:
        with trio.CancelScope() as scope:
            scope.cancel()
            await writer.write(_put("withdrawn"))
        await writer.write(_put("after"))
    assert _rows(db) == {"after": 1}


async def test_writes_pending_at_shutdown_are_committed_then_refused(db, autojump_clock):
    async with _committing(db) as writer:
        await writer.write(_put("a"))
    with pytest.raises(Refused) as info:
        await writer.write(_put("late"))
    assert info.value.code == "shutting_down"
    assert _rows(db) == {"a": 1}


def test_run_now_is_its_own_transaction(db):
    writer = GroupCommit(db.conn, lambda: 5)
    effects: list[str] = []
    assert writer.run_now(_put("a", effects=effects)) == "a"
    assert effects == ["a"]
    with pytest.raises(Refused):
        writer.run_now(_put_then_refuse("b", effects))
    assert _rows(db) == {"a": 1}
    assert writer.commits == 2  # the refused write's empty transaction still commits
    assert not db.conn.in_transaction


async def test_held_writes_wait_queued_and_commit_together_once_released(db, autojump_clock):
    """While held (a WAL truncation on another connection has the write lock),
    writes queue instead of starting a transaction, and run as one when released."""
    results: dict[str, str] = {}
    async with _committing(db) as writer:
        async with trio.open_nursery() as writers, writer.held():
            for key in ("a", "b", "c"):
                writers.start_soon(_submit, writer, results, key, _put(key))
            await trio.sleep(5)  # virtual time (autojump_clock)
            assert writer.commits == 0
            assert results == {}
            assert _rows(db) == {}
        assert writer.commits == 1
        assert results == {"a": "a", "b": "b", "c": "c"}
    assert _rows(db) == {"a": 1, "b": 1, "c": 1}


async def test_a_hold_taken_between_transactions_stops_the_next_one(db, autojump_clock):
    """A hold entered while the committer works through a long queue stops it
    before its next transaction, not after the queue is empty."""
    async with _committing(db) as writer:
        writer._budget = 0.0  # one write per transaction: the queue takes several
        results: dict[str, str] = {}
        async with trio.open_nursery() as writers:
            for i in range(4):
                writers.start_soon(_submit, writer, results, f"k{i}", _put(f"k{i}"))
            await trio.testing.wait_all_tasks_blocked()
            async with writer.held():
                committed = writer.commits
                await trio.sleep(1)  # virtual time (autojump_clock)
                assert writer.commits == committed
        assert len(results) == 4
