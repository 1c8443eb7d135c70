"""Versioned schema migrations: one list, for SQLite and PostgreSQL.

Each entry of :data:`MIGRATIONS` is a :class:`~daemon.store.migration.Migration`:
a version, a short name, its SQLite form (a function over a sqlite-utils
database) and its PostgreSQL form (SQL statements) making the same tables,
columns and indexes, so the same queries, modulo parameter style, run on both.

Each dialect keeps its version its own way. SQLite: ``PRAGMA user_version``
records the last migration applied, and each migration runs in its own
``BEGIN IMMEDIATE`` transaction, so a crash leaves the schema at a whole
version (:func:`migrate`, here). PostgreSQL: one row per migration applied in
the table ``sluicegate_schema_migrations``, each migration in its own
transaction under an advisory lock, so that daemons starting together migrate
once (:mod:`daemon.store.pg_schema`).

Add a migration by appending an entry with both forms; never edit one that
has shipped: databases in the field are past it and would never see the edit.
"""

from __future__ import annotations

from daemon.store import schema_postgres as pg
from daemon.store.migration import (
    Migration,
    SchemaStatus,
    SchemaTooNew,
    Step,
    pending_steps,
    refuse_newer,
)
from daemon.store.sqlite_lib import sqlite_utils

__all__ = ["MIGRATIONS", "Migration", "SchemaTooNew", "migrate", "schema_version", "sqlite_status"]

# The PostgreSQL forms follow SQLite's schema name for name; where SQLite relies
# on its own typing, they say so explicitly:
# * Integers and ms instants are bigint: SQLite's INTEGER holds 64 bits in any
#   column. (SQLite would also store a string there; PostgreSQL refuses it.)
# * Every text column is COLLATE "C": SQLite compares text as bytes (BINARY),
#   so ids, keys and cursors (``id > ?``, ``ORDER BY id``) must sort the same
#   whatever locale the PostgreSQL database was created with.
# * JSON (payload, budgets, error, result, dead, audit's before/after, policy)
#   stays text, not jsonb: the store passes it through as it does on SQLite,
#   and jsonb would reorder keys and parse every write.
# * A SQLite TEXT PRIMARY KEY accepts NULL (a legacy quirk); a PostgreSQL
#   primary key is NOT NULL. The store never writes a NULL key.


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


def _v7_cluster(db: sqlite_utils.Database) -> None:
    # The admission epoch of daemons sharing one PostgreSQL database
    # (daemon.store.cluster): one row, bumped first by every write transaction.
    # SQLite has one daemon per file and never reads it; the table is kept in
    # both dialects so the schemas stay one list.
    db["cluster_epoch"].create({"id": int, "epoch": int}, pk="id", not_null={"epoch"})
    db["cluster_epoch"].insert({"id": 1, "epoch": 0})
    # The live daemons (daemon.admission.membership): per-daemon limits are split
    # over the daemons heartbeating here.
    db["members"].create(
        {"daemon": str, "joined_at": int, "heartbeat_at": int},
        pk="daemon",
        not_null={"joined_at", "heartbeat_at"},
    )


def _v8_groups(db: sqlite_utils.Database) -> None:
    # Fairness groups (docs/fairness.md): a job's group (``group`` is an SQL
    # keyword) and the ready rows by group, so a fair claim reads the head of
    # one group whatever the backlog of the others. A job without a group is
    # NULL, and out of the index, so a queue that counts no groups pays
    # nothing for it; in a queue that does, the default group is stored ''.
    db["jobs"].add_column("grp", str)
    db.execute(_GROUP_READY)


_GROUP_READY = (
    "CREATE INDEX ix_jobs_group_ready ON jobs(namespace, queue, grp, priority, ready_at, id) "
    "WHERE state = 'pending' AND parked_on IS NULL AND grp IS NOT NULL"
)


