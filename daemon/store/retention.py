"""Named SQL of the retention leader: its lease, TTL windows, the oldest rows, deletes.

No statement here needs an index that a job's hot transitions would maintain:

* TTL windows walk the listing indexes in id order, ``ix_jobs_queue (namespace,
  queue, id)`` for completed rows and ``ix_jobs_dead`` for dead letters, below
  the first id minted after the cutoff (a job that finished before the cutoff
  was created before it, and ids sort by creation). A window reads at most
  ``limit`` index entries, matching or not, so one write stays short whatever
  the queue holds.
* "Oldest" for the row ceilings is creation order (id). The oldest rows of a
  namespace are a merge of its queues' rows in id order, each stepped lazily, so
  a batch of ``n`` reads about ``n`` rows plus, for completed rows, the live and
  dead rows older than them.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from daemon.store.interface import RETENTION

__all__ = ["RETENTION"]

_HOLD = (
    "INSERT INTO leader (role, holder, expires_at) VALUES (?, ?, ?) "
    "ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at "
    "WHERE leader.holder = excluded.holder OR leader.expires_at <= ? "
    "RETURNING holder"
)
_WINDOW = {
    "completed": (
        "SELECT id, state, finished_at FROM jobs INDEXED BY ix_jobs_queue "
        "WHERE namespace = ? AND queue = ? AND id > ? AND id < ? ORDER BY id LIMIT ?"
    ),
    "dead": (
        "SELECT id, state, finished_at FROM jobs INDEXED BY ix_jobs_dead "
        "WHERE namespace = ? AND queue = ? AND state = 'dead' AND id > ? AND id < ? "
        "ORDER BY id LIMIT ?"
    ),
}
_OLDEST = {
    "completed": (
        "SELECT id, queue FROM jobs INDEXED BY ix_jobs_queue "
        "WHERE namespace = ? AND queue = ? AND state = 'completed' ORDER BY id LIMIT ?"
    ),
    "dead": (
        "SELECT id, queue FROM jobs INDEXED BY ix_jobs_dead "
        "WHERE namespace = ? AND queue = ? AND state = 'dead' ORDER BY id LIMIT ?"
    ),
}
#: Finished states only: whatever a caller passes, a live job is never deleted.
_DELETE = {
    "completed": "DELETE FROM jobs WHERE id = ? AND state = 'completed'",
    "dead": "DELETE FROM jobs WHERE id = ? AND state = 'dead'",
}


def hold_lease(conn: sqlite3.Connection, role: str, holder: str, now: int, expires_at: int
               ) -> bool:  # fmt: skip
    """Take ``role``'s lease if it is free or lapsed at ``now``, or renew it if
    ``holder`` has it; True if ``holder`` holds it until ``expires_at``."""
    row = conn.execute(_HOLD, (role, holder, expires_at, now)).fetchone()
    return row is not None


def release_lease(conn: sqlite3.Connection, role: str, holder: str) -> None:
    """Give up ``role``'s lease if ``holder`` has it (another daemon may take it at once)."""
    conn.execute("DELETE FROM leader WHERE role = ? AND holder = ?", (role, holder))


def lease_holder(conn: sqlite3.Connection, role: str) -> tuple[str, int] | None:
    """(holder, expires_at) of ``role``'s lease, lapsed or not; None if never taken."""
    return conn.execute("SELECT holder, expires_at FROM leader WHERE role = ?", (role,)).fetchone()


def window(
    conn: sqlite3.Connection,
    state: str,
    namespace: str,
    queue: str,
    after: str,
    below: str,
    limit: int,
) -> list[tuple[str, str, int | None]]:
    """(id, state, finished_at) of the next ``limit`` rows of a queue after id ``after``
    and below id ``below``: every row for ``completed`` (the index holds no state),
    dead letters only for ``dead``."""
    return conn.execute(_WINDOW[state], (namespace, queue, after, below, limit)).fetchall()


def oldest(
    conn: sqlite3.Connection, state: str, namespace: str, queues: Iterable[str], limit: int
) -> list[tuple[str, str]]:
    """(id, queue) of the ``limit`` oldest rows in ``state`` (completed or dead) of
    ``queues`` of ``namespace``, oldest (lowest id) first."""
    cursors = [conn.execute(_OLDEST[state], (namespace, q, limit)) for q in queues]
    try:
        merged: Iterator[tuple[str, str]] = heapq.merge(*cursors)
        return [row for _, row in zip(range(limit), merged, strict=False)]
    finally:
        for cursor in cursors:
            cursor.close()


def delete(conn: sqlite3.Connection, state: str, ids: Sequence[str]) -> int:
    """Delete the rows ``ids`` that are still in ``state``; how many were."""
    if not ids:
        return 0
    return conn.executemany(_DELETE[state], [(i,) for i in ids]).rowcount
