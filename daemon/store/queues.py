"""Named SQL for the ``queues`` table: a queue exists from its first enqueue."""

from __future__ import annotations

import sqlite3
from typing import Any


def all_queues(conn: sqlite3.Connection) -> list[tuple[str, str, int | None, int | None]]:
    """(namespace, queue, completed_ttl_ms, dead_ttl_ms) of every queue."""
    return conn.execute(
        "SELECT namespace, queue, completed_ttl_ms, dead_ttl_ms FROM queues "
        "ORDER BY namespace, queue"
    ).fetchall()


def ensure(conn: sqlite3.Connection, namespace: str, queue: str, now: int) -> None:
    """Record a queue if it is new."""
    conn.execute(
        "INSERT INTO queues (namespace, queue, created_at) VALUES (?, ?, ?) "
        "ON CONFLICT (namespace, queue) DO NOTHING",
        (namespace, queue, now),
    )


def configure(
    conn: sqlite3.Connection,
    namespace: str,
    queue: str,
    completed_ttl_ms: int | None,
    dead_ttl_ms: int | None,
    now: int,
) -> dict[str, Any]:
    """Create or update a queue's TTLs; returns the queue object."""
    conn.execute(
        "INSERT INTO queues (namespace, queue, completed_ttl_ms, dead_ttl_ms, created_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, queue) DO UPDATE SET "
        "completed_ttl_ms = excluded.completed_ttl_ms, dead_ttl_ms = excluded.dead_ttl_ms",
        (namespace, queue, completed_ttl_ms, dead_ttl_ms, now),
    )
    return {"queue": queue, "completed_ttl_ms": completed_ttl_ms, "dead_ttl_ms": dead_ttl_ms}


def get(conn: sqlite3.Connection, namespace: str, queue: str) -> tuple[Any, ...] | None:
    """(completed_ttl_ms, dead_ttl_ms) of one queue, or None."""
    return conn.execute(
        "SELECT completed_ttl_ms, dead_ttl_ms FROM queues WHERE namespace = ? AND queue = ?",
        (namespace, queue),
    ).fetchone()
