"""The SQLite database: one connection owned by the daemon, and group commits.

Writes are functions ``fn(tx) -> result`` submitted to :class:`GroupCommit`.
Every write that arrives in one scheduling round runs in one ``BEGIN
IMMEDIATE`` transaction. A refused write is rolled back alone and nothing of it
is left half-written: writes run without savepoints while none is refused after
changing rows, and the batch re-runs with a savepoint per write when one is. Each caller is
answered only after the commit; effects on memory (counts, doorbells, timers)
are registered with :meth:`Tx.after` and run only once the commit succeeded.

The statements run on the event loop: they are short, and a thread hop would
cost more than the work. The benchmark measures the loop's p99 stall.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import sqlite_utils
import trio

from actors.errors import Refused, internal_error
from daemon.store.schema import migrate

log = logging.getLogger("sluicegate.store")
T = TypeVar("T")


def open_database(path: Path | str, synchronous: str = "normal") -> sqlite_utils.Database:
    """Open (creating and migrating) the database at ``path`` in WAL mode."""
    if synchronous not in ("normal", "full"):
        raise ValueError("synchronous must be 'normal' or 'full'")
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        str(path), isolation_level=None, check_same_thread=False, cached_statements=512
    )
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -65536")  # 64 MiB of page cache
    db = sqlite_utils.Database(conn)
    try:
        migrate(db)
    except BaseException:
        conn.close()
        raise
    return db


class Tx:
    """One write's view of the open transaction."""

    __slots__ = ("_after", "conn", "now_ms")

    def __init__(self, conn: sqlite3.Connection, now_ms: int) -> None:
        self.conn = conn
        self.now_ms = now_ms
        self._after: list[Callable[[], None]] = []

    def after(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once the transaction has committed (never if not)."""
        self._after.append(effect)


class _Write(Generic[T]):
    __slots__ = ("error", "fn", "result", "tx")

    def __init__(self, fn: Callable[[Tx], T]) -> None:
        self.fn = fn
        self.result: T | None = None
        self.error: BaseException | None = None
        self.tx: Tx | None = None


class _Batch:
    __slots__ = ("done", "writes")

    def __init__(self) -> None:
        self.writes: list[_Write[Any]] = []
        self.done = trio.Event()


class GroupCommit:
    """Gathers the writes of one scheduling round into one transaction."""

    def __init__(self, conn: sqlite3.Connection, now_ms: Callable[[], int]) -> None:
        self._conn = conn
        self._now_ms = now_ms
        self._batch = _Batch()
        self._wake = trio.Event()
        self._closed = False
        self.commits = 0
        self.writes = 0

    async def write(self, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in the next group transaction; return its result after commit.

        A :class:`Refused` raised by ``fn`` rolls back that write alone and is
        re-raised here. A caller cancelled before its batch ran withdraws its
        write: nothing of it is committed.
        """
        if self._closed:
            raise Refused("shutting_down", "the daemon is shutting down")
        item = _Write(fn)
        batch = self._batch
        batch.writes.append(item)
        self._wake.set()
        try:
            await batch.done.wait()
        except BaseException:
            # Cancelled before its batch ran (a batch commits within one task
            # step, so "not done" means "not started"): withdraw the write, so
            # a cancelled claim or enqueue leaves no trace.
            if not batch.done.is_set():
                batch.writes.remove(item)
            raise
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[return-value]

    def run_now(self, fn: Callable[[Tx], T]) -> T:
        """Run one write in its own transaction, synchronously (startup, tests)."""
        item = _Write(fn)
        self._commit([item])
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[return-value]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The committer task: one transaction per scheduling round of writes."""
        task_status.started()
        try:
            while True:
                # Woken by the first write of a round: by the time this task runs,
                # every task of that round has added its write to the batch.
                await self._wake.wait()
                self._wake = trio.Event()
                batch, self._batch = self._batch, _Batch()
                if batch.writes:
                    self._commit(batch.writes)
                batch.done.set()
        finally:
            self._closed = True
            # Writes that arrived after the last commit are answered, not lost.
            batch, self._batch = self._batch, _Batch()
            if batch.writes:
                self._commit(batch.writes)
            batch.done.set()

    def _commit(self, writes: list[_Write[Any]]) -> None:
        # Optimistic first: no savepoints. A write that is refused before it
        # changed anything (the usual case: a check failed) costs nothing to
        # undo. Only a write refused after changing rows forces the batch to run
        # again with a savepoint around each write.
        if not self._run(writes, careful=False):
            self._run(writes, careful=True)

    def _run(self, writes: list[_Write[Any]], *, careful: bool) -> bool:
        """One transaction over ``writes``; False if it must be re-run carefully."""
        conn = self._conn
        now = self._now_ms()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._fail_all(writes, exc)
            return True
        try:
            for item in writes:
                item.error = item.tx = None
                tx = Tx(conn, now)
                if careful:
                    conn.execute("SAVEPOINT w")
                changes = conn.total_changes
                try:
                    item.result = item.fn(tx)
                except BaseException as exc:  # a refusal or a bug: this write only
                    if careful:
                        conn.execute("ROLLBACK TO w")
                        conn.execute("RELEASE w")
                    elif conn.total_changes != changes:
                        conn.execute("ROLLBACK")
                        return False
                    item.error = exc if isinstance(exc, Refused) else _internal(exc)
                else:
                    item.tx = tx
                    if careful:
                        conn.execute("RELEASE w")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._fail_all(writes, exc)
            return True
        self.commits += 1
        self.writes += len(writes)
        for item in writes:
            if item.tx is not None:
                for effect in item.tx._after:
                    effect()
        return True

    def _fail_all(self, writes: list[_Write[Any]], exc: BaseException) -> None:
        log.error("store transaction failed: %s", exc)
        for item in writes:
            item.tx = None
            item.error = Refused("internal", f"store error: {exc}")


def _internal(exc: BaseException) -> Refused:
    if isinstance(exc, (KeyboardInterrupt, SystemExit, trio.Cancelled)):
        raise exc
    return internal_error(exc)
