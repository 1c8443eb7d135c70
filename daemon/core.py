"""The daemon's core: the store, the actors and the effects of job transitions.

Both transports call verbs with a :class:`Core`. Verbs write through
:attr:`Core.writer` (group commits) and describe what their writes did with
:meth:`Core.moved`/:meth:`Core.added`, whose effects (counts, doorbells, timer
nudges, metrics) run only once the transaction has committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import sqlite_utils
import trio

from actors import lifecycle as lc
from actors.budgets import Budgets
from actors.clock import Clock
from actors.counts import QueueCounts
from actors.due import Due
from actors.history import History
from actors.ids import IdMint
from actors.namespace import Namespaces
from actors.reaper import DelayTimer, LeaseReaper
from actors.router import ClaimRouter
from actors.watcher import SettingsWatcher
from daemon import __version__, retention
from daemon.admission import quotas, usage
from daemon.admission.admin_limit import AdminWriteLimiter
from daemon.admission.budget_gate import BudgetGate
from daemon.admission.door import Door
from daemon.admission.policies import Policies
from daemon.config import Config
from daemon.metrics import Metrics
from daemon.session import Authenticator
from daemon.store.database import GroupCommit
from daemon.store.health import StoreHealth
from daemon.store.interface import JobRow, Store, Tx
from daemon.store.rows import dumps, to_wire

log = logging.getLogger("sluicegate.core")
RUNNING_CACHE_MAX = 100_000
RUNNING_CACHE_PAYLOAD = 8192
QueueKey = tuple[str, str]


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
        health = StoreHealth(cfg.database_path(), cfg.wal_max_bytes)
        self.writer = GroupCommit(self.conn, clock.now_ms, health=health)
        #: Every read and write of the daemon goes through this interface.
        self.store: Store = self.writer.store
        self.meter = usage.Meter()
        self.writer.pending.append(self.meter)
        self.router = ClaimRouter()
        self.counts = QueueCounts()
        self.ids = IdMint()
        self.metrics = Metrics(config.daemon.metrics_max_queues)
        self.history = History()  # the board's pictures (bounded, in memory)
        self.reaper = LeaseReaper(
            clock,
            Due(self.store.jobs.earliest_lease_expiry,
                lambda _now: self.writer.write(self.reap_lapsed)),
        )  # fmt: skip
        self.delay_timer = DelayTimer(
            clock,
            Due(self.store.jobs.earliest_scheduled,
                lambda _now: self.writer.write(self.promote_due)),
        )  # fmt: skip
        self.started_at = clock.now_ms()
        self.draining = False
        #: Called once when the daemon starts draining.
        self.on_drain: list[Callable[[], None]] = []
        self.known_queues: set[QueueKey] = set()
        self.problems: list[str] = []
        #: Running jobs' rows by id, so lease checks need no SELECT. Entries
        #: change only after commits; every write using one is guarded on the
        #: lease in the store, so a stale entry is harmless. Bounded: jobs with
        #: big payloads, or past the cap, are simply looked up in the store.
        self.running: dict[str, JobRow] = {}
        self.budgets = Budgets()
        self.budget_gate = BudgetGate(self)
        self.namespaces = Namespaces()
        self.door = Door(
            clock=clock, namespaces=self.namespaces, metrics=self.metrics,
            config=lambda: self.config, known_queues=lambda: self.known_queues,
        )  # fmt: skip
        self.admin_writes = AdminWriteLimiter(
            clock=clock, metrics=self.metrics, config=lambda: self.config
        )
        self.policies = Policies(self)
        self.watcher = SettingsWatcher(lambda: quotas.reload(self))
        self.retention = retention.Retention(
            committer=self.writer, store=self.store, counts=self.counts,
            namespaces=self.namespaces, metrics=self.metrics, config=lambda: self.config,
        ).leader()  # fmt: skip
        self.usage = usage.Rollup(
            clock=clock, committer=self.writer, namespaces=self.namespaces,
            metrics=self.metrics, config=lambda: self.config,
        )  # fmt: skip
        self.rollup = self.usage.ticker()
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
        quotas.reload(self)
        self.metrics.bind(
            clock=self.clock, counts=self.counts, budgets=self.budgets,
            namespaces=self.namespaces, policies=self.policies, parked=self.budget_gate,
            router=self.router, store_health=self.writer.health,
        )  # fmt: skip

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the committer and the timers until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.writer.run)
            await nursery.start(self.reaper.run)
            await nursery.start(self.delay_timer.run)
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
            "store": "sqlite",
            "group_commits": {"commits": self.writer.commits, "writes": self.writer.writes},
        }
        lag = self.metrics.lag_summary()
        if lag is not None:
            info["loop_lag"] = lag
        return info

    def job_wire(self, row: JobRow, now_ms: int | None = None) -> dict[str, Any]:
        """The job object of ``row`` with its derived ``admission``."""
        job = to_wire(row)
        if row.state == lc.PENDING:
            job["admission"] = self.admission(row, now_ms)
        return job

    def admission(self, row: JobRow, now_ms: int | None = None) -> dict[str, Any] | None:
        """A pending job's derived ``admission``: budgets first, then its namespace's
        hold (``max_running`` reached, or a quota that cannot be read)."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        held = self.budget_gate.admission(row, now) if row.budgets is not None else None
        if held is not None and held["state"] == "deferred":
            return held
        namespace = row.namespace
        hold = quotas.hold(self, namespace)
        if hold is not None:
            at = self.reaper.target if hold == "running_full" else None
            return {"state": "deferred", "reason": hold, "next_eligible_at": at, "exact": False}
        policy = self.policies.status((namespace, row.queue), now)
        if policy is not None and (policy.state == "deferred" or held is None):
            return policy.to_dict()
        quota = self.namespaces.get(namespace).quota
        if held is None and quota is not None and quota.max_running is not None:
            return {"state": "admitted", "reason": None, "next_eligible_at": None, "exact": True}
        return held

    def quota_changed(self, namespace: str) -> None:
        """A namespace's quota changed (after commit): a raised or fixed limit
        may make held-back jobs claimable."""
        self.wake_namespace(namespace)

    def wake_namespace(self, namespace: str) -> None:
        """Ring every queue of ``namespace`` that has claimable jobs (a freed slot)."""
        for queue in self.counts.queues_of(namespace):
            key = (namespace, queue)
            n = self.claimable(key)
            if n > 0:
                self.router.ring(key, n, pending=n, edge=False)

    # -- effects of committed transitions -------------------------------------

    def ensure_queue(self, tx: Tx, namespace: str, queue: str) -> None:
        """Record a queue at its first enqueue."""
        key = (namespace, queue)
        if key not in self.known_queues:
            tx.store.queues.ensure(namespace, queue, tx.now_ms)
            tx.after(lambda: self.known_queues.add(key))

    def claimable(self, key: QueueKey) -> int:
        """Pending jobs of ``key`` that a claim may take (not parked)."""
        return self.counts.get(key, lc.PENDING) - self.budget_gate.parked_in(key)

    def _ring(self, key: QueueKey, n: int) -> None:
        """``n`` jobs of ``key`` became claimable; counts already include them.

        A queue its policy holds back rings nothing: no doorbell for work that
        cannot be claimed (seed 002 REQ-8); it rings once when it reopens.
        """
        if key in self.policies.states and self.policies.deferred_now(key):
            return
        now = self.claimable(key)
        self.router.ring(key, n, pending=now, edge=now == n)

    def added(self, tx: Tx, rows: list[JobRow]) -> None:
        """Job rows were inserted in their arrival states (parked ones counted by dispatch)."""
        if not rows:
            return
        per_key: dict[tuple[QueueKey, str], int] = {}
        ready: dict[QueueKey, int] = {}
        live: dict[str, int] = {}
        earliest: int | None = None
        for row in rows:
            key = (row.namespace, row.queue)
            slot = (key, row.state)
            per_key[slot] = per_key.get(slot, 0) + 1
            if row.state != lc.DEAD:  # shed rows were never accepted: not usage
                live[key[0]] = live.get(key[0], 0) + 1
            if row.state == lc.PENDING and row.parked_on is None:
                ready[key] = ready.get(key, 0) + 1
            elif row.state == lc.SCHEDULED and (earliest is None or row.ready_at < earliest):
                earliest = row.ready_at
        self.meter.note(tx, live)

        def effect() -> None:
            for (key, state), n in per_key.items():
                self.counts.add(key, state, n)
                self.metrics.enqueued(key[1], state, n)
            for key, n in ready.items():
                self._ring(key, n)
            if earliest is not None:
                self.delay_timer.note(earliest)

        tx.after(effect)

    def released(self, key: QueueKey, n: int) -> None:
        """``n`` parked jobs of ``key`` went back to the ready index (after commit)."""
        self._ring(key, n)

    def moved(self, tx: Tx, before: JobRow, after: JobRow) -> None:
        """A job went from ``before``'s state to ``after``'s."""
        self.moved_from(tx, before.state, after)

    def moved_from(self, tx: Tx, source: str, after: JobRow) -> None:
        """A job went from state ``source`` to ``after``'s."""
        key = (after.namespace, after.queue)
        target = after.state
        ready_at, expires = after.ready_at, after.lease_expires_at
        if after.budgets is not None:
            self.budget_gate.moved(tx, source, after)

        def effect() -> None:
            if source == lc.RUNNING:
                self.running.pop(after.id, None)
            self.counts.move(key, source, target)
            self.metrics.moved(key[1], source, target)
            if target == lc.RUNNING and expires is not None:
                self.reaper.note(expires)
            self._after_arrival(key, target, ready_at, 1)
            if source == lc.RUNNING and self.router.waiting:
                quota = self.namespaces.get(key[0]).quota
                if quota is not None and quota.max_running is not None:
                    self.wake_namespace(key[0])  # a freed slot

        tx.after(effect)
        if source == lc.RUNNING and key in self.policies.states:
            # After the counts' effect: the reopen check reads the new counts.
            self.policies.left_running(tx, key)

    def finished(self, tx: Tx, afters: list[JobRow]) -> None:
        """Running jobs were completed or went dead (``afters``: their rows now).

        :meth:`moved_from` for many terminal moves at once: one effect, counts
        and metrics per queue, a freed-slot wake per namespace.
        """
        per_key: dict[tuple[QueueKey, str], int] = {}
        for after in afters:
            if after.budgets is not None:
                self.budget_gate.moved(tx, lc.RUNNING, after)
            slot = ((after.namespace, after.queue), after.state)
            per_key[slot] = per_key.get(slot, 0) + 1
        ids = [after.id for after in afters]

        def effect() -> None:
            for job_id in ids:
                self.running.pop(job_id, None)
            for (key, target), n in per_key.items():
                self.counts.move(key, lc.RUNNING, target, n)
                self.metrics.moved(key[1], lc.RUNNING, target, n)
            if self.router.waiting:
                for namespace in {key[0] for key, _t in per_key}:
                    quota = self.namespaces.get(namespace).quota
                    if quota is not None and quota.max_running is not None:
                        self.wake_namespace(namespace)  # freed slots

        tx.after(effect)
        if self.policies.states:
            for after in afters:  # after the counts' effect, as in moved_from
                self.policies.left_running(tx, (after.namespace, after.queue))

    def remember_running(self, row: JobRow) -> None:
        """Keep a running job's row in :attr:`running` (within the bounds)."""
        if len(self.running) < RUNNING_CACHE_MAX and len(row.payload) <= RUNNING_CACHE_PAYLOAD:
            self.running[row.id] = row

    def lease_extended(self, row: JobRow) -> None:
        """A heartbeat moved a lease's expiry (after commit)."""
        if row.id in self.running:
            self.running[row.id] = row
        self.reaper.note(row.lease_expires_at)

    def claimed(self, tx: Tx, rows: list[JobRow]) -> None:
        """Jobs were claimed (pending -> running) by one claim statement."""
        if not rows:
            return
        now = tx.now_ms
        earliest = min(r.lease_expires_at for r in rows)

        def effect() -> None:
            waits: dict[QueueKey, list[float]] = {}
            for row in rows:
                self.remember_running(row)
                key = (row.namespace, row.queue)
                waits.setdefault(key, []).append(max(0, now - row.ready_at) / 1000)
            for key, seconds in waits.items():  # counted once per queue, not per job
                self.counts.move(key, lc.PENDING, lc.RUNNING, len(seconds))
                self.metrics.moved(key[1], lc.PENDING, lc.RUNNING, len(seconds))
                self.metrics.claim_waits(key[1], seconds)
                self.history.claimed(key, len(seconds), now)
            self.reaper.note(earliest)

        tx.after(effect)

    def promoted(self, tx: Tx, keys: list[tuple[str, str]]) -> None:
        """Scheduled jobs of ``keys`` (one entry per job) became pending."""
        if not keys:
            return

        def effect() -> None:
            per_queue: dict[QueueKey, int] = {}
            for key in keys:
                per_queue[key] = per_queue.get(key, 0) + 1
            for key, n in per_queue.items():
                self.counts.move(key, lc.SCHEDULED, lc.PENDING, n)
                self.metrics.moved(key[1], lc.SCHEDULED, lc.PENDING, n)
                self._ring(key, n)

        tx.after(effect)

    def _after_arrival(self, key: QueueKey, state: str, ready_at: int, n: int) -> None:
        if state == lc.PENDING:
            self._ring(key, n)
        elif state == lc.SCHEDULED:
            self.delay_timer.note(ready_at)

    # -- work the timers and claims share --------------------------------------

    def promote_due(self, tx: Tx) -> None:
        """Make every scheduled job whose time has come pending."""
        rows = tx.store.jobs.promote_due(tx.now_ms)
        self.promoted(tx, [(r[0], r[1]) for r in rows])

    def reap_lapsed(self, tx: Tx) -> None:
        """Return lapsed leases to pending, or to dead when attempts are spent."""
        for row in tx.store.jobs.lapsed(tx.now_ms):
            if row.attempts >= row.max_attempts:
                after = tx.store.jobs.finish(
                    row,
                    event="reap",
                    state=lc.DEAD,
                    now=tx.now_ms,
                    error="lease expired",
                    dead=dumps({"at": tx.now_ms, "reason": "attempts_exhausted"}),
                )
            else:
                after = tx.store.jobs.finish(
                    row,
                    event="reap",
                    state=lc.PENDING,
                    now=tx.now_ms,
                    error="lease expired",
                )
            self.moved(tx, row, after)
            queue = row.queue
            tx.after(lambda queue=queue: self.metrics.failed(queue))

    def catch_up(self, tx: Tx) -> None:
        """Before a claim: promote and reap whatever the timers are about to.

        So a job is claimable exactly at its ``ready_at`` and a lapsed lease can
        be taken over before the reaper runs. Both are indexed no-ops when
        nothing is due.
        """
        now = tx.now_ms
        target = self.delay_timer.target
        if target is not None and target <= now:
            self.promote_due(tx)
        target = self.reaper.target
        if target is not None and target <= now:
            self.reap_lapsed(tx)
