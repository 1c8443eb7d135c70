"""Named SQL for queue admission policies and their window usage."""

from __future__ import annotations

import sqlite3
from typing import Any

COLS = "namespace, queue, policy, created_at, updated_at, created_by, updated_by, source"

Row = tuple[Any, ...]

#: Insert or replace: an upsert on the key, portable to PostgreSQL.
_SAVE = (
    f"INSERT INTO policies ({COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (namespace, queue) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLS.replace(" ", "").split(",")[2:])
)


def all_policies(conn: sqlite3.Connection) -> list[Row]:
    """Every stored policy row (``policy`` is the JSON text of its fields)."""
    return conn.execute(f"SELECT {COLS} FROM policies ORDER BY namespace, queue").fetchall()


def save(conn: sqlite3.Connection, row: Row) -> None:
    """Insert or replace one policy row (in :data:`COLS` order)."""
    conn.execute(_SAVE, row)


def delete(conn: sqlite3.Connection, namespace: str, queue: str) -> None:
    """Remove one policy (its usage rows stay: harmless, and a history)."""
    conn.execute("DELETE FROM policies WHERE namespace = ? AND queue = ?", (namespace, queue))


def usage(conn: sqlite3.Connection, namespace: str, queue: str, key: str,
          window_start: int) -> int:  # fmt: skip
    """Claims charged to one window of a policy (``key``: its period; 0 when none was)."""
    row = conn.execute(
        "SELECT used FROM policy_usage WHERE namespace = ? AND queue = ? AND window_key = ? "
        "AND window_start = ?",
        (namespace, queue, key, window_start),
    ).fetchone()
    return 0 if row is None else row[0]


def usage_after(
    conn: sqlite3.Connection, namespace: str, queue: str, key: str, window_start: int
) -> dict[int, int]:
    """Claims charged to windows of ``key`` starting after ``window_start``, by start
    (there are some only after the host's clock stepped back)."""
    rows = conn.execute(
        "SELECT window_start, used FROM policy_usage "
        "WHERE namespace = ? AND queue = ? AND window_key = ? AND window_start > ?",
        (namespace, queue, key, window_start),
    ).fetchall()
    return {start: used for start, used in rows}


def prune(conn: sqlite3.Connection, namespace: str, queue: str, key: str, before: int) -> None:
    """Forget the usage of windows of ``key`` starting before ``before`` (the history
    of a second or minute window, which would otherwise grow by a row a second)."""
    conn.execute(
        "DELETE FROM policy_usage WHERE namespace = ? AND queue = ? AND window_key = ? "
        "AND window_start < ?",
        (namespace, queue, key, before),
    )


def charge(conn: sqlite3.Connection, namespace: str, queue: str, key: str, window_start: int,
           n: int) -> None:  # fmt: skip
    """Charge ``n`` claims to a window, in the claim's transaction."""
    conn.execute(
        "INSERT INTO policy_usage (namespace, queue, window_key, window_start, used) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, queue, window_key, window_start) "
        "DO UPDATE SET used = policy_usage.used + excluded.used",
        (namespace, queue, key, window_start, n),
    )
