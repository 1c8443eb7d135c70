"""Versioned schema migrations, applied with sqlite-utils.

``PRAGMA user_version`` records the last migration applied; each migration runs
in its own ``BEGIN IMMEDIATE`` transaction, so a crash leaves the schema at a
whole version. Add a migration by appending a function to :data:`MIGRATIONS`;
never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlite_utils


def _v1_jobs_settings_audit(db: sqlite_utils.Database) -> None:
    db["jobs"].create(
        {
            "id": str,
            "namespace": str,
            "queue": str,
            "type": str,
            "payload": str,
            "priority": int,
            "state": str,
            "attempts": int,
            "max_attempts": int,
            "lease_ms": int,
            "ready_at": int,
            "created_at": int,
            "updated_at": int,
            "finished_at": int,
            "lease": str,
            "lease_expires_at": int,
            "unique_key": str,
            "budgets": str,
            "error": str,
            "result": str,
            "dead": str,
        },
        pk="id",
        not_null={
            "namespace",
            "queue",
            "type",
            "payload",
            "priority",
            "state",
            "attempts",
            "max_attempts",
            "lease_ms",
            "ready_at",
            "created_at",
            "updated_at",
        },
    )
    # Partial indexes keep each hot path's index to the rows it needs: a claim
    # reads the first rows of ix_jobs_ready, whatever the backlog behind it.
    db.execute(
        "CREATE INDEX ix_jobs_ready ON jobs(namespace, queue, priority, ready_at, id) "
        "WHERE state = 'pending'"
    )
    db.execute("CREATE INDEX ix_jobs_scheduled ON jobs(ready_at) WHERE state = 'scheduled'")
    db.execute("CREATE INDEX ix_jobs_lease ON jobs(lease_expires_at) WHERE state = 'running'")
    db.execute(
        "CREATE UNIQUE INDEX ux_jobs_unique ON jobs(namespace, queue, unique_key) "
        "WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running')"
    )
    # Listing indexes hold only columns that never change, or rows that rarely
    # move, so a job's hot transitions (claim, complete) touch as few as possible.
    db["jobs"].create_index(["namespace", "queue", "id"], "ix_jobs_queue")
    db.execute("CREATE INDEX ix_jobs_dead ON jobs(namespace, queue, id) WHERE state = 'dead'")
    db["queues"].create(
        {
            "namespace": str,
            "queue": str,
            "completed_ttl_ms": int,
            "dead_ttl_ms": int,
            "created_at": int,
        },
        pk=("namespace", "queue"),
        not_null={"namespace", "queue", "created_at"},
    )
    db["settings"].create(
        {"key": str, "value": str, "updated_at": int}, pk="key", not_null={"value", "updated_at"}
    )
    db["audit"].create(
        {
            "id": int,
            "at": int,
            "actor": str,
            "namespace": str,
            "target_kind": str,
            "target": str,
            "action": str,
            "before": str,
            "after": str,
        },
        pk="id",
        not_null={"at", "actor", "namespace", "target_kind", "target", "action"},
    )
    db["audit"].create_index(["namespace", "target_kind", "target", "id"], "ix_audit_target")


def _v2_budgets(db: sqlite_utils.Database) -> None:
    # A budget's settings and its token pool's persisted state (actors.budget.PoolState),
    # so a restart neither refills a drip nor forgets what is in flight.
    db["budgets"].create(
        {
            "namespace": str,
            "key": str,
            "allocation": int,
            "strategy": str,
            "created_at": int,
            "updated_at": int,
            "units": int,
            "as_of_ms": int,
            "in_flight": int,
            "source": str,
        },
        pk=("namespace", "key"),
        not_null={
            "namespace", "key", "allocation", "strategy", "created_at", "updated_at",
            "units", "as_of_ms", "in_flight", "source",
        },
    )  # fmt: skip


def _v3_parking(db: sqlite_utils.Database) -> None:
    # A job whose budget cannot pay is parked: it keeps status pending but
    # leaves the ready index, so claims never read past it, and its budget
    # finds its parked jobs oldest first.
    db["jobs"].add_column("parked_on", str)
    db.execute("DROP INDEX ix_jobs_ready")
    db.execute(
        "CREATE INDEX ix_jobs_ready ON jobs(namespace, queue, priority, ready_at, id) "
        "WHERE state = 'pending' AND parked_on IS NULL"
    )
    db.execute(
        "CREATE INDEX ix_jobs_parked ON jobs(namespace, parked_on, id) WHERE parked_on IS NOT NULL"
    )


def _v4_leader(db: sqlite_utils.Database) -> None:
    # Leader leases: one row per role (``retention``), held by one daemon among
    # all those sharing the database until ``expires_at`` (wall ms) unless renewed.
    db["leader"].create(
        {"role": str, "holder": str, "expires_at": int},
        pk="role",
        not_null={"role", "holder", "expires_at"},
    )


def _v5_policies(db: sqlite_utils.Database) -> None:
    # Queue admission policies (seed 002) and their usage per window: a new
    # window starts at zero by having no row, so nothing is written at a boundary.
    db["policies"].create(
        {
            "namespace": str, "queue": str, "policy": str, "created_at": int,
            "updated_at": int, "created_by": str, "updated_by": str, "source": str,
        },
        pk=("namespace", "queue"),
        not_null={"namespace", "queue", "policy", "created_at", "updated_at", "source"},
    )  # fmt: skip
    db["policy_usage"].create(
        {"namespace": str, "queue": str, "window_start": int, "used": int},
        pk=("namespace", "queue", "window_start"),
        not_null={"namespace", "queue", "window_start", "used"},
    )


def _v6_usage(db: sqlite_utils.Database) -> None:
    # Usage metering (seed 001's monthly quota): jobs enqueued per namespace
    # and minute, rolled into days. ``rolled`` is how much of ``jobs`` the days
    # hold already, so an increment landing after a roll-up is rolled next time.
    db["usage_minutes"].create(
        {"namespace": str, "minute": int, "jobs": int, "rolled": int},
        pk=("namespace", "minute"),
        not_null={"namespace", "minute", "jobs", "rolled"},
        defaults={"rolled": 0},
    )
    db.execute("CREATE INDEX ix_usage_unrolled ON usage_minutes(minute) WHERE jobs > rolled")
    db["usage_days"].create(
        {"namespace": str, "day": int, "jobs": int},
        pk=("namespace", "day"),
        not_null={"namespace", "day", "jobs"},
    )
    # The highest monthly-quota level announced per namespace and UTC month.
    db["usage_levels"].create(
        {"namespace": str, "month": str, "level": int},
        pk=("namespace", "month"),
        not_null={"namespace", "month", "level"},
    )


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _v1_jobs_settings_audit,
    _v2_budgets,
    _v3_parking,
    _v4_leader,
    _v5_policies,
    _v6_usage,
]


def schema_version(db: sqlite_utils.Database) -> int:
    """The last migration applied (0 for a new database)."""
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite_utils.Database) -> int:
    """Apply every migration past the stored version; return the new version."""
    version = schema_version(db)
    if version > len(MIGRATIONS):
        raise RuntimeError(
            f"database schema version {version} is newer than this sluicegate "
            f"({len(MIGRATIONS)}); upgrade sluicegate"
        )
    for number, step in enumerate(MIGRATIONS[version:], start=version + 1):
        conn = db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            step(db)
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)
