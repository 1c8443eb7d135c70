"""WAL checkpoints on a worker thread, so no commit on the event loop pays for one.

SQLite's automatic checkpoint runs inside whichever COMMIT crosses the WAL size
threshold: it copies pages back into the database and, with ``synchronous =
normal``, fsyncs it, stalling the event loop for milliseconds. The daemon turns
it off on its connection (``wal_autocheckpoint = 0``) and runs a PASSIVE
checkpoint from a second connection on a thread every ``every`` commits.
PASSIVE never blocks the writer; once all frames are copied, the next commit
starts the WAL from its beginning again, so it stays short.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import trio

log = logging.getLogger("sluicegate.store")


class Checkpointer:
    """Wakes after ``every`` commits and checkpoints the WAL off the event loop."""

    def __init__(self, path: Path | str, every: int = 100) -> None:
        self._path = str(path)
        self._every = every
        self._since = 0
        self._wake = trio.Event()
        self.checkpoints = 0

    def committed(self) -> None:
        """A commit happened (a GroupCommit ``after_commit`` hook)."""
        self._since += 1
        if self._since >= self._every:
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The checkpointer's task: sleeps until enough commits, then checkpoints."""
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            task_status.started()
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                self._since = 0
                await trio.to_thread.run_sync(self._checkpoint, conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:  # busy or I/O: the next round tries again
            log.warning("WAL checkpoint failed: %s", exc)
        else:
            self.checkpoints += 1