def _v9_window_usage(db: sqlite_utils.Database) -> None:
    # Stacked windows: a policy may count claims in several windows, two of which
    # can start at the same instant (a minute and a second), so usage is also
    # keyed by the window, named by its period (one window per period). A row
    # from before is its policy's one window's; one whose policy is gone (or
    # stored text that is not JSON: a policy failing closed) keeps ''.
    db["policy_usage"].add_column("window_key", str, not_null_default="")
    db.execute(
        "UPDATE policy_usage SET window_key = coalesce((SELECT CASE WHEN json_valid(p.policy) "
        "THEN json_extract(p.policy, '$.window.period') END FROM policies p "
        "WHERE p.namespace = policy_usage.namespace AND p.queue = policy_usage.queue), '')"
    )
    # The default was only for the rows already there (PostgreSQL's form drops it too).
    db["policy_usage"].transform(
        pk=("namespace", "queue", "window_key", "window_start"), defaults={"window_key": None}
    )


def _v10_budget_pause(db: sqlite_utils.Database) -> None:
    # A budget's pause (budget_pause): no debit before paused_until (wall ms),
    # and why. Kept with the pool, so a restart and every daemon of a cluster
    # (which read budgets back whole) hold it.
    db["budgets"].add_column("paused_until", int)
    db["budgets"].add_column("pause_reason", str)


def _v11_budget_enforce(db: sqlite_utils.Database) -> None:
    # Shadow mode of a budget (docs/rollout.md): 0 = evaluated and counted, holds
    # nothing back. Kept with the budget, so every daemon of a cluster (which read
    # budgets back whole) shadows it too. Policies and quotas keep theirs in
    # their stored JSON.
    db["budgets"].add_column("enforce", int, not_null_default=1)


def _v12_share_mode(_db: sqlite_utils.Database) -> None:
    # PostgreSQL's share-mode transactions (daemon.admission.cluster): one
    # daemon owns a SQLite file, so nothing here.
    pass


#: Every migration, in order: entry ``i`` is version ``i + 1`` (the version
#: field says so for the reader; tests/unit/test_schema.py holds them equal).
MIGRATIONS: list[Migration] = [
    Migration(1, "jobs_settings_audit", _v1_jobs_settings_audit, pg.V1_POSTGRES),
    Migration(2, "budgets", _v2_budgets, pg.V2_POSTGRES),
    Migration(3, "parking", _v3_parking, pg.V3_POSTGRES),
    Migration(4, "leader", _v4_leader, pg.V4_POSTGRES),
    Migration(5, "policies", _v5_policies, pg.V5_POSTGRES),
    Migration(6, "usage", _v6_usage, pg.V6_POSTGRES),
    Migration(7, "cluster", _v7_cluster, pg.V7_POSTGRES),
    Migration(8, "groups", _v8_groups, pg.V8_POSTGRES),
    Migration(9, "window_usage", _v9_window_usage, pg.V9_POSTGRES),
    Migration(10, "budget_pause", _v10_budget_pause, pg.V10_POSTGRES),
    Migration(11, "budget_enforce", _v11_budget_enforce, pg.V11_POSTGRES),
    Migration(12, "share_mode", _v12_share_mode, pg.V12_POSTGRES),
]


def schema_version(db: sqlite_utils.Database) -> int:
    """The last migration applied to a SQLite database (0 for a new one)."""
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite_utils.Database) -> int:
    """Apply every migration past the stored version; return the new version.

    Raises :class:`~daemon.store.migration.SchemaTooNew` (a ``RuntimeError``)
    for a database a newer build migrated, having changed nothing.
    """
    version = schema_version(db)
    refuse_newer(version, len(MIGRATIONS))
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


def sqlite_status(db: sqlite_utils.Database) -> SchemaStatus:
    """The schema of a SQLite database against this build's migrations.

    ``user_version`` is a bare number, so the applied migrations are named from
    this build's list and carry no times; versions past the list are counted
    in ``current`` but cannot be named.
    """
    current = schema_version(db)
    return SchemaStatus(
        dialect="sqlite",
        current=current,
        latest=len(MIGRATIONS),
        applied=tuple(Step(m.version, m.name) for m in MIGRATIONS[:current]),
        pending=pending_steps(MIGRATIONS, current),
    )
