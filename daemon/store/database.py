"""The SQLite database: one connection owned by the daemon, and group commits.

Writes are functions ``fn(tx) -> result`` submitted to :class:`GroupCommit`.
Every write that arrives in one scheduling round runs in one ``BEGIN
IMMEDIATE`` transaction. A refused write is rolled back alone and nothing of it
is left half-written: writes run without savepoints while none is refused after
changing rows, and the batch re-runs with a savepoint per write when one is. Each caller is
answered only after the commit; effects on memory (counts, doorbells, timers)
are registered with :meth:`Tx.after` and run only once the commit succeeded.
A write that changes memory a later write of the same transaction must see
(a budget's tokens) changes it at once and registers the inverse with
:meth:`Tx.undo`, run if that write's statements are rolled back.

The statements run on the event loop: they are short, and a thread hop would
cost more than the work. The benchmark measures the loop's p99 stall.

A transaction that fails with an error of the store (disk full, I/O error,
read-only file: :mod:`daemon.store.health`) is rolled back whole, and every
write of it answers ``unavailable``; the store is marked failing until a
commit writes again. While failing, the committer probes with backoff (no task
runs while the store is well). Any other error is a bug: ``internal``, with a
logged reference.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from actors.errors import OUTCOMES, Refused, internal_error
from daemon import failpoints
from daemon.store import bridge
from daemon.store.commit_outcome import committed_after_all
from daemon.store.health import StoreHealth, is_store_failure, store_refusal
from daemon.store.interface import Pending
from daemon.store.probe import PROBE_FIRST, PROBE_MAX, FailingStore, rollback
from daemon.store.sqlite import SqliteStore
from daemon.store.transaction import Done, Free, Tx, Write

log = logging.getLogger("sluicegate.store")
T = TypeVar("T")
#: A store error met anywhere (a read in a verb too) answers ``unavailable``.
if store_refusal not in OUTCOMES:
    OUTCOMES.append(store_refusal)


class GroupCommit(FailingStore):
    """Gathers the writes of one scheduling round into one transaction.

    A transaction takes writes until it has run for ``budget_s``; the rest wait
    for the next one, so a burst of big writes never stalls the event loop for
    long. Each write's ``done`` callback runs after its commit, then every
    ``after_commit`` hook (the socket server flushes answers there: one send
    per connection per commit).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        now_ms: Callable[[], int],
        budget_s: float = 0.001,
        health: StoreHealth | None = None,
        pool: Any = None,
    ) -> None:
        self._conn = conn
        #: PostgreSQL: each transaction runs bridged on a connection of this pool.
        self._pool = pool
        # The dialect's words, from the connection (PostgreSQL: daemon.store.postgres).
        self._begin: str = getattr(conn, "begin_statement", "BEGIN IMMEDIATE")
        self._errors: tuple[type[BaseException], ...] = getattr(conn, "errors", (sqlite3.Error,))
        #: The store its writes' transactions see (``tx.store``).
        self.store = SqliteStore(conn)
        self._journal = self.store.jobs
        #: Failing after a store error, ok again after a commit that wrote.
        self.health = health if health is not None else StoreHealth()
        self._probe_delay = PROBE_FIRST
        self._probe_at: float | None = None
        self._now_ms = now_ms
        self._budget = budget_s
        self._queue: deque[Write] = deque()
        #: Called with the store and the transaction's mode (True: share) right
        #: after each BEGIN, before any write runs.
        self.begun: list[Callable[[SqliteStore, bool], None]] = []
        #: Whether a transaction of writes that decide no limit runs in share
        #: mode (PostgreSQL with other daemons: daemon.admission.cluster).
        self.shares = False
        self._wake = trio.Event()
        self._closed = False
        self._resume: trio.Event | None = None  # set while writes are held
        self._deadline = 0.0
        self.after_commit: list[Callable[[], None]] = []
        #: Flushed into every transaction just before its COMMIT.
        self.pending: list[Pending] = []
        self.commits = 0
        self.writes = 0

    def submit(self, fn: Callable[[Tx], Any], done: Done, free: Free = None) -> Write:
        """Queue ``fn`` for the next transaction; ``done`` is called when settled.

        A :class:`Refused` raised by ``fn`` rolls back that write alone and is
        passed to ``done``. ``free``: whether it decides no limit
        (:mod:`daemon.admission.limit_free`), asked as it joins a transaction.
        """
        if self._closed:
            raise Refused("shutting_down", "the daemon is shutting down")
        item = Write(fn, done, free)
        self._queue.append(item)
        self._wake.set()
        return item

    async def write(self, fn: Callable[[Tx], T], free: Free = None) -> T:
        """Run ``fn`` in the next group transaction; return its result after commit.

        A caller cancelled before its write ran withdraws it: nothing of it is
        committed, so a cancelled claim or enqueue leaves no trace.
        """
        settled = trio.Event()
        item = self.submit(fn, lambda _r, _e: settled.set(), free)
        try:
            await settled.wait()
        except BaseException:
            if not settled.is_set():
                item.withdrawn = True  # still queued: transactions run within one step
            raise
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[no-any-return]

    def run_now(self, fn: Callable[[Tx], T]) -> T:
        """Run one write in its own transaction, synchronously (startup, tests)."""
        item = Write(fn, lambda _r, _e: None)
        self._commit([item])
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[no-any-return]

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Writes queue and wait, instead of starting a transaction, while the
        body runs.

        For work on another connection that takes the write lock (a WAL
        truncation): a ``BEGIN IMMEDIATE`` meeting that lock would block the
        whole event loop in SQLite's busy handler, whose sleeps (1, 2, 5, 10 ms,
        ...) outlast the lock. Held, only writes wait, they resume the moment
        the body ends, and they commit together. Entered between transactions
        (every await is), so no transaction of ours is open meanwhile.
        """
        resume = self._resume = trio.Event()
        try:
            yield
        finally:
            self._resume = None
            resume.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The committer task: transactions of the writes queued so far."""
        task_status.started()
        try:
            while True:
                # Woken by the first write of a round: by the time this task runs,
                # every task of that round has queued its write.
                if self.health.failing is None:
                    await self._wake.wait()
                else:
                    # Failing: writes still try the store, and a probe does at
                    # growing intervals, whatever else commits (none while well).
                    if self._probe_at is None:
                        self._probe_at = trio.current_time() + self._probe_delay
                    with trio.move_on_at(self._probe_at):
                        await self._wake.wait()
                    if trio.current_time() >= self._probe_at:
                        self._probe_delay = min(self._probe_delay * 2, PROBE_MAX)
                        self._probe_at = trio.current_time() + self._probe_delay
                        self._probe()
                    if not self._wake.is_set():
                        continue
                # One more round first: connections whose requests arrived while
                # the last commit ran are read now, and join this transaction.
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._wake = trio.Event()
                while self._queue:
                    while self._resume is not None:  # held (see held())
                        await self._resume.wait()
                    if self._pool is None:
                        self._commit(self._take())
                    else:
                        # Never cancelled mid-transaction (a stop): asyncpg cannot
                        # give the connection back then, and the stop would hang.
                        with trio.CancelScope(shield=True):
                            await self._commit_pooled(self._take())
                    if self._queue:
                        # Over budget: let the loop breathe, then go on.
                        await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._closed = True
            # Writes queued before the stop are answered, not lost.
            with trio.CancelScope(shield=True):
                while self._queue:
                    if self._pool is None:
                        self._commit(self._take())
                    else:
                        await self._commit_pooled(self._take())

    async def _commit_pooled(self, writes: list[Write]) -> None:
        """PostgreSQL: the transaction bridged on a pooled connection. With no
        connection to be had (the database is down), the writes are answered
        ``unavailable`` and the committer lives on."""
        began = False

        def commit(writes: list[Write]) -> None:
            nonlocal began
            began = True  # from here _commit answers every write itself
            self._commit(writes)

        try:
            await bridge.run_pooled(self._pool, commit, writes)
        except Exception as exc:  # the pool's own errors too: never the committer's end
            if began:
                log.warning("database connection lost after a transaction: %r", exc)
                return
            self._fail_all(writes, exc)
            self._answer(writes)

    def _take(self) -> list[Write]:
        """The first live write of the queue; the transaction grows from there."""
        while self._queue:
            item = self._queue.popleft()
            if not item.withdrawn:
                return [item]
        return []

    def _commit(self, writes: list[Write]) -> None:
        if not writes:
            return
        # Optimistic first: no savepoints. A write that is refused before it
        # changed anything (the usual case: a check failed) costs nothing to
        # undo. Only a write refused after changing rows forces the batch to run
        # again with a savepoint around each write.
        self._deadline = time.perf_counter() + self._budget
        if not self._run(writes, careful=False):
            self._run(writes, careful=True)
        if failpoints.ARMED:
            failpoints.hit("commit_after_before_reply")
        self._answer(writes)

    def _answer(self, writes: list[Write]) -> None:
        """Settle each write, then the ``after_commit`` hooks (the socket server
        sends the answers there: without them an answer would wait unsent)."""
        for item in writes:
            item.done(item.result, item.error)
        for hook in self.after_commit:
            hook()

    def _run(self, writes: list[Write], *, careful: bool) -> bool:
        """One transaction over ``writes`` (growing it from the queue while the
        time budget lasts); False if it must be re-run carefully."""
        conn = self._conn
        try:
            shared = self._open(writes[0])
        except Exception as exc:  # a store error answers unavailable, a bug internal
            self._journal.tx = None
            rollback(conn, self._errors)
            self._fail_all(writes, exc)
            return True
        # Read once the locks are held: behind another daemon's commit, ours come after.
        now = self._now_ms()
        changes_at_begin = conn.total_changes
        committing = False
        try:
            index = 0
            while True:
                if index == len(writes):
                    # Grow the transaction from the queue while time allows.
                    if not self._queue or time.perf_counter() > self._deadline:
                        break
                    item = self._queue.popleft()
                    if item.withdrawn:
                        continue
                    writes.append(item)
                item = writes[index]
                if shared and index and not _free(item):  # the first was asked by _open
                    # It may decide a limit: it and the rest wait for the next,
                    # exclusive, transaction.
                    self._queue.extendleft(reversed(writes[index:]))
                    del writes[index:]
                    break
                index += 1
                item.error = item.tx = None
                tx = self._journal.tx = Tx(self.store, now, shared)
                if careful:
                    conn.execute("SAVEPOINT w")
                changes = conn.total_changes
                try:
                    item.result = item.fn(tx)
                except BaseException as exc:  # a refusal or a bug: this write only
                    tx.rolled_back()
                    if is_store_failure(exc):
                        # SQLite may have rolled the transaction back already:
                        # the whole transaction fails (below), never this write alone.
                        raise
                    if careful:
                        conn.execute("ROLLBACK TO w")
                        conn.execute("RELEASE w")
                    elif conn.total_changes != changes or isinstance(exc, self._errors):
                        # Changed rows must be undone, and a failed statement may
                        # have aborted the transaction (PostgreSQL does): again,
                        # with a savepoint around each write.
                        self._journal.tx = None
                        conn.execute("ROLLBACK")
                        _rolled_back(writes)
                        return False
                    item.error = exc if isinstance(exc, Refused) else _internal(exc)
                else:
                    item.tx = tx
                    if careful:
                        conn.execute("RELEASE w")
            self._journal.tx = None
            for pending in self.pending:
                pending.flush(self.store)
            if failpoints.ARMED:
                self._failpoints(writes)
            committing = True
            conn.execute("COMMIT")
        except self._errors as exc:
            self._journal.tx = None
            # A COMMIT that raised may have committed (PostgreSQL: the answer lost).
            if not (committing and committed_after_all(conn, exc)):
                rollback(conn, self._errors)
                _rolled_back(writes)
                self._fail_all(writes, exc)
                return True
        if self.health.failing is not None and conn.total_changes != changes_at_begin:
            self._recovered()
        self.commits += 1
        self.writes += len(writes)
        for pending in self.pending:
            pending.committed()
        for item in writes:
            if item.tx is not None:
                for effect in item.tx._after:
                    effect()
        return True

    def _open(self, first: Write) -> bool:
        """BEGIN, then the ``begun`` hooks (the cluster's epoch lock first:
        daemon.admission.cluster); whether the transaction is in share mode.

        Share mode when the first write decides no limit, asked again once the
        lock is held (a reload under it may have found a limit made elsewhere:
        then the transaction begins again, exclusive)."""
        conn = self._conn
        shared = self.shares and _free(first)
        conn.execute(self._begin)
        for begun in self.begun:
            begun(self.store, shared)
        if shared and not _free(first):
            conn.execute("ROLLBACK")
            shared = False
            conn.execute(self._begin)
            for begun in self.begun:
                begun(self.store, shared)
        return shared

    def _failpoints(self, writes: list[Write]) -> None:
        """Tests only (:mod:`daemon.failpoints`): exit before the COMMIT, or the
        broken build that answers first and commits 20 ms later."""
        failpoints.hit("commit_before")
        if failpoints.broken("ack_before_commit"):
            for item in writes:
                item.done(item.result, item.error)
                item.done = _answered
            for hook in self.after_commit:
                hook()
            time.sleep(0.02)


def _free(item: Write) -> bool:
    """Whether ``item`` decides no limit, as memory stands now."""
    return item.free is not None and item.free()


def _rolled_back(writes: list[Write]) -> None:
    """The whole transaction was rolled back: undo its writes' memory, newest first."""
    for item in reversed(writes):
        if item.tx is not None:
            item.tx.rolled_back()
        item.tx = None


def _answered(_result: Any, _error: BaseException | None) -> None:
    """The done callback of a write answered already (the broken build's)."""


def _internal(exc: BaseException) -> Refused:
    if isinstance(exc, (KeyboardInterrupt, SystemExit, trio.Cancelled)):
        raise exc
    return internal_error(exc)
