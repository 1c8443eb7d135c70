"""The WAL checkpointer: PASSIVE rounds, and truncations with the daemon's writes held."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from daemon.store.checkpointer import Checkpointer
from daemon.store.database import GroupCommit
from daemon.store.opening import open_database


def _wal(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size


async def test_an_idle_truncation_runs_with_the_writes_held(tmp_path, autojump_clock):
    path = tmp_path / "c.db"
    db = open_database(path, autocheckpoint=False)
    db.conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    writer = GroupCommit(db.conn, lambda: 1000)
    seen: list[tuple[str, int, int]] = []
    released = trio.Event()
    checkpointer: Checkpointer

    @asynccontextmanager
    async def hold() -> AsyncIterator[None]:
        async with writer.held():
            seen.append(("held", checkpointer.truncations, writer.commits))
            yield
            seen.append(("released", checkpointer.truncations, writer.commits))
        released.set()

    checkpointer = Checkpointer(path, idle_delay=1.0, hold_writes=hold)
    writer.after_commit.append(checkpointer.committed)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            await nursery.start(checkpointer.run)
            for i in range(20):
                await writer.write(lambda tx, i=i: tx.conn.execute(
                    "INSERT INTO t VALUES (?, ?)", (i, "x" * 1000)))  # fmt: skip
            assert _wal(path) > 0
            # No fail_after: autojump would leap to its deadline while the
            # truncation runs on its (real-time) thread.
            await released.wait()
            wal_after = _wal(path)
            nursery.cancel_scope.cancel()
    finally:
        db.conn.close()
    # The truncation ran inside the hold, and no write committed meanwhile.
    assert seen == [("held", 0, 20), ("released", 1, 20)]
    assert wal_after == 0


async def test_without_a_hold_the_checkpointer_still_truncates(tmp_path, autojump_clock):
    """``hold_writes`` is optional (tools and tests without a committer)."""
    path = tmp_path / "d.db"
    db = open_database(path, autocheckpoint=False)
    db.conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    truncated = trio.Event()

    class Recording(Checkpointer):
        def _truncate(self, conn):  # type: ignore[no-untyped-def]
            result = super()._truncate(conn)
            trio.from_thread.run_sync(truncated.set)
            return result

    checkpointer = Recording(path, idle_delay=1.0)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(checkpointer.run)
            db.conn.execute("INSERT INTO t VALUES (1)")
            checkpointer.committed()
            await truncated.wait()
            wal_after = _wal(path)
            nursery.cancel_scope.cancel()
    finally:
        db.conn.close()
    assert checkpointer.truncations == 1
    assert wal_after == 0
