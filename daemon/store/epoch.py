"""Named SQL of the cluster's admission epoch (:mod:`daemon.admission.cluster`).

One row, ``cluster_epoch`` id 1, bumped as the first statement of every write
transaction that may decide a limit, of a daemon sharing PostgreSQL with
others: the bump's row lock is held to the commit, so those transactions run
one at a time cluster-wide, and the returned epoch says whether another daemon
wrote since this one last did. A transaction that decides no limit holds the
row ``FOR SHARE`` instead, beside other such holders (:func:`share_postgres`).
"""

from __future__ import annotations

import sqlite3
from typing import Any, NamedTuple

import orjson

from actors.budgets import Budget
from actors.window import PERIODS
from daemon.store.budgets import COLS as _BUDGET_COLS
from daemon.store.budgets import load as load_budget
from daemon.store.policies import COLS as _POLICY_COLS

#: Settings keys of figures the daemons share per namespace: ``enqueue_rate``
#: pools and the retention leader's retained bytes. Under the reserved
#: ``quota:`` prefix, so no settings listing shows them, and no quota document is
#: read from them (daemon.store.families.namespace_of).
RATE_PREFIX = "quota:rate:"
RETAINED_PREFIX = "quota:retained:"


def bump(conn: sqlite3.Connection) -> tuple[int, int]:
    """Take the epoch row's lock (waiting for the holder's commit) and advance it:
    the new epoch, and the share-mode transactions counted so far (none here:
    one daemon owns a SQLite file)."""
    row = conn.execute(
        "UPDATE cluster_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch"
    ).fetchone()
    if row is None:  # a schema without the row: refuse loudly rather than decide unlocked
        raise RuntimeError("cluster_epoch has no row 1: the schema is incomplete")
    return int(row[0]), 0


#: The share-mode transactions begun so far: ``cluster_shares``' last value (0
#: before the first). Read in the bump's ``RETURNING``, so after its lock: every
#: share holder counted has ended by then.
_SHARES = "(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM cluster_shares)"


def bump_postgres(conn: Any) -> tuple[int, int]:
    """:func:`bump` on PostgreSQL, noting the transaction's id on the connection
    facade too, in the same statement (asked after a COMMIT whose answer was
    lost: :mod:`daemon.store.commit_outcome`)."""
    row = conn.execute(
        "UPDATE cluster_epoch SET epoch = epoch + 1 WHERE id = 1 "
        f"RETURNING epoch, txid_current(), {_SHARES}"
    ).fetchone()
    if row is None:
        raise RuntimeError("cluster_epoch has no row 1: the schema is incomplete")
    conn.transaction_id = int(row[1])
    return int(row[0]), int(row[2])


def share(_conn: sqlite3.Connection) -> tuple[int, int]:
    """Hold the epoch row in share mode: never on SQLite, whose one daemon has no
    other to run beside."""
    raise RuntimeError("share-mode transactions are PostgreSQL's (daemon.admission.cluster)")


def share_postgres(conn: Any) -> tuple[int, int]:
    """Take the epoch row ``FOR SHARE`` (waiting for an exclusive holder's commit),
    then count this transaction in ``cluster_shares``: the epoch, and this
    transaction's number there (schema_postgres.V12_POSTGRES's function)."""
    epoch, number, xid = conn.execute("SELECT cluster_share()").fetchone()[0]
    conn.transaction_id = int(xid)
    return int(epoch), int(number)


class LimitState(NamedTuple):
    """The limit state every daemon reads back after another one wrote."""

    #: (namespace, queue, jobs running) of every queue with running jobs.
    running: list[tuple[str, str, int]]
    #: Every budget, loaded, and whether any job is parked on it.
    budgets: list[tuple[Budget, bool]]
    #: (namespace, pool state) of every stored ``enqueue_rate`` pool.
    rates: list[tuple[str, tuple[int, int, int]]]
    #: Every policy row with each window's two latest usage rows: key -> {start: used}.
    policies: list[tuple[tuple[Any, ...], dict[str, dict[int, int]]]]


def _columns(alias: str, cols: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in cols.split(","))


