"""Named SQL for the ``budgets`` table: settings and persisted pool state."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from actors.bindings import bindings
from actors.budget import BudgetSpec, PoolState, Strategy, TokenPool
from actors.budgets import Budget

COLS = (
    "namespace, key, allocation, strategy, created_at, updated_at, units, as_of_ms, in_flight, "
    "source, paused_until, pause_reason, enforce"
)

Row = tuple[Any, ...]

#: Insert or replace: an upsert on the key, portable to PostgreSQL (which has no
#: ``INSERT OR REPLACE``); every column but the key is replaced.
_SAVE = (
    f"INSERT INTO budgets ({COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (namespace, key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLS.replace(" ", "").split(",")[2:])
)


def all_budgets(conn: sqlite3.Connection) -> list[Row]:
    """Every budget of every namespace, in key order."""
    return conn.execute(f"SELECT {COLS} FROM budgets ORDER BY namespace, key").fetchall()


def save(
    conn: sqlite3.Connection,
    namespace: str,
    key: str,
    *,
    allocation: int,
    strategy: dict[str, Any],
    created_at: int,
    updated_at: int,
    units: int,
    as_of_ms: int,
    in_flight: int,
    source: str,
    paused_until: int | None = None,
    pause_reason: str | None = None,
    enforce: bool = True,
) -> None:
    """Insert or replace one budget (its pause and shadow mode too)."""
    conn.execute(
        _SAVE,
        (namespace, key, allocation, orjson.dumps(strategy).decode(), created_at, updated_at,
         units, as_of_ms, in_flight, source, paused_until, pause_reason, int(enforce)),
    )  # fmt: skip


_UNFINISHED_BOUND = (
    "SELECT queue, budgets FROM jobs WHERE namespace = ? "
    "AND state IN ('scheduled', 'pending', 'running') AND budgets IS NOT NULL"
)


def bound(conn: sqlite3.Connection, namespace: str, key: str) -> dict[int, int]:
    """The unfinished jobs of ``namespace`` bound to budget ``key``, as a multiset
    cost -> jobs.

    It reads the namespace's unfinished jobs (an admin write's check, rare: a
    budget's delete or a lowered allocation); an index of bound jobs would
    cost every bound job's every move instead (measured: 7% of a bound job's
    path, bench/cluster.py exactness-cost)."""
    costs: dict[int, int] = {}
    for _queue, text in conn.execute(_UNFINISHED_BOUND, (namespace,)):
        for bound_key, cost in bindings(text):
            if bound_key == key:
                costs[cost] = costs.get(cost, 0) + 1
    return costs


def bound_queues(conn: sqlite3.Connection, namespace: str, key: str) -> set[str]:
    """The queues of ``namespace`` with unfinished jobs bound to budget ``key``
    (who may pause it: a rare check, read as :func:`bound` reads)."""
    return {
        queue
        for queue, text in conn.execute(_UNFINISHED_BOUND, (namespace,))
        if any(bound_key == key for bound_key, _cost in bindings(text))
    }


def save_pool(conn: sqlite3.Connection, namespace: str, key: str, state: PoolState) -> None:
    """Write one budget's pool state (a claim's debit), in the claim's transaction."""
    conn.execute(
        "UPDATE budgets SET units = ?, as_of_ms = ?, in_flight = ? WHERE namespace = ? AND key = ?",
        (state.units, state.as_of_ms, state.in_flight, namespace, key),
    )


def get(conn: sqlite3.Connection, namespace: str, key: str) -> Row | None:
    """One budget's row, or None."""
    return conn.execute(
        f"SELECT {COLS} FROM budgets WHERE namespace = ? AND key = ?", (namespace, key)
    ).fetchone()


def count(conn: sqlite3.Connection) -> int:
    """How many budgets the daemon has, all namespaces together."""
    return conn.execute("SELECT count(*) FROM budgets").fetchone()[0]


def delete(conn: sqlite3.Connection, namespace: str, key: str) -> None:
    """Remove one budget."""
    conn.execute("DELETE FROM budgets WHERE namespace = ? AND key = ?", (namespace, key))


def load(row: Row) -> Budget:
    """A budget (settings and pool state) from its stored row."""
    (namespace, key, allocation, strategy, created, updated, units, as_of, in_flight, source,
     paused_until, pause_reason, enforce) = row  # fmt: skip
    spec = BudgetSpec(allocation, Strategy(**orjson.loads(strategy)), bool(enforce))
    pool = TokenPool(spec, as_of, PoolState(units, as_of, in_flight))
    return Budget(namespace, key, pool, created, updated, source,
                  paused_until=paused_until, pause_reason=pause_reason)  # fmt: skip


def load_all(conn: sqlite3.Connection) -> list[Budget]:
    """Every budget of every namespace, in key order, loaded."""
    return [load(row) for row in all_budgets(conn)]
