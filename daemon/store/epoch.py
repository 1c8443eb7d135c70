"""Named SQL of the cluster's admission epoch (:mod:`daemon.admission.cluster`).

One row, ``cluster_epoch`` id 1, bumped as the first statement of every write
transaction of a daemon sharing PostgreSQL with others: the bump's row lock is
held to the commit, so those transactions run one at a time cluster-wide, and
the returned epoch says whether another daemon wrote since this one last did.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from actors.budgets import Budget
from daemon.store.budgets import COLS as _BUDGET_COLS
from daemon.store.budgets import load as load_budget
from daemon.store.policies import COLS as _POLICY_COLS


def bump(conn: sqlite3.Connection) -> int:
    """Take the epoch row's lock (waiting for the holder's commit) and advance it;
    the new epoch."""
    row = conn.execute(
        "UPDATE cluster_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch"
    ).fetchone()
    if row is None:  # a schema without the row: refuse loudly rather than decide unlocked
        raise RuntimeError("cluster_epoch has no row 1: the schema is incomplete")
    return int(row[0])


def running(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
    """(namespace, queue, jobs running) of every queue with running jobs; read
    through the running-jobs index, so it costs what runs, not the backlog."""
    return conn.execute(
        "SELECT namespace, queue, count(*) FROM jobs WHERE state = 'running' "
        "GROUP BY namespace, queue"
    ).fetchall()


def budgets(conn: sqlite3.Connection) -> list[tuple[Budget, bool]]:
    """Every budget, loaded, and whether any job is parked on it (one statement)."""
    rows = conn.execute(
        f"SELECT {', '.join('b.' + c.strip() for c in _BUDGET_COLS.split(','))}, "
        "EXISTS (SELECT 1 FROM jobs j WHERE j.namespace = b.namespace AND j.parked_on = b.key) "
        "FROM budgets b ORDER BY b.namespace, b.key"
    ).fetchall()
    return [(load_budget(row[:-1]), bool(row[-1])) for row in rows]


def policies(conn: sqlite3.Connection) -> list[tuple[tuple[Any, ...], int | None, int]]:
    """Every policy row with its latest window's start and usage (None, 0: none)."""
    latest = (
        "FROM policy_usage u WHERE u.namespace = p.namespace AND u.queue = p.queue "
        "ORDER BY u.window_start DESC LIMIT 1"
    )
    rows = conn.execute(
        f"SELECT {', '.join('p.' + c.strip() for c in _POLICY_COLS.split(','))}, "
        f"(SELECT u.window_start {latest}), (SELECT u.used {latest}) "
        "FROM policies p ORDER BY p.namespace, p.queue"
    ).fetchall()
    return [(tuple(row[:-2]), row[-2], row[-1] or 0) for row in rows]


def heartbeat(conn: sqlite3.Connection, daemon: str, now: int, lapse_ms: int) -> int:
    """Say ``daemon`` is alive at ``now``, forget daemons silent for ``lapse_ms``;
    how many are alive (this one included)."""
    conn.execute(
        "INSERT INTO members (daemon, joined_at, heartbeat_at) VALUES (?, ?, ?) "
        "ON CONFLICT (daemon) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
        (daemon, now, now),
    )
    conn.execute("DELETE FROM members WHERE heartbeat_at <= ?", (now - lapse_ms,))
    return int(conn.execute("SELECT count(*) FROM members").fetchone()[0])


def leave(conn: sqlite3.Connection, daemon: str) -> None:
    """``daemon`` stops: the others take its share at their next heartbeat."""
    conn.execute("DELETE FROM members WHERE daemon = ?", (daemon,))


#: Settings keys of the namespaces' ``enqueue_rate`` pools (several daemons):
#: under the reserved ``quota:`` prefix, so no settings listing shows them, and
#: no quota document is read from them (daemon.store.families.namespace_of).
RATE_PREFIX = "quota:rate:"


def rates(conn: sqlite3.Connection) -> list[tuple[str, tuple[int, int, int]]]:
    """(namespace, pool state) of every stored ``enqueue_rate`` pool."""
    rows = conn.execute(
        "SELECT key, value FROM settings WHERE key >= ? AND key < ?",
        (RATE_PREFIX, RATE_PREFIX[:-1] + ";"),  # ";" follows ":": the prefix's range
    ).fetchall()
    out = []
    for key, value in rows:
        units, as_of, in_flight = orjson.loads(value)
        out.append((key[len(RATE_PREFIX) :], (int(units), int(as_of), int(in_flight))))
    return out


def save_rate(conn: sqlite3.Connection, namespace: str, state: tuple[int, int, int],
              now: int) -> None:  # fmt: skip
    """Write a namespace's ``enqueue_rate`` pool, in the enqueue's transaction."""
    conn.execute(
        "INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        (RATE_PREFIX + namespace, orjson.dumps(list(state)).decode(), now),
    )


def waiting(conn: sqlite3.Connection, namespace: str) -> int:
    """A namespace's scheduled and pending jobs (what ``max_pending`` counts)."""
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE namespace = ? AND state IN ('scheduled', 'pending')",
        (namespace,),
    ).fetchone()
    return int(row[0])
