"""The composition root: the daemon's services, built and wired once.

:class:`Core` owns the store, the actors and the admission pipeline for the
daemon's whole life; both transports hand it to the verbs. Nothing below the
root knows it: each service is given the narrow things it uses (a clock, the
store, the counts, a metrics sink, a config getter). A job's way through it:

- a verb plans a write and runs it through :attr:`Core.writer` (group commits);
- admission decides inside the write (:class:`~daemon.admission.pipeline.Admission`);
- the store's jobs journal reports each move to the transition step
  (:class:`~daemon.admission.views.Views`), which updates every in-memory view.

docs/architecture.md draws the layers and the path of an enqueue and a claim.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from actors import lifecycle as lc
from actors.budgets import Budgets
from actors.clock import Clock
from actors.counts import QueueCounts
from actors.history import History
from actors.ids import IdMint
from actors.namespace import Namespaces
from actors.router import ClaimRouter
from actors.watcher import SettingsWatcher
from daemon import __version__, retention
from daemon.admission import usage
from daemon.admission.admin_limit import AdminWriteLimiter
from daemon.admission.budget_gate import BudgetGate
from daemon.admission.cluster import ClusterSync, share_checks, unsafe_unlocked
from daemon.admission.door import Door
from daemon.admission.doorbell import Doorbell
from daemon.admission.groups import Groups
from daemon.admission.limit_free import LimitFree
from daemon.admission.pipeline import Admission
from daemon.admission.policies import Policies
from daemon.admission.quotas import Quotas
from daemon.admission.timers import JobTimers
from daemon.admission.views import Views
from daemon.config import Config
from daemon.metrics import Metrics
from daemon.session import Authenticator
from daemon.store.database import GroupCommit
from daemon.store.health import StoreHealth
from daemon.store.interface import JobRow, Store
from daemon.store.pg_opening import dsn_target
from daemon.store.reachability import DatabaseTarget, Reachability
from daemon.store.rows import to_wire
from daemon.store.sqlite_lib import sqlite_utils

log = logging.getLogger("sluicegate.core")
QueueKey = tuple[str, str]


#: PostgreSQL: how long one group transaction may grow (SQLite: 1 ms).
PG_TRANSACTION_BUDGET_S = 0.02


class Core:
    """Everything a verb needs, owned by the daemon for its whole life."""

    def __init__(self, config: Config, db: sqlite_utils.Database, clock: Clock) -> None:
        self.config = config
        self.db = db
        #: SQLite's connection: white-box tests read it; the daemon goes through ``store``.
        self.conn = db.conn
        self.clock = clock
        self.auth = Authenticator(config)
        cfg = config.daemon
        # (PostgreSQL: no file, so no free-space check.)
        health = StoreHealth(None if cfg.postgres_dsn() else cfg.database_path(), cfg.wal_max_bytes)
        # PostgreSQL: each transaction on a connection of the pool (daemon.store.bridge).
        pool = getattr(db, "pool", None)
        # PostgreSQL: a statement is a round trip and daemons take turns on the
        # cluster's epoch lock, so a transaction takes more writes per turn.
        budget_s = 0.001 if pool is None else PG_TRANSACTION_BUDGET_S
        self.writer = GroupCommit(self.conn, clock.now_ms, budget_s, health=health, pool=pool)
        #: Every read and write of the daemon goes through this interface.
        self.store: Store = self.writer.store
        #: Whether the database answers (``/healthz``): the committer's word, or a probe.
        self.database = Reachability(
            _target(config), health=health, commits=lambda: self.writer.commits,
            probe=None if pool is None else db.ping, on_failure=self.writer.failed_elsewhere,
            timeout_s=cfg.database_connect_timeout / 1000,
        )  # fmt: skip
        self.meter = usage.Meter()
        self.writer.pending.append(self.meter)
        self.router = ClaimRouter()
        self.counts = QueueCounts()
        self.ids = IdMint()
        self.metrics = Metrics(cfg.metrics_max_queues, daemon=cfg.daemon_name())
        if pool is not None:  # PostgreSQL: the pool's connections, per daemon
            self.metrics.per_daemon.pool = db.statistics
        self.history = History()  # the board's pictures (bounded, in memory)
        self.timers = JobTimers(clock, self.store, self.writer)
        self.started_at = clock.now_ms()
        self.draining = False
        #: Called once when the daemon starts draining.
        self.on_drain: list[Callable[[], None]] = []
        self.known_queues: set[QueueKey] = set()
        self.problems: list[str] = []
        #: Running jobs' rows by id (kept by the transition step; see Views.running).
        self.running: dict[str, JobRow] = {}
        self.budgets = Budgets()
        self.namespaces = Namespaces()
        self.doorbell = Doorbell(self.counts, self.router)
        self.budget_gate = BudgetGate(
            budgets=self.budgets, clock=clock, store=self.store, committer=self.writer,
            running=self.running, metrics=self.metrics, doorbell=self.doorbell,
        )  # fmt: skip
        self.writer.pending.append(self.budget_gate)  # pools: one write per transaction
        self.policies = Policies(
            clock=clock, counts=self.counts, store=self.store, metrics=self.metrics,
            running=self.running, doorbell=self.doorbell, groups=Groups(metrics=self.metrics),
        )  # fmt: skip
        self.doorbell.parked_in = self.budget_gate.parked_in
        self.doorbell.held = self.policies.holds
        self.quotas = Quotas(
            namespaces=self.namespaces, counts=self.counts, clock=clock, store=self.store,
            metrics=self.metrics, config=lambda: self.config, doorbell=self.doorbell,
            lease_hint=lambda: self.timers.reaper.target,
        )  # fmt: skip
        self.door = Door(
            clock=clock, namespaces=self.namespaces, metrics=self.metrics,
            config=lambda: self.config, known_queues=lambda: self.known_queues,
        )  # fmt: skip
        self.admin_writes = AdminWriteLimiter(
            clock=clock, metrics=self.metrics, config=lambda: self.config
        )
        self.admission = Admission(
            door=self.door, quotas=self.quotas, policies=self.policies,
            budget_gate=self.budget_gate, timers=self.timers, counts=self.counts,
            namespaces=self.namespaces, metrics=self.metrics,
        )  # fmt: skip
        self.views = Views(
            counts=self.counts, metrics=self.metrics, history=self.history,
            running=self.running, reaper=self.timers.reaper,
            delay_timer=self.timers.delay_timer,
            doorbell=self.doorbell, budget_gate=self.budget_gate, policies=self.policies,
            namespaces=self.namespaces, meter=self.meter,
        )  # fmt: skip
        self.store.jobs.step = self.views  # type: ignore[attr-defined]
        self.watcher = SettingsWatcher(self.quotas.reload)
        self.retention_work = retention.Retention(
            committer=self.writer, store=self.store, counts=self.counts,
            namespaces=self.namespaces, metrics=self.metrics, config=lambda: self.config,
        )  # fmt: skip
        self.retention = self.retention_work.leader()
        self.metrics.per_daemon.add_role("retention", self.retention)
        self.usage = usage.Rollup(
            clock=clock, committer=self.writer, namespaces=self.namespaces,
            metrics=self.metrics, config=lambda: self.config,
        )  # fmt: skip
        self.rollup = self.usage.ticker()
        #: Which writes decide no limit (share mode on PostgreSQL).
        self.limit_free = LimitFree(
            namespaces=self.namespaces, policies=self.policies, budgets=self.budgets,
            timers=self.timers, clock=clock, known_queues=lambda: self.known_queues,
        )  # fmt: skip
        self.cluster: ClusterSync | None = None
        if pool is not None:  # PostgreSQL: other daemons may share it (daemon.admission.cluster)
            self.cluster = ClusterSync(
                counts=self.counts, budgets=self.budgets, gate=self.budget_gate,
                policies=self.policies, quotas=self.quotas, committer=self.writer,
                locked=not unsafe_unlocked(),
            )  # fmt: skip
            self.cluster.checks = share_checks()
            self.writer.shares = self.limit_free.enabled = self.cluster.locked
            self.cluster.on_heard.append(self.watcher.nudge)
            self.writer.begun.append(self.cluster.begin)
            self.writer.pending.append(self.cluster)
            self.budget_gate.shared = True
            self.quotas.save_rates = True
        self.recover()

    # -- start-up -------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild in-memory state from the store."""
        store = self.store
        self.counts.load(store.jobs.state_counts())
        self.known_queues = {(ns, q) for ns, q, _c, _d in store.queues.all_queues()}
        self.budgets.load(store.budgets.load_all())
        self.budget_gate.recover()
        self.policies.load()
        self.quotas.reload()
        self.metrics.bind(
            clock=self.clock, counts=self.counts, budgets=self.budgets,
            namespaces=self.namespaces, policies=self.policies, parked=self.budget_gate,
            router=self.router, store_health=self.writer.health,
        )  # fmt: skip

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the committer and the timers until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.writer.run)
            await nursery.start(self.timers.reaper.run)
            await nursery.start(self.timers.delay_timer.run)
            await nursery.start(self.budget_gate.waker.run)
            await nursery.start(self.watcher.run)
            await nursery.start(self.retention.run)
            await nursery.start(self.policies.reopener.run)
            await nursery.start(self.rollup.run)
            task_status.started()

    def drain(self) -> None:
        """SIGTERM: refuse new waits, answer waiting claims empty, tell the
        :attr:`on_drain` hooks (the board's live streams end)."""
        self.draining = True
        self.router.close()
        for hook in self.on_drain:
            hook()

    def reload(self, config: Config) -> None:
        """Take a reloaded config: tokens now, the rest as features read it."""
        self.config = config
        self.auth = Authenticator(config)
        self.problems = []

    def health_problems(self) -> list[str]:
        """What ``/healthz`` reports as degraded (a broken config reload, a namespace
        failing closed, ...)."""
        failing = [
            f"namespace '{a.namespace}' fails closed: its quota cannot be read ({a.broken})"
            for a in self.namespaces.known() if a.broken is not None
        ] + [
            f"queue '{ns}/{q}' fails closed: its policy cannot be evaluated ({s.broken})"
            for (ns, q), s in sorted(self.policies.states.items()) if s.broken is not None
        ]  # fmt: skip
        return list(self.problems) + failing + self.writer.health.degraded()

    def version_info(self) -> dict[str, object]:
        """The ``daemon`` part of ``status``."""
        info: dict[str, object] = {
            "version": __version__,
            "started_at": self.started_at,
            "store": self.database.target.store,
            "group_commits": {"commits": self.writer.commits, "writes": self.writer.writes},
        }
        if self.cluster is not None:  # PostgreSQL: shared with other daemons
            info["cluster"] = {
                "epoch": self.cluster.epoch, "reloads": self.cluster.reloads,
                "shared": self.cluster.shared, "shared_reloads": self.cluster.shared_reloads,
                "door_share": self.door.share,
            }  # fmt: skip
        lag = self.metrics.lag_summary()
        if lag is not None:
            info["loop_lag"] = lag
        return info

    def job_wire(self, row: JobRow, now_ms: int | None = None) -> dict[str, Any]:
        """The job object of ``row`` with its derived ``admission``."""
        job = to_wire(row)
        if row.state == lc.PENDING:
            now = self.clock.now_ms() if now_ms is None else now_ms
            job["admission"] = self.admission.status(row, now)
        return job


def _target(config: Config) -> DatabaseTarget:
    """What ``/healthz`` names of the database: the DSN's host and database
    (never its user or password), or the SQLite file."""
    dsn = config.daemon.postgres_dsn()
    if dsn is None:
        return DatabaseTarget("sqlite", None, str(config.daemon.database_path().absolute()))
    return DatabaseTarget("postgresql", *dsn_target(dsn))
