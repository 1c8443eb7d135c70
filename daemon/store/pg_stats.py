"""PostgreSQL: the planner's statistics of ``jobs`` kept fresh by the daemon.

Every claim is an index-ordered scan with a limit (``ix_jobs_ready``), and
PostgreSQL chooses it only when it knows the table holds rows: planned over a
table it has never analyzed (estimates of one row), a claim of two queues was
found scanning the whole backlog, 450 ms a claim behind 7,500 pending jobs,
against 0.2 ms once analyzed. Autovacuum normally analyzes, but it runs at
most once a minute, may be switched off, and a fresh database often takes its
first burst before it runs.

So the daemon looks, and only after writing: every :data:`EVERY_WRITES`
committed writes it reads ``pg_stat_user_tables`` for ``jobs`` and runs
``ANALYZE jobs`` when the rows changed since the last analysis (by anyone,
autovacuum included) exceed :data:`MIN_CHANGED` plus :data:`CHANGED_SHARE` of
the table. Also once at start. Failures are logged once and retried at the
next round: the statistics are an optimisation, never a condition to serve.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
import trio_asyncio

log = logging.getLogger("sluicegate.store")
EVERY_WRITES = 2000
MIN_CHANGED = 500
CHANGED_SHARE = 0.2
_STATS = (
    "SELECT n_live_tup, n_mod_since_analyze FROM pg_stat_user_tables "
    "WHERE relname = 'jobs' AND schemaname = current_schema()"
)


class JobStatistics:
    """Analyzes ``jobs`` when enough of it changed (woken by the committer)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._wake = trio.Event()
        self._writes_at_check = 0
        self._failing = False
        self.analyzed = 0

    def committed(self, writes: int) -> None:
        """After a commit: ``writes`` is the committer's running count."""
        if writes - self._writes_at_check >= EVERY_WRITES:
            self._writes_at_check = writes
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check at start, then whenever woken, until cancelled."""
        task_status.started()
        while True:
            await self._check()
            await self._wake.wait()
            self._wake = trio.Event()

    async def _check(self) -> None:
        try:
            row = await trio_asyncio.aio_as_trio(self._pool.fetchrow)(_STATS)
            if row is None:
                return
            live, changed = int(row[0]), int(row[1])
            if changed > MIN_CHANGED + CHANGED_SHARE * live:
                await trio_asyncio.aio_as_trio(self._pool.execute)("ANALYZE jobs")
                self.analyzed += 1
            self._failing = False
        except Exception as exc:  # the database away, or no right to ANALYZE
            if not self._failing:
                log.warning("statistics of jobs not refreshed: %r", exc)
            self._failing = True