#: Each window's two latest usage rows of policy ``p``: per period (a window's
#: key), a seek for each of the two latest starts and one for each row, whatever
#: the history behind. Two, not one: each daemon reads its own clock, so a
#: daemon a few milliseconds behind another may still be in the window before
#: the one the other has started charging, and must read that window's usage,
#: not zero (a second's window over-admitted across three daemons otherwise:
#: tests/e2e/test_cluster_exactness.py).
_NTH_START = (
    "(SELECT v.window_start FROM policy_usage v WHERE v.namespace = p.namespace "
    "AND v.queue = p.queue AND v.window_key = ks.period{{collate}} ORDER BY v.window_start DESC "
    "LIMIT 1 OFFSET {n})"
)
_LATEST = (
    "(SELECT {agg}({row}(k.period, k.start, (SELECT u.used FROM policy_usage u "
    "WHERE u.namespace = p.namespace AND u.queue = p.queue AND u.window_key = k.period{collate} "
    "AND u.window_start = k.start))) FROM (SELECT ks.period, CASE ks.n WHEN 0 THEN "
    + _NTH_START.format(n=0)
    + " ELSE "
    + _NTH_START.format(n=1)
    + " END AS start FROM ("
    + " UNION ALL ".join(
        f"SELECT '{period}' AS period, {n} AS n" for period in PERIODS for n in (0, 1)
    )
    + ") ks) k WHERE k.start IS NOT NULL)"
)
#: The four parts, each a JSON array of rows, in one statement (one round trip:
#: a daemon that follows another's write pays one, not four). ``{agg}`` and
#: ``{row}`` are each dialect's JSON aggregate and array.
_LIMITS = (
    "SELECT "
    # Running jobs per queue, read through the running-jobs index: it costs what
    # runs, not the backlog.
    "coalesce((SELECT {agg}({row}(r.namespace, r.queue, r.n)) FROM (SELECT namespace, queue, "
    "count(*) AS n FROM jobs WHERE state = 'running' GROUP BY namespace, queue) r), '[]'), "
    f"coalesce((SELECT {{agg}}({{row}}({_columns('b', _BUDGET_COLS)}, EXISTS (SELECT 1 "
    "FROM jobs j WHERE j.namespace = b.namespace AND j.parked_on = b.key))) FROM budgets b), "
    "'[]'), "
    "coalesce((SELECT {agg}({row}(s.key, s.value)) FROM settings s "
    "WHERE s.key >= ? AND s.key < ?), '[]'), "
    f"coalesce((SELECT {{agg}}({{row}}({_columns('p', _POLICY_COLS)}, {_LATEST})) "
    "FROM policies p), '[]')"
)
_LIMITS_SQLITE = _LIMITS.format(agg="json_group_array", row="json_array", collate="")
# The periods are literals of the default collation; the key column is "C":
# compared in the column's, so the seeks use its index.
_LIMITS_POSTGRES = _LIMITS.format(agg="json_agg", row="json_build_array", collate=' COLLATE "C"')


def limits(conn: sqlite3.Connection) -> LimitState:
    """Every limit's state as the store holds it (:class:`LimitState`)."""
    return _limit_state(conn, _LIMITS_SQLITE)


def limits_postgres(conn: Any) -> LimitState:
    """:func:`limits` on PostgreSQL (its JSON functions' names differ)."""
    return _limit_state(conn, _LIMITS_POSTGRES)


def _limit_state(conn: Any, statement: str) -> LimitState:
    row = conn.execute(statement, _key_range(RATE_PREFIX)).fetchone()
    running, budgets, rates, policies = (orjson.loads(part) for part in row)
    return LimitState(
        [(ns, queue, int(n)) for ns, queue, n in running],
        [(load_budget(tuple(b[:-1])), bool(b[-1])) for b in budgets],
        [(key[len(RATE_PREFIX) :], _pool(orjson.loads(value))) for key, value in rates],
        [(tuple(p[:-1]), _latest(p[-1])) for p in policies],
    )


def _latest(rows: Any) -> dict[str, dict[int, int]]:
    """Each window's latest usage rows, ``{key: {start: used}}``, from the nested
    aggregate (SQLite hands it over as JSON text, PostgreSQL as JSON; no rows:
    ``[]`` or null)."""
    if isinstance(rows, str):
        rows = orjson.loads(rows)
    out: dict[str, dict[int, int]] = {}
    for key, start, used in rows or ():
        out.setdefault(key, {})[int(start)] = int(used)
    return out


def _pool(state: list[Any]) -> tuple[int, int, int]:
    units, as_of, in_flight = state
    return int(units), int(as_of), int(in_flight)


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


def _key_range(prefix: str) -> tuple[str, str]:
    """The settings keys under ``prefix`` (ending ``:``) as ``key >= ? AND key < ?``
    bounds: ";" follows ":"."""
    return prefix, prefix[:-1] + ";"


def _shared(conn: sqlite3.Connection, prefix: str) -> list[tuple[str, Any]]:
    """(namespace, decoded value) of every settings row under ``prefix``."""
    rows = conn.execute(
        "SELECT key, value FROM settings WHERE key >= ? AND key < ?", _key_range(prefix)
    ).fetchall()
    return [(key[len(prefix) :], orjson.loads(value)) for key, value in rows]


def _share(conn: sqlite3.Connection, prefix: str, namespace: str, value: Any, now: int) -> None:
    conn.execute(
        "INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        (prefix + namespace, orjson.dumps(value).decode(), now),
    )


def save_rate(conn: sqlite3.Connection, namespace: str, state: tuple[int, int, int],
              now: int) -> None:  # fmt: skip
    """Write a namespace's ``enqueue_rate`` pool, in the enqueue's transaction."""
    _share(conn, RATE_PREFIX, namespace, list(state), now)


def retained(conn: sqlite3.Connection) -> dict[str, int]:
    """The retention leader's last retained bytes per namespace."""
    return {ns: int(total) for ns, total in _shared(conn, RETAINED_PREFIX)}


def save_retained(conn: sqlite3.Connection, totals: dict[str, int], now: int) -> None:
    """Write the retained bytes the leader measured (namespace -> bytes)."""
    for namespace, total in totals.items():
        _share(conn, RETAINED_PREFIX, namespace, total, now)


def waiting(conn: sqlite3.Connection, namespace: str) -> int:
    """A namespace's scheduled and pending jobs (what ``max_pending`` counts)."""
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE namespace = ? AND state IN ('scheduled', 'pending')",
        (namespace,),
    ).fetchone()
    return int(row[0])
