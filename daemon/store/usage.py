"""Named SQL of usage metering and the storage measurement (seed 001).

* ``usage_minutes`` counts jobs enqueued per namespace and minute (one upsert
  per namespace per group commit); the roll-up adds what is not rolled yet
  into ``usage_days`` and marks it rolled, so an increment that lands after a
  roll-up (a late writer, another daemon) is rolled at the next one, never
  twice. This month's use is its days plus the minutes not rolled yet.
* Retained bytes are measured by walking a queue's rows in id order
  (``ix_jobs_queue``) in windows, so one read stays short whatever the queue
  holds.
"""

from __future__ import annotations

import sqlite3

from daemon.store.interface import MINUTE_MS

__all__ = ["MINUTE_MS"]

DAY_MINUTES = 1440

_METER = (
    "INSERT INTO usage_minutes (namespace, minute, jobs) VALUES (?, ?, ?) "
    # The table's name qualifies its column: PostgreSQL reads a bare one as ambiguous.
    "ON CONFLICT (namespace, minute) DO UPDATE SET jobs = usage_minutes.jobs + excluded.jobs"
)
_ROLL_DAYS = (
    "INSERT INTO usage_days (namespace, day, jobs) "
    "SELECT namespace, minute / 1440, SUM(jobs - rolled) FROM usage_minutes "
    "WHERE jobs > rolled GROUP BY namespace, minute / 1440 "
    "ON CONFLICT (namespace, day) DO UPDATE SET jobs = usage_days.jobs + excluded.jobs"
)
#: A row's bytes: the texts a tenant's jobs fill (payload, result, error).
_WINDOW_BYTES = (
    "SELECT id, length(CAST(payload AS BLOB)) + coalesce(length(CAST(result AS BLOB)), 0) "
    "+ coalesce(length(CAST(error AS BLOB)), 0) FROM jobs INDEXED BY ix_jobs_queue "
    "WHERE namespace = ? AND queue = ? AND id > ? ORDER BY id LIMIT ?"
)


def meter(conn: sqlite3.Connection, counts: list[tuple[str, int, int]]) -> None:
    """Add (namespace, minute, jobs) to the per-minute usage."""
    if len(counts) == 1:  # the usual case: one namespace; execute is cheaper
        conn.execute(_METER, counts[0])
    else:
        conn.executemany(_METER, counts)


def roll_up(conn: sqlite3.Connection, keep_before_minute: int, keep_after_day: int) -> None:
    """Roll every minute not rolled yet into its day; delete rolled minutes older
    than ``keep_before_minute`` and days older than ``keep_after_day``."""
    conn.execute(_ROLL_DAYS)
    conn.execute("UPDATE usage_minutes SET rolled = jobs WHERE jobs > rolled")
    conn.execute(
        "DELETE FROM usage_minutes WHERE minute < ? AND jobs = rolled", (keep_before_minute,)
    )
    conn.execute("DELETE FROM usage_days WHERE day < ?", (keep_after_day,))


def month_totals(conn: sqlite3.Connection, start_ms: int, end_ms: int) -> dict[str, int]:
    """Jobs enqueued per namespace from ``start_ms`` to ``end_ms`` (whole UTC days):
    the rolled days plus the minutes not rolled yet."""
    first_minute, end_minute = start_ms // MINUTE_MS, end_ms // MINUTE_MS
    totals: dict[str, int] = {}
    days = conn.execute(
        "SELECT namespace, SUM(jobs) FROM usage_days WHERE day >= ? AND day < ? GROUP BY namespace",
        (first_minute // DAY_MINUTES, end_minute // DAY_MINUTES),
    )
    minutes = conn.execute(
        "SELECT namespace, SUM(jobs - rolled) FROM usage_minutes INDEXED BY ix_usage_unrolled "
        "WHERE jobs > rolled AND minute >= ? AND minute < ? GROUP BY namespace",
        (first_minute, end_minute),
    )
    for namespace, jobs in (*days, *minutes):
        totals[namespace] = totals.get(namespace, 0) + jobs
    return totals


def announced_level(conn: sqlite3.Connection, namespace: str, month: str) -> int:
    """The highest monthly-quota level announced for ``namespace`` in ``month`` (0: none)."""
    row = conn.execute(
        "SELECT level FROM usage_levels WHERE namespace = ? AND month = ?", (namespace, month)
    ).fetchone()
    return 0 if row is None else row[0]


def announce_level(conn: sqlite3.Connection, namespace: str, month: str, level: int) -> None:
    """Record ``level`` as announced (only ever rising)."""
    conn.execute(
        "INSERT INTO usage_levels (namespace, month, level) VALUES (?, ?, ?) "
        "ON CONFLICT (namespace, month) DO UPDATE SET level = excluded.level "
        "WHERE excluded.level > usage_levels.level",
        (namespace, month, level),
    )


def retained_window(
    conn: sqlite3.Connection, namespace: str, queue: str, after: str, limit: int
) -> tuple[str | None, int, int]:
    """(last id read, rows read, bytes) of the next ``limit`` rows of a queue after
    id ``after``; the last id is None when there were none."""
    rows = conn.execute(_WINDOW_BYTES, (namespace, queue, after, limit)).fetchall()
    if not rows:
        return None, 0, 0
    return rows[-1][0], len(rows), sum(size for _id, size in rows)
