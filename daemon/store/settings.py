"""Named SQL for the ``settings`` table: small documents by key.

Quota documents live here under ``quota:default`` and ``quota:ns:<len>:<ns>``
(seed 000). ``quota:`` is a reserved prefix: :func:`list_public` never shows
it; quotas are read and written only through their own verbs.
"""

from __future__ import annotations

import sqlite3

from daemon.store.interface import QUOTA_PREFIX, namespace_of, quota_key

__all__ = ["QUOTA_PREFIX", "namespace_of", "quota_key"]


def get(conn: sqlite3.Connection, key: str) -> str | None:
    """One setting's text, or None."""
    row = conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def put(conn: sqlite3.Connection, key: str, value: str, now_ms: int) -> None:
    """Insert or replace one setting."""
    conn.execute(
        "INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        (key, value, now_ms),
    )


def delete(conn: sqlite3.Connection, key: str) -> None:
    """Remove one setting."""
    conn.execute("DELETE FROM settings WHERE key = ?", (key,))


def quotas(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Every stored quota document: (key, text)."""
    return conn.execute(
        "SELECT key, value FROM settings WHERE key >= 'quota:' AND key < 'quota;' ORDER BY key"
    ).fetchall()


def list_public(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
    """Every setting outside the reserved ``quota:`` prefix."""
    return conn.execute(
        "SELECT key, value, updated_at FROM settings "
        "WHERE NOT (key >= 'quota:' AND key < 'quota;') ORDER BY key"
    ).fetchall()
