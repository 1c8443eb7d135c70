"""Named SQL for job rows. Every statement a verb or actor runs on ``jobs``.

Rows travel as :class:`~daemon.store.rows.JobRow` (a named tuple in
:data:`COLUMNS` order; the index constants below are for this module and its
white-box tests); :func:`to_wire` turns one into the job object of the wire
contract. Functions take a ``sqlite3.Connection``
(inside a group transaction for writes) and an explicit ``now`` where time
matters, never reading a clock themselves.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from actors import lifecycle as lc
from daemon.store.interface import StaleRow
from daemon.store.pages import page_query
from daemon.store.rows import FIELDS, JobRow, as_row, dumps, to_wire

__all__ = ["COLUMNS", "JobRow", "Row", "StaleRow", "dumps", "to_wire"]

COLUMNS = FIELDS
COLS = ", ".join(COLUMNS)
(ID, NAMESPACE, QUEUE, TYPE, PAYLOAD, PRIORITY, STATE, ATTEMPTS, MAX_ATTEMPTS, LEASE_MS,
 READY_AT, CREATED_AT, UPDATED_AT, FINISHED_AT, LEASE, LEASE_EXPIRES_AT, UNIQUE_KEY, BUDGETS,
 ERROR, RESULT, DEAD, PARKED_ON, GRP) = range(len(COLUMNS))  # fmt: skip

Row = JobRow
# A JobRow of a tuple of its 23 values: the cheapest way to make one.
_new = tuple.__new__

_INSERT = f"INSERT INTO jobs ({COLS}) VALUES ({', '.join('?' * len(COLUMNS))})"
# A fresh job sets only the first 13 columns (the NOT NULL ones); the rest are
# NULL. Binding only those costs SQLite and the sqlite3 module about half as
# much per row as binding all 22 (bench/store_micro.py).
_PLAIN = 13
_INSERT_PLAIN = (
    f"INSERT INTO jobs ({', '.join(COLUMNS[:_PLAIN])}) VALUES ({', '.join('?' * _PLAIN)})"
)
_NO_MORE = (None,) * (len(COLUMNS) - _PLAIN)
_GET = f"SELECT {COLS} FROM jobs WHERE id = ? AND namespace = ?"
_FIND_UNIQUE = (
    f"SELECT {COLS} FROM jobs WHERE namespace = ? AND queue = ? AND unique_key = ? "
    "AND state IN ('scheduled', 'pending', 'running')"
)


def insert(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """Insert new job rows."""
    plain: list[Row] = []
    full: list[Row] = []
    for row in rows:
        if row[_PLAIN:] == _NO_MORE:
            plain.append(row[:_PLAIN])
        else:
            full.append(row)
    if plain:
        conn.executemany(_INSERT_PLAIN, plain)
    if full:
        conn.executemany(_INSERT, full)


_SIZED: dict[tuple[str, int], str] = {}


def _in_list(template: str, ids: Sequence[str]) -> tuple[str, list[str]]:
    """``template`` with ``{}`` made ``?, ?, ...`` for ``ids``, and the ids padded
    with the last one to a power of two, so a few statement texts serve every
    batch size (and stay in the connection's statement cache). A repeated id
    matches its row once."""
    size = 1 << (len(ids) - 1).bit_length()
    statement = _SIZED.get((template, size))
    if statement is None:
        statement = _SIZED[template, size] = template.format(", ".join("?" * size))
    params = list(ids)
    params += [ids[-1]] * (size - len(ids))
    return statement, params


#: Ids per ``IN`` list: well under SQLite's limit on bound parameters.
_IN_CHUNK = 512


def get(conn: sqlite3.Connection, namespace: str, job_id: str) -> Row | None:
    """One job of ``namespace``; another namespace's job reads as absent."""
    row = conn.execute(_GET, (job_id, namespace)).fetchone()
    return None if row is None else as_row(row)


def find_live_unique(conn: sqlite3.Connection, namespace: str, queue: str, key: str) -> Row | None:
    """The live (scheduled, pending or running) job holding ``unique_key``, if any."""
    row = conn.execute(_FIND_UNIQUE, (namespace, queue, key)).fetchone()
    return None if row is None else as_row(row)


_INDEX = {name: i for i, name in enumerate(COLUMNS)}
_UPDATE_SQL: dict[tuple[Any, ...], str] = {}


def update(
    conn: sqlite3.Connection, before: Row, changes: dict[str, Any], *, running: bool = False
) -> Row:
    """Write ``changes`` to the row ``before`` describes; return the row after.

    The caller knows ``before``, so the new row is known without
    ``RETURNING``, which costs SQLite about three times the update. With
    ``running``, the update applies only while the job is still running under
    ``before``'s lease, else :class:`StaleRow` is raised and nothing changed:
    so ``before`` may come from memory instead of a SELECT.
    """
    _write(conn, changes, before[ID], running, before[LEASE])
    after = list(before)
    for column, value in changes.items():
        after[_INDEX[column]] = value
    return _new(JobRow, after)


def _write(
    conn: sqlite3.Connection, changes: dict[str, Any], job_id: str, running: bool, lease: Any
) -> None:
    """``update``'s statement; with ``running``, guarded on the state and ``lease``."""
    columns = (*changes, running)
    statement = _UPDATE_SQL.get(columns)
    if statement is None:
        sets = ", ".join(f"{c} = ?" for c in changes)
        guard = " AND state = 'running' AND lease = ?" if running else ""
        statement = _UPDATE_SQL[columns] = f"UPDATE jobs SET {sets} WHERE id = ?{guard}"
    params = (*changes.values(), job_id, lease) if running else (*changes.values(), job_id)
    if conn.execute(statement, params).rowcount != 1:
        raise StaleRow(job_id)


def fold(conn: sqlite3.Connection, before: Row, payload: str, ready_at: int, now: int) -> Row:
    """Debounce: replace a waiting job's payload and push its ``ready_at``.

    A folded job is scheduled again, so it is no longer parked.
    """
    changes = {
        "payload": payload, "ready_at": ready_at,
        "state": lc.check("fold", before[STATE], lc.SCHEDULED), "updated_at": now,
        "parked_on": None,
    }  # fmt: skip
    return update(conn, before, changes)


def _claim_sql(queues: int) -> str:
    # One indexed, LIMITed probe per queue, merged: the cost is that of reading
    # `max` rows per queue from ix_jobs_ready, whatever the backlog behind them.
    if queues == 1:
        return (
            f"SELECT {COLS} FROM jobs INDEXED BY ix_jobs_ready "
            "WHERE namespace = ? AND queue = ? AND state = 'pending' AND parked_on IS NULL "
            "ORDER BY priority, ready_at, id LIMIT ?"
        )
    probe = (
        "SELECT * FROM (SELECT id, priority, ready_at FROM jobs INDEXED BY ix_jobs_ready "
        "WHERE namespace = ? AND queue = ? AND state = 'pending' AND parked_on IS NULL "
        "ORDER BY priority, ready_at, id LIMIT ?)"
    )
    union = " UNION ALL ".join([probe] * queues)
    return (
        f"SELECT {COLS} FROM jobs WHERE id IN "
        f"(SELECT id FROM ({union}) ORDER BY priority, ready_at, id LIMIT ?)"
    )


_CLAIM_SQL: dict[int, str] = {}


def _claim_sql_postgres(queues: int) -> str:
    # Rows another daemon's open claim holds are skipped, never waited for
    # (SKIP LOCKED). The state test is repeated on the locking query so that a
    # row claimed and committed elsewhere since the probe read it is
    # re-checked on its newest version and left out. With several queues the
    # probes are plain reads: a candidate another daemon holds is dropped by
    # the lock, so such a claim may return fewer rows than there are.
    where = "state = 'pending' AND parked_on IS NULL"
    order = "ORDER BY priority, ready_at, id"
    if queues == 1:
        return (
            f"SELECT {COLS} FROM jobs WHERE namespace = ? AND queue = ? AND {where} "
            f"{order} LIMIT ? FOR UPDATE SKIP LOCKED"
        )
    probe = (
        f"(SELECT id, priority, ready_at FROM jobs WHERE namespace = ? AND queue = ? "
        f"AND {where} {order} LIMIT ?)"
    )
    union = " UNION ALL ".join([probe] * queues)
    return (
        f"SELECT {COLS} FROM jobs WHERE {where} AND id IN "
        f"(SELECT id FROM ({union}) AS probes {order} LIMIT ?) "
        f"{order} FOR UPDATE SKIP LOCKED"
    )


_CLAIM_SQL_POSTGRES: dict[int, str] = {}
# The states the lifecycle table lets a claim and a completion leave: a set
# test per row is the hot path's check (bench/inprocess.py), the table's
# IllegalTransition the error.
_CLAIMABLE = frozenset(lc.sources("claim", lc.RUNNING))
_COMPLETABLE = frozenset(lc.sources("complete", lc.COMPLETED))
_RUNNING, _COMPLETED = lc.RUNNING, lc.COMPLETED
_FINAL = frozenset((lc.COMPLETED, lc.DEAD))
# One statement for a whole claim: a list of ids costs SQLite less than the
# same update run once per id.
_MARK_RUNNING = (
    "UPDATE jobs SET state = 'running', attempts = attempts + 1, lease = ?, "
    "lease_expires_at = ? + coalesce(?, lease_ms), updated_at = ? WHERE id IN ({})"
)


def ready(
    conn: sqlite3.Connection,
    namespace: str,
    queues: Sequence[str],
    limit: int,
    caps: dict[str, int] | None = None,
) -> list[Row]:
    """The first ``limit`` claimable jobs of ``queues``, in claim order, at most
    ``caps[queue]`` of a queue that has a cap.

    Parked jobs are not in the ready index, so however many there are, this
    reads only the rows it returns.
    """
    statement = _CLAIM_SQL.get(len(queues))
    if statement is None:
        statement = _CLAIM_SQL[len(queues)] = _claim_sql(len(queues))
    return _ready(conn, statement, namespace, queues, limit, caps)


def ready_postgres(
    conn: Any,
    namespace: str,
    queues: Sequence[str],
    limit: int,
    caps: dict[str, int] | None = None,
) -> list[Row]:
    """:func:`ready` on PostgreSQL: the rows come locked (``FOR UPDATE SKIP LOCKED``)."""
    statement = _CLAIM_SQL_POSTGRES.get(len(queues))
    if statement is None:
        statement = _CLAIM_SQL_POSTGRES[len(queues)] = _claim_sql_postgres(len(queues))
    return _ready(conn, statement, namespace, queues, limit, caps)


def _ready(conn: Any, statement: str, namespace: str, queues: Sequence[str], limit: int,
           caps: dict[str, int] | None) -> list[Row]:  # fmt: skip
    params: list[Any] = []
    for queue in queues:
        params += (namespace, queue, limit if caps is None else min(limit, caps.get(queue, limit)))
    if len(queues) > 1:
        params.append(limit)
    rows = list(map(as_row, conn.execute(statement, params)))
    if len(queues) > 1:
        rows.sort(key=lambda r: (r.priority, r.ready_at, r.id))
    return rows


# -- groups (docs/fairness.md): the ready rows of one group, counts by group ---------

_READY_ROWS = "state = 'pending' AND parked_on IS NULL"
_ORDER = "ORDER BY priority, ready_at, id"


def _group_probes(groups: int, postgres: bool) -> str:
    """One LIMITed probe of ix_jobs_group_ready per group, as one statement."""
    if postgres:
        probes = [
            f"(SELECT id, priority, ready_at FROM jobs WHERE namespace = ? AND queue = ? "
            f"AND grp = ? AND {_READY_ROWS} {_ORDER} LIMIT ?)"
            for _g in range(groups)
        ]
        return (
            f"SELECT {COLS} FROM jobs WHERE {_READY_ROWS} AND id IN "
            f"(SELECT id FROM ({' UNION ALL '.join(probes)}) AS probes) "
            f"{_ORDER} FOR UPDATE SKIP LOCKED"
        )
    probes = [
        f"SELECT * FROM (SELECT {COLS} FROM jobs INDEXED BY ix_jobs_group_ready "
        f"WHERE namespace = ? AND queue = ? AND grp = ? AND {_READY_ROWS} {_ORDER} LIMIT ?)"
        for _g in range(groups)
    ]
    return " UNION ALL ".join(probes)


_GROUP_SQL: dict[tuple[bool, int], str] = {}


def _ready_groups(conn: Any, namespace: str, queue: str, wants: Sequence[tuple[str, int]],
                  postgres: bool) -> list[Row]:  # fmt: skip
    # Padded to a power of two (LIMIT 0) so a few statement texts serve every
    # number of groups.
    size = 1 << (len(wants) - 1).bit_length()
    wants = [*wants, *[(wants[-1][0], 0)] * (size - len(wants))]
    statement = _GROUP_SQL.get((postgres, size))
    if statement is None:
        statement = _GROUP_SQL[(postgres, size)] = _group_probes(size, postgres)
    params: list[Any] = []
    for group, n in wants:
        params += (namespace, queue, group, n)
    return list(map(as_row, conn.execute(statement, params)))


def ready_groups(
    conn: sqlite3.Connection, namespace: str, queue: str, wants: Sequence[tuple[str, int]]
) -> list[Row]:
    """The first claimable jobs of named groups of one queue: ``wants`` is
    ``(group, n)`` pairs (``""``: the default group, stored so in a queue that
    counts groups). One LIMITed probe of
    ix_jobs_group_ready per group, so a group's backlog costs nothing."""
    return _ready_groups(conn, namespace, queue, wants, False)


def ready_groups_postgres(
    conn: Any, namespace: str, queue: str, wants: Sequence[tuple[str, int]]
) -> list[Row]:
    """:func:`ready_groups` on PostgreSQL, the rows locked (``SKIP LOCKED``)."""
    return _ready_groups(conn, namespace, queue, wants, True)


def _except_sql(held: Sequence[str], postgres: bool) -> tuple[str, list[str]]:
    # The default group is NULL or '' (in a queue that counts groups).
    named = sorted(set(held) | ({""} if "" in held else set()))
    inside = f"grp NOT IN ({', '.join('?' * len(named))})"
    test = f"grp IS NOT NULL AND {inside}" if "" in held else f"(grp IS NULL OR {inside})"
    index = "" if postgres else " INDEXED BY ix_jobs_ready"
    lock = " FOR UPDATE SKIP LOCKED" if postgres else ""
    statement = (
        f"SELECT {COLS} FROM jobs{index} WHERE namespace = ? AND queue = ? AND {_READY_ROWS} "
        f"AND {test} {_ORDER} LIMIT ?{lock}"
    )
    return statement, named


def ready_except(
    conn: sqlite3.Connection, namespace: str, queue: str, limit: int, held: Sequence[str]
) -> list[Row]:
    """The first ``limit`` claimable jobs of one queue in claim order, skipping the
    groups ``held`` (at their caps): a FIFO queue with group limits. It reads
    past the held groups' rows ahead of the first it returns."""
    statement, named = _except_sql(held, False)
    return list(map(as_row, conn.execute(statement, (namespace, queue, *named, limit))))


def ready_except_postgres(
    conn: Any, namespace: str, queue: str, limit: int, held: Sequence[str]
) -> list[Row]:
    """:func:`ready_except` on PostgreSQL, the rows locked (``SKIP LOCKED``)."""
    statement, named = _except_sql(held, True)
    return list(map(as_row, conn.execute(statement, (namespace, queue, *named, limit))))


#: Groups one walk of ix_jobs_group_ready names at most.
GROUP_NAMES_MAX = 10_000
_GROUP_NAMES = (
    "WITH RECURSIVE g(grp) AS ("
    f"SELECT (SELECT min(grp) FROM jobs WHERE namespace = ? AND queue = ? AND grp IS NOT NULL "
    f"AND {_READY_ROWS}) "
    "UNION ALL SELECT (SELECT min(j.grp) FROM jobs j WHERE j.namespace = ? AND j.queue = ? "
    f"AND j.grp > g.grp AND j.state = 'pending' AND j.parked_on IS NULL) FROM g "
    "WHERE g.grp IS NOT NULL) SELECT grp FROM g WHERE grp IS NOT NULL LIMIT ?"
)


def ready_group_names(conn: sqlite3.Connection, namespace: str, queue: str) -> list[str]:
    """The groups of one queue with claimable jobs, by name (at most
    :data:`GROUP_NAMES_MAX`): a walk of ix_jobs_group_ready, one seek per
    group, whatever the jobs behind them."""
    params = (namespace, queue, namespace, queue, GROUP_NAMES_MAX)
    return [row[0] for row in conn.execute(_GROUP_NAMES, params)]


def group_counts(
    conn: sqlite3.Connection, namespace: str, queue: str, running_only: bool = False
) -> list[tuple[str, str, int]]:
    """(group, state, count) of one queue's pending and running jobs (group
    ``""``: the default): a group ring's start. Ready rows are counted from
    ix_jobs_group_ready, parked ones from ix_jobs_parked, running ones from
    ix_jobs_lease; finished rows are never read. ``running_only``: running
    jobs only (what runs, never the backlog)."""
    out = []
    if not running_only:
        out += conn.execute(
            "SELECT grp, 'pending', count(*) FROM jobs WHERE namespace = ? AND queue = ? "
            f"AND grp IS NOT NULL AND {_READY_ROWS} GROUP BY grp",
            (namespace, queue),
        ).fetchall()
        out += conn.execute(
            "SELECT coalesce(grp, ''), 'pending', count(*) FROM jobs WHERE namespace = ? "
            "AND parked_on IS NOT NULL AND queue = ? AND state = 'pending' GROUP BY grp",
            (namespace, queue),
        ).fetchall()
    out += conn.execute(
        "SELECT coalesce(grp, ''), 'running', count(*) FROM jobs WHERE state = 'running' "
        "AND namespace = ? AND queue = ? GROUP BY grp",
        (namespace, queue),
    ).fetchall()
    return [tuple(r) for r in out]


def park(conn: sqlite3.Connection, parked: Sequence[tuple[str, str]]) -> None:
    """Park jobs: ``(budget key, job id)`` pairs; they leave the ready index."""
    conn.executemany("UPDATE jobs SET parked_on = ? WHERE id = ?", parked)


def unpark(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
    """Return parked jobs to the ready index."""
    conn.executemany("UPDATE jobs SET parked_on = NULL WHERE id = ?", [(i,) for i in ids])


def parked_oldest(
    conn: sqlite3.Connection, namespace: str, key: str, limit: int
) -> list[tuple[str, str, str]]:
    """The oldest ``limit`` jobs parked on budget ``key``: (id, queue, budgets)."""
    return conn.execute(
        "SELECT id, queue, budgets FROM jobs INDEXED BY ix_jobs_parked "
        "WHERE namespace = ? AND parked_on = ? ORDER BY id LIMIT ?",
        (namespace, key, limit),
    ).fetchall()


def parked_counts(conn: sqlite3.Connection) -> list[tuple[str, str, str, int]]:
    """(namespace, queue, budget key, parked jobs) for every parked combination."""
    return conn.execute(
        "SELECT namespace, queue, parked_on, count(*) FROM jobs "
        "WHERE parked_on IS NOT NULL GROUP BY namespace, queue, parked_on"
    ).fetchall()


def unfinished_bindings(conn: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    """(id, namespace, state, budgets JSON) of every unfinished job bound to budgets.

    A scan, run once at start: bindings are rare enough that an index on them
    would cost every job's transitions more than this costs one start.
    """
    return conn.execute(
        "SELECT id, namespace, state, budgets FROM jobs WHERE budgets IS NOT NULL "
        "AND state IN ('scheduled', 'pending', 'running')"
    ).fetchall()


def unfinished_bound_groups(
    conn: sqlite3.Connection,
) -> list[tuple[str, str, str, str, str, str, str]]:
    """(id, namespace, queue, state, group, parked_on, budgets JSON) of every
    unfinished bound job: a scan like :func:`unfinished_bindings`, run when a
    budget's reservations are set and at start while some budget has one."""
    return conn.execute(
        "SELECT id, namespace, queue, state, COALESCE(grp, ''), parked_on, budgets FROM jobs "
        "WHERE budgets IS NOT NULL AND state IN ('scheduled', 'pending', 'running') ORDER BY id"
    ).fetchall()


def mark_running(
    conn: sqlite3.Connection, rows: list[Row], lease: str, lease_ms: int | None, now: int
) -> list[Row]:
    """Claim the jobs ``rows`` (as read in this transaction): running, one more
    attempt, leased; their rows after."""
    claimed = []
    ids = []
    for row in rows:  # all checked before any statement runs
        # Unpacked once and built as one tuple: a copy through a list costs a
        # claim more per row (bench/inprocess.py, batched).
        (job_id, namespace, queue, job_type, payload, priority, state, attempts, max_attempts,
         job_lease_ms, ready_at, created_at, _updated_at, finished_at, _lease, _expires,
         unique_key, budgets, error, result, dead, parked_on, grp) = row  # fmt: skip
        if state not in _CLAIMABLE:
            lc.check("claim", state, _RUNNING)  # raises
        ids.append(job_id)
        claimed.append(_new(JobRow, (
            job_id, namespace, queue, job_type, payload, priority, _RUNNING, attempts + 1,
            max_attempts, job_lease_ms, ready_at, created_at, now, finished_at, lease,
            now + (lease_ms or job_lease_ms), unique_key, budgets, error, result, dead, parked_on,
            grp,
        )))  # fmt: skip
    for start in range(0, len(ids), _IN_CHUNK):
        statement, params = _in_list(_MARK_RUNNING, ids[start : start + _IN_CHUNK])
        conn.execute(statement, (lease, now, lease_ms, now, *params))
    return claimed


def extend_lease(conn: sqlite3.Connection, before: Row, expires: int, now: int) -> Row:
    """Heartbeat: push a running job's lease expiry (guarded on its lease)."""
    lc.check("heartbeat", before[STATE], lc.RUNNING)
    return update(conn, before, {"lease_expires_at": expires, "updated_at": now}, running=True)


def finish(
    conn: sqlite3.Connection,
    before: Row,
    *,
    event: str,
    state: str,
    now: int,
    ready_at: int | None = None,
    attempts_delta: int = 0,
    error: str | None = None,
    result: str | None = None,
    dead: str | None = None,
    budgets: str | None = None,
) -> Row:
    """Move a running job out of ``running``: completed, dead, or back to waiting.

    ``event`` names the transition (complete, fail, release, reap) that the
    lifecycle table must allow from ``before``'s state to ``state``. Guarded on
    ``before``'s lease (:class:`StaleRow` if it no longer holds). ``budgets``
    replaces the stored bindings (a completion's settled costs).
    """
    # The hot path of every single completion: ``before`` unpacked once and the
    # row after built as one tuple, as in mark_running (bench/inprocess.py, single).
    (job_id, namespace, queue, job_type, payload, priority, source, attempts, max_attempts,
     lease_ms, was_ready_at, created_at, _updated_at, _finished_at, lease, _expires,
     unique_key, was_budgets, was_error, _result, _dead, parked_on, grp) = before  # fmt: skip
    lc.check(event, source, state)
    finished_at = now if state in _FINAL else None
    changes: dict[str, Any] = {
        "state": state,
        "lease": None,
        "lease_expires_at": None,
        "updated_at": now,
        "finished_at": finished_at,
        "result": result,
        "dead": dead,
    }
    if attempts_delta:
        attempts = changes["attempts"] = attempts + attempts_delta
    if ready_at is None:
        ready_at = was_ready_at
    else:
        changes["ready_at"] = ready_at
    if error is None:
        error = was_error
    else:
        changes["error"] = error
    if budgets is None:
        budgets = was_budgets
    else:
        changes["budgets"] = budgets
    _write(conn, changes, job_id, True, lease)
    return _new(JobRow, (
        job_id, namespace, queue, job_type, payload, priority, state, attempts, max_attempts,
        lease_ms, ready_at, created_at, now, finished_at, None, None, unique_key, budgets, error,
        result, dead, parked_on, grp,
    ))  # fmt: skip


_COMPLETE_MANY = (
    "UPDATE jobs SET state = 'completed', lease = NULL, lease_expires_at = NULL, "
    "updated_at = ?, finished_at = ?, result = ?, dead = NULL "
    "WHERE id IN ({}) AND state = 'running' AND lease = ?"
)


def complete_many(
    conn: sqlite3.Connection, rows: list[tuple[Row, str | None]], now: int
) -> list[Row] | None:
    """Complete the running jobs ``rows`` ((row, result JSON) each, guarded on
    their leases) with one statement run for all; their rows after, or None
    when any guard failed, having changed nothing (so the caller can go one
    job at a time and say which)."""
    groups, done = _completions(rows, now)
    return done if _complete_groups(conn, groups, len(rows), now) else None


def complete_many_postgres(
    conn: Any, rows: list[tuple[Row, str | None]], now: int
) -> list[Row] | None:
    """:func:`complete_many` on PostgreSQL: the usual batch (one claim's jobs,
    one result) is one statement that changes all of its rows or none, so it
    needs no savepoint around it (two round trips fewer)."""
    groups, done = _completions(rows, now)
    if len(groups) == 1 and len(rows) <= _IN_CHUNK:
        (((lease, result), ids),) = groups.items()
        statement, params = _in_list(_COMPLETE_ALL_POSTGRES, ids)
        changed = conn.execute(statement, (*params, lease, now, now, result, len(rows))).rowcount
        return done if changed == len(rows) else None
    return done if _complete_groups(conn, groups, len(rows), now) else None


#: All of one (lease, result) group, or none: the guarded rows are locked and
#: counted first (a job named twice is one row: the count falls short).
_COMPLETE_ALL_POSTGRES = (
    "WITH target AS (SELECT id FROM jobs WHERE id IN ({}) AND state = 'running' "
    "AND lease = ? FOR UPDATE) "
    "UPDATE jobs SET state = 'completed', lease = NULL, lease_expires_at = NULL, "
    "updated_at = ?, finished_at = ?, result = ?, dead = NULL "
    "WHERE id IN (SELECT id FROM target) AND (SELECT count(*) FROM target) = ? RETURNING id"
)


def _completions(
    rows: list[tuple[Row, str | None]], now: int
) -> tuple[dict[tuple[str, str | None], list[str]], list[Row]]:
    """The ids of ``rows`` by (lease, result), and the rows as completed."""
    # Jobs of one claim share a lease, and most results are alike (none): one
    # statement per (lease, result) and up to _IN_CHUNK ids.
    groups: dict[tuple[str, str | None], list[str]] = {}
    done = []
    for row, result in rows:
        (job_id, namespace, queue, job_type, payload, priority, state, attempts, max_attempts,
         lease_ms, ready_at, created_at, _updated_at, _finished_at, lease, _expires,
         unique_key, budgets, error, _result, _dead, parked_on, grp) = row  # fmt: skip
        if state not in _COMPLETABLE:
            lc.check("complete", state, _COMPLETED)  # raises
        groups.setdefault((lease, result), []).append(job_id)
        done.append(_new(JobRow, (
            job_id, namespace, queue, job_type, payload, priority, _COMPLETED, attempts,
            max_attempts, lease_ms, ready_at, created_at, now, now, None, None, unique_key,
            budgets, error, result, None, parked_on, grp,
        )))  # fmt: skip
    return groups, done


def _complete_groups(
    conn: Any, groups: dict[tuple[str, str | None], list[str]], total: int, now: int
) -> bool:
    """Every group completed, inside a savepoint; False (nothing changed) when
    fewer than ``total`` rows passed their guards."""
    conn.execute("SAVEPOINT complete_many")
    changed = 0
    for (lease, result), ids in groups.items():
        for start in range(0, len(ids), _IN_CHUNK):
            statement, params = _in_list(_COMPLETE_MANY, ids[start : start + _IN_CHUNK])
            changed += conn.execute(statement, (now, now, result, *params, lease)).rowcount
    if changed != total:
        conn.execute("ROLLBACK TO complete_many")
        conn.execute("RELEASE complete_many")
        return False
    conn.execute("RELEASE complete_many")
    return True


def replay(conn: sqlite3.Connection, before: Row, now: int, grouped: bool = False) -> Row:
    """A dead letter back to pending: attempts 0, no error, no dead record.
    ``grouped``: its queue counts groups, so a job of the default group is
    stored in it as ``''`` (see :func:`adopt_default_group`)."""
    changes = {
        "state": lc.check("replay", before[STATE], lc.PENDING), "attempts": 0, "ready_at": now,
        "updated_at": now, "finished_at": None, "error": None, "result": None, "dead": None,
    }  # fmt: skip
    if grouped and before[GRP] is None:
        changes["grp"] = ""
    return update(conn, before, changes)


def adopt_default_group(conn: sqlite3.Connection, namespace: str, queue: str) -> int:
    """A queue starts counting groups: its unfinished jobs without a group are
    stored in the default group ``''``, so ix_jobs_group_ready holds them (once,
    when the policy is set; the queue's rows are read once)."""
    return conn.execute(
        "UPDATE jobs SET grp = '' WHERE namespace = ? AND queue = ? AND grp IS NULL "
        "AND state IN ('scheduled', 'pending', 'running')",
        (namespace, queue),
    ).rowcount


def _state_is(states: Sequence[str]) -> str:
    """SQL: the job is in one of ``states`` (equality for one, as partial indexes want)."""
    if len(states) == 1:
        return f"state = '{states[0]}'"
    return "state IN ({})".format(", ".join(f"'{s}'" for s in states))


# The lifecycle table says which states promote moves (scheduled): the guard is
# derived from it, so the statement moves nothing the table does not allow.
_PROMOTE = (
    f"UPDATE jobs SET state = '{lc.PENDING}', updated_at = ? WHERE id IN "
    f"(SELECT id FROM jobs WHERE {_state_is(lc.sources('promote', lc.PENDING))} "
    f"AND ready_at <= ? LIMIT ?) RETURNING {COLS}"
)


def promote_due(conn: sqlite3.Connection, now: int, batch: int = 1000) -> list[Row]:
    """Scheduled jobs whose ``ready_at`` has come become pending; their rows after."""
    return list(map(as_row, conn.execute(_PROMOTE, (now, now, batch))))


def lapsed(conn: sqlite3.Connection, now: int, batch: int = 1000) -> list[Row]:
    """Running jobs whose lease expired at or before ``now``."""
    cursor = conn.execute(
        f"SELECT {COLS} FROM jobs WHERE state = 'running' AND lease_expires_at <= ? "
        "ORDER BY lease_expires_at LIMIT ?",
        (now, batch),
    )
    return list(map(as_row, cursor))


def earliest_scheduled(conn: sqlite3.Connection) -> int | None:
    """The earliest ``ready_at`` of a scheduled job."""
    return conn.execute("SELECT min(ready_at) FROM jobs WHERE state = 'scheduled'").fetchone()[0]


def earliest_lease_expiry(conn: sqlite3.Connection) -> int | None:
    """The earliest lease expiry of a running job."""
    return conn.execute(
        "SELECT min(lease_expires_at) FROM jobs WHERE state = 'running'"
    ).fetchone()[0]


def list_jobs(
    conn: sqlite3.Connection,
    namespace: str,
    *,
    queue: str | None,
    state: str | None,
    after: str | None,
    limit: int,
) -> list[Row]:
    """Jobs of ``namespace`` in id order, filtered, after the cursor ``after``."""
    statement, params = page_query(
        f"SELECT {COLS} FROM jobs", namespace, {"queue": queue, "state": state}, after, limit
    )
    return list(map(as_row, conn.execute(statement, params)))


#: ``ahead``'s statement: the claimable rows before one job in claim order, read
#: from ix_jobs_ready and cut at ``LIMIT``, so a backlog costs at most that many
#: index steps.
_AHEAD = (
    "SELECT count(*) FROM (SELECT 1 FROM jobs{index} WHERE namespace = ? AND queue = ? "
    f"AND {_READY_ROWS} AND (priority, ready_at, id) < (?, ?, ?) {_ORDER} LIMIT ?) AS ahead"
)


def ahead(conn: sqlite3.Connection, row: Row, limit: int) -> int:
    """Claimable jobs before ``row`` in its queue's claim order, counted up to
    ``limit`` (``explain``'s position)."""
    return _ahead(conn, _AHEAD.format(index=" INDEXED BY ix_jobs_ready"), row, limit)


def ahead_postgres(conn: Any, row: Row, limit: int) -> int:
    """:func:`ahead` on PostgreSQL (no index hint)."""
    return _ahead(conn, _AHEAD.format(index=""), row, limit)


def _ahead(conn: Any, statement: str, row: Row, limit: int) -> int:
    params = (row.namespace, row.queue, row.priority, row.ready_at, row.id, limit)
    return int(conn.execute(statement, params).fetchone()[0])


def dead_ids(
    conn: sqlite3.Connection, namespace: str, queue: str | None, after: str | None, limit: int
) -> list[str]:
    """Ids of dead letters of ``namespace`` (optionally one queue) after ``after``, oldest first."""
    where = "namespace = ? AND state = 'dead' AND id > ?"
    params: list[Any] = [namespace, after or ""]
    if queue is not None:
        where += " AND queue = ?"
        params.append(queue)
    params.append(limit)
    rows = conn.execute(f"SELECT id FROM jobs WHERE {where} ORDER BY id LIMIT ?", params)
    return [r[0] for r in rows]


def state_counts(conn: sqlite3.Connection) -> list[tuple[str, str, str, int]]:
    """(namespace, queue, state, count) for every non-empty combination."""
    return conn.execute(
        "SELECT namespace, queue, state, count(*) FROM jobs GROUP BY namespace, queue, state"
    ).fetchall()
