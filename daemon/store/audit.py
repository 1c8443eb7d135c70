"""Named SQL for the audit trail: every quota, budget, policy and queue write."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from daemon.store.pages import page_query


def record(
    conn: sqlite3.Connection,
    *,
    at: int,
    actor: str,
    namespace: str,
    target_kind: str,
    target: str,
    action: str,
    before: Any,
    after: Any,
) -> None:
    """Append one audit record (``before``/``after`` stored as JSON)."""
    conn.execute(
        "INSERT INTO audit (at, actor, namespace, target_kind, target, action, before, after) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (at, actor, namespace, target_kind, target, action,
         orjson.dumps(before).decode(), orjson.dumps(after).decode()),
    )  # fmt: skip


def list_records(
    conn: sqlite3.Connection,
    namespace: str,
    *,
    target_kind: str | None,
    target: str | None,
    after: int | None,
    limit: int,
    newest_first: bool = False,
) -> list[dict[str, Any]]:
    """Audit records of ``namespace`` oldest first (or newest first), after the
    cursor ``after`` in that order."""
    statement, params = page_query(
        "SELECT id, at, actor, target_kind, target, action, before, after FROM audit",
        namespace, {"target_kind": target_kind, "target": target}, after, limit,
    )  # fmt: skip
    if newest_first:  # the same query, walked backwards from the cursor
        statement = statement.replace("id > ?", "id < ?").replace("ORDER BY id", "ORDER BY id DESC")
    rows = conn.execute(statement, params).fetchall()
    return [
        {"id": r[0], "at": r[1], "actor": r[2], "target_kind": r[3], "target": r[4],
         "action": r[5], "before": orjson.loads(r[6]), "after": orjson.loads(r[7])}
        for r in rows
    ]  # fmt: skip
