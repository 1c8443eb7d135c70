"""I/O errors, SQLite's own method: the store's connection fails its Nth write
for N = 1, 2, 3, ... until the operation completes without reaching it, for
``enqueue``, ``claim_next`` and ``complete`` on an in-process Core.

Each failed attempt answers a clean ``unavailable`` and leaves the database
exactly as it was (a dump before and after), and the daemon's counts still
agree with the rows; the operation that completes leaves its effect. A "write"
is any statement that writes or ends a transaction: BEGIN, INSERT, UPDATE,
DELETE, REPLACE, COMMIT (the error is raised before the statement runs, as a
failed ``write()`` system call would leave it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from actors import lifecycle as lc
from actors.clock import Clock
from actors.errors import Refused
from daemon.config import Config
from daemon.core import Core
from daemon.dispatch import dispatch
from daemon.store.opening import open_database

WRITES = ("BEGIN", "INSERT", "UPDATE", "DELETE", "REPLACE", "COMMIT")
#: No operation here takes more writes than this.
MAX_N = 60


def io_error() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorcode = 10  # SQLITE_IOERR
    exc.sqlite_errorname = "SQLITE_IOERR"
    return exc


class FaultyConnection:
    """A sqlite3 connection whose Nth write, once armed, raises SQLITE_IOERR."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.fail_at: int | None = None
        self.writes = 0
        self.failed = False

    def arm(self, n: int) -> None:
        self.fail_at, self.writes, self.failed = n, 0, False

    def disarm(self) -> None:
        self.fail_at = None

    def _count(self, sql: str) -> None:
        if self.fail_at is None or not sql.lstrip().upper().startswith(WRITES):
            return
        self.writes += 1
        if self.writes == self.fail_at:
            self.failed = True
            raise io_error()

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._count(sql)
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, seq: Any) -> sqlite3.Cursor:
        self._count(sql)
        return self._conn.executemany(sql, seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def dump(conn: sqlite3.Connection) -> list[str]:
    return list(conn.iterdump())


async def call(core: Core, op: str, **args: Any) -> dict[str, Any]:
    return await dispatch(core, core.auth.new_session(), op, args)


def counts_agree(core: Core, real: sqlite3.Connection) -> None:
    """The daemon's counts of queue ``q`` are the rows' (memory undone with the rollback)."""
    rows = dict(real.execute("SELECT state, count(*) FROM jobs WHERE queue = 'q' GROUP BY 1"))
    for state in (lc.SCHEDULED, lc.PENDING, lc.RUNNING, lc.COMPLETED, lc.DEAD):
        assert core.counts.get(("default", "q"), state) == rows.get(state, 0), state


Setup = Callable[[Core], Awaitable[dict[str, Any]]]
Operation = Callable[[Core, dict[str, Any]], Awaitable[dict[str, Any]]]


async def _nothing(_core: Core) -> dict[str, Any]:
    return {}


async def _enqueue(core: Core, _given: dict[str, Any]) -> dict[str, Any]:
    return await call(core, "enqueue", queue="q", type="t", payload={"k": 1})


async def _one_pending(core: Core) -> dict[str, Any]:
    return (await call(core, "enqueue", queue="q", type="t"))["job"]


async def _claim(core: Core, _given: dict[str, Any]) -> dict[str, Any]:
    return await call(core, "claim_next", queues=["q"], max=5)


async def _one_running(core: Core) -> dict[str, Any]:
    await _one_pending(core)
    return (await call(core, "claim_next", queues=["q"]))["jobs"][0]["job"]


async def _complete(core: Core, job: dict[str, Any]) -> dict[str, Any]:
    return await call(core, "complete", job_id=job["id"], lease=job["lease"])


CASES: dict[str, tuple[Setup, Operation, Callable[[dict[str, Any]], bool]]] = {
    "enqueue": (_nothing, _enqueue, lambda a: a["job"]["status"] == "pending"),
    "claim_next": (_one_pending, _claim, lambda a: a["jobs"][0]["job"]["status"] == "running"),
    "complete": (_one_running, _complete, lambda a: a["job"]["status"] == "completed"),
}


@pytest.mark.parametrize("op", sorted(CASES))
async def test_the_nth_write_failing_answers_unavailable_and_writes_nothing(
    op, tmp_path, autojump_clock
):
    setup, operate, done = CASES[op]
    db = open_database(tmp_path / "db.sqlite")
    real = db.conn
    faulty = db.conn = FaultyConnection(real)
    failures = 0
    try:
        core = Core(Config(), db, Clock(wall_start_ms=1_700_000_000_000))
        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                # The committer alone: no timer or roll-up writes beside the operation's.
                await nursery.start(core.writer.run)
                for n in range(1, MAX_N + 1):
                    given = await setup(core)
                    before = dump(real)
                    faulty.arm(n)
                    try:
                        answer = await operate(core, given)
                    except Refused as refused:
                        assert faulty.failed, refused
                        assert refused.code == "unavailable", (n, refused.code, refused.message)
                        assert dump(real) == before, f"{op}: write {n} failed half-written"
                        counts_agree(core, real)
                        failures += 1
                        continue
                    finally:
                        faulty.disarm()
                    assert not faulty.failed, f"{op} answered ok though write {n} failed"
                    assert done(answer), answer
                    counts_agree(core, real)
                    break
                else:
                    raise AssertionError(f"{op} still failing after {MAX_N} writes")
                nursery.cancel_scope.cancel()
    finally:
        real.close()
    print(f"{op}: {failures} failed writes, then done")
    assert failures >= 2, f"{op} took only {failures + 1} writes: the sweep proved little"
