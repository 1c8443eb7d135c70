"""WAL checkpoints on a worker thread, so no commit on the event loop pays for one.

SQLite's automatic checkpoint runs inside whichever COMMIT crosses the WAL size
threshold: it copies pages back into the database and, with ``synchronous =
normal``, fsyncs it, stalling the event loop for milliseconds. The daemon turns
it off on its connection (``wal_autocheckpoint = 0``) and checkpoints from a
second connection on a thread.

Rounds, none of them a polling loop:

- **every** ``every`` commits: a PASSIVE checkpoint (never blocks the writer),
  then the ``-wal`` file is measured. Over ``wal_max_bytes`` it is truncated
  (TRUNCATE), unless a truncation was refused lately (backoff below). Under a
  steady load the WAL never restarts by itself (a PASSIVE round never catches
  up with the commits made while it ran), so this is what bounds it; the
  daemon's writes are held meanwhile (``hold_writes``), queued rather than
  blocked on the write lock.
- **idle**: a timer armed by the last commit (re-armed by each commit) fires
  ``idle_delay`` after it; PASSIVE, then TRUNCATE, so an idle daemon leaves an
  empty ``-wal``.

PASSIVE copies what it can and never waits, but the WAL can only start from its
beginning again once no reader uses it, and its file never shrinks by itself.
A reader holding a read transaction (a backup, an ``sqlite3`` shell) pins every
frame written after it began: the WAL grows for as long as it reads. TRUNCATE
waits for such readers at most ``truncate_wait`` (it holds the write lock
meanwhile, so the daemon's next commit may wait as long); refused, it is tried
again after a growing delay (``RETRY_FIRST`` to ``RETRY_MAX``) while the WAL
still holds commits. The WAL's size is reported to
:class:`~daemon.store.health.StoreHealth` (a metric, and ``/healthz`` over the
threshold).
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path

import trio

from daemon.store.health import StoreHealth

log = logging.getLogger("sluicegate.store")

#: A refused truncation is retried after this delay, doubled per refusal (seconds).
RETRY_FIRST = 0.5
RETRY_MAX = 30.0


class Checkpointer:
    """Checkpoints the WAL off the event loop: every ``every`` commits, and when idle."""

    def __init__(
        self,
        path: Path | str,
        every: int = 100,
        *,
        health: StoreHealth | None = None,
        idle_delay: float = 1.0,
        truncate_wait: float = 0.05,
        hold_writes: Callable[[], AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self._path = str(path)
        self._wal = Path(f"{path}-wal")
        self._every = every
        self.health = health if health is not None else StoreHealth(path)
        #: Holds the daemon's writes during a truncation (``GroupCommit.held``):
        #: TRUNCATE takes the write lock, and a writer meeting it would block
        #: the event loop in SQLite's busy handler instead of queueing.
        self._hold_writes = hold_writes or nullcontext
        self._idle_delay = idle_delay
        self._truncate_wait_ms = int(truncate_wait * 1000)
        self._since = 0
        self._wake = trio.Event()
        #: Commits since the last successful truncation (the idle timer is armed).
        self._dirty = False
        self._last_commit = -math.inf
        self._retry_at = -math.inf
        self._retry_delay = RETRY_FIRST
        self._refused_logged = False
        self.checkpoints = 0
        self.truncations = 0

    def committed(self) -> None:
        """A commit happened (a GroupCommit ``after_commit`` hook)."""
        self._since += 1
        self._last_commit = trio.current_time()
        if not self._dirty or self._since >= self._every:
            self._wake.set()  # a round is due, or the idle timer must be armed
        self._dirty = True

    def _idle_at(self) -> float:
        """When the idle round is due (never while nothing was committed)."""
        if not self._dirty:
            return math.inf
        return max(self._last_commit + self._idle_delay, self._retry_at)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The checkpointer's task: sleeps until enough commits or idleness."""
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            # Only TRUNCATE waits (for readers and the writer), and only this long.
            conn.execute(f"PRAGMA busy_timeout = {self._truncate_wait_ms}")
            conn.execute(f"PRAGMA journal_size_limit = {self.health.wal_max_bytes}")
            self.health.wal_measured(self._wal_size())
            task_status.started()
            while True:
                with trio.move_on_at(self._idle_at()):
                    await self._wake.wait()
                now = trio.current_time()
                if self._wake.is_set():
                    self._wake = trio.Event()
                    if self._since >= self._every:
                        self._since = 0
                        await self._round(conn, now, idle=False)
                    # else: the first commit since a truncation armed the idle timer
                elif now >= self._idle_at():
                    await self._round(conn, now, idle=True)
                # else: a commit re-armed the idle timer; sleep again.
        finally:
            conn.close()

    async def _round(self, conn: sqlite3.Connection, now: float, *, idle: bool) -> None:
        size = await trio.to_thread.run_sync(self._passive, conn)
        over = size is not None and size > self.health.wal_max_bytes
        if (idle or over) and now >= self._retry_at:
            dirty_before = self._last_commit
            async with self._hold_writes():
                truncated, size = await trio.to_thread.run_sync(self._truncate, conn)
            if truncated:
                self._retry_delay = RETRY_FIRST
                self._retry_at = -math.inf
                self._refused_logged = False
                # Commits made while the truncation ran keep the timer armed.
                self._dirty = self._last_commit != dirty_before
            else:
                self._retry_at = trio.current_time() + self._retry_delay
                self._retry_delay = min(self._retry_delay * 2, RETRY_MAX)
        self.health.wal_measured(size)

    def _passive(self, conn: sqlite3.Connection) -> int | None:
        """A PASSIVE checkpoint; the WAL's size after it."""
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:  # busy or I/O: the next round tries again
            log.warning("WAL checkpoint failed: %s", exc)
        else:
            self.checkpoints += 1
        return self._wal_size()

    def _truncate(self, conn: sqlite3.Connection) -> tuple[bool, int | None]:
        """A TRUNCATE checkpoint: (whether it completed, the WAL's size after it)."""
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as exc:  # e.g. a full disk: the database cannot grow
            busy, frames, copied = 1, -1, -1
            reason = str(exc)
        else:
            reason = "a reader holds the WAL"
        size = self._wal_size()
        if busy:
            if not self._refused_logged:  # once per episode, not per attempt
                self._refused_logged = True
                log.warning(
                    "WAL truncation refused (%s; %s bytes, %d of %d frames copied); "
                    "retrying with backoff",
                    reason, size, copied, frames,
                )  # fmt: skip
            return False, size
        if self._refused_logged:
            log.info("WAL truncated after refusals (%s bytes now)", size)
        self.truncations += 1
        return True, size

    def _wal_size(self) -> int | None:
        try:
            return os.stat(self._wal).st_size
        except OSError:
            return None
