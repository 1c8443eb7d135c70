"""Prometheus metrics, on a registry of the daemon's own.

The ``queue`` (and ``budget``) label is capped: the first ``max_queues`` distinct queue names
get their own value, later ones are folded into ``__other__``, so a producer
inventing queue names cannot blow up the series count. Gauges are read from
the in-memory counts at scrape time, never by counting rows. Values that differ
between daemons sharing a database carry a ``daemon`` label
(:mod:`daemon.metrics.per_daemon`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from daemon.metrics.gauges import Gauges, GaugeSources, ParkedJobs, PolicyStatuses
from daemon.metrics.labels import OTHER, QueueLabels
from daemon.metrics.per_daemon import DaemonGauges

if TYPE_CHECKING:
    from actors.budgets import Budgets
    from actors.clock import Clock
    from actors.counts import QueueCounts
    from actors.namespace import Namespaces
    from actors.router import ClaimRouter
    from daemon.store.health import StoreHealth

QueueKey = tuple[str, str]

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 3600)
_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_NOTIFY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """The daemon's metrics; verbs and actors report through these methods."""

    def __init__(self, max_queues: int = 100, daemon: str = "") -> None:
        """``daemon`` is the ``daemon`` label's value (``[daemon] name``)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.label = QueueLabels(max_queues)
        #: Budget keys and namespaces share the queue label's cap
        #: (``daemon.metrics_max_queues``).
        self.budget_label = QueueLabels(max_queues)
        self.namespace_label = QueueLabels(max_queues)
        #: Periodic entry names share the same cap, and so do fairness groups.
        self.periodic_label = QueueLabels(max_queues)
        self.group_label = QueueLabels(max_queues)
        r = self.registry
        self._enqueued = Counter(
            "sluicegate_jobs_enqueued", "Jobs enqueued.", ["queue"], registry=r
        )
        self._claimed = Counter("sluicegate_jobs_claimed", "Jobs claimed.", ["queue"], registry=r)
        self._completed = Counter(
            "sluicegate_jobs_completed", "Jobs completed.", ["queue"], registry=r
        )
        self._failed = Counter(
            "sluicegate_jobs_failed", "Failed attempts reported by workers.", ["queue"], registry=r
        )
        self._dead = Counter("sluicegate_jobs_dead", "Jobs that went dead.", ["queue"], registry=r)
        self.budget_debits = Counter(
            "sluicegate_budget_debits", "Tokens debited from budgets.", ["budget"], registry=r
        )
        self.budget_settled_tokens = Counter(
            "sluicegate_budget_settled",
            "Tokens completions settled to (the actual costs workers reported).",
            ["budget"], registry=r,
        )  # fmt: skip
        self.budget_pauses = Counter(
            "sluicegate_budget_pauses", "Pauses that started or lengthened a budget's pause.",
            ["budget"], registry=r,
        )  # fmt: skip
        self._door = Counter(
            "sluicegate_door_decisions", "Door decisions by limit and outcome.",
            ["limit", "outcome"], registry=r,
        )  # fmt: skip
        self._door_children: dict[tuple[str, str], Any] = {}
        self._decisions = Counter(
            "sluicegate_admission_decisions",
            "Decisions of budgets, queue policies and namespace quotas by limit (a bounded "
            "name such as policy.window) and outcome: allowed, blocked, or would_block for a "
            "shadowed limit (enforce = false).",
            ["limit", "outcome"], registry=r,
        )  # fmt: skip
        self._decision_children: dict[tuple[str, str], Any] = {}
        self._quota_refusals = Counter(
            "sluicegate_quota_refusals", "Enqueues refused by a namespace quota.",
            ["namespace", "reason"], registry=r,
        )  # fmt: skip
        self._shed = Counter(
            "sluicegate_jobs_shed", "Jobs written dead by a quota (on_excess = drop).",
            ["namespace", "limit"], registry=r,
        )  # fmt: skip
        self._retention_deleted = Counter(
            "sluicegate_retention_deleted",
            "Finished jobs deleted by the retention leader, by reason "
            "(ttl_completed, ttl_dead, max_archived_rows, max_dead_rows).",
            ["namespace", "reason"], registry=r,
        )  # fmt: skip
        self._monthly_levels = Counter(
            "sluicegate_monthly_quota_levels",
            "Monthly quota levels (50, 80, 90, 100 percent) announced, once per namespace "
            "and month.",
            ["namespace", "level"], registry=r,
        )  # fmt: skip
        self._charged = Counter(
            "sluicegate_admission_charged", "Claims charged to queue policy windows.",
            ["queue"], registry=r,
        )  # fmt: skip
        self._admission_refusals = Counter(
            "sluicegate_admission_refusals", "Claims a queue policy refused, by reason.",
            ["queue", "reason"], registry=r,
        )  # fmt: skip
        self._group_claims = Counter(
            "sluicegate_group_claims", "Claims of group-aware queues by fairness group "
            "(the default group is \"\"; the group label is capped as the queue label).",
            ["queue", "group"], registry=r,
        )  # fmt: skip
        self._periodic_fires = Counter(
            "sluicegate_periodic_fires", "Periodic fires by entry and outcome.",
            ["name", "result"], registry=r,
        )  # fmt: skip
        self._claim_wait = Histogram(
            "sluicegate_claim_wait_seconds",
            "Time from a job's ready_at to its claim.",
            ["queue"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.loop_lag = Histogram(
            "sluicegate_loop_lag_seconds",
            "Lateness of the event-loop probe's wake-ups (daemon.loop_probe).",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self._notify_lag = Histogram(
            "sluicegate_notify_lag_seconds",
            "Time from a doorbell notice's publication (on any daemon) to its receipt "
            "here, by LISTEN/NOTIFY (PostgreSQL); across hosts it includes clock skew.",
            ["daemon"], buckets=_NOTIFY_BUCKETS, registry=r,
        )  # fmt: skip
        #: Leader roles, the pool, the LISTEN connection (labelled ``daemon``).
        self.per_daemon = DaemonGauges(daemon)
        r.register(self.per_daemon)
        self._children: dict[tuple[Counter | Histogram, str], Any] = {}
        self._values: dict[tuple[Counter, str], Any] = {}
        self.lag_samples: deque[float] = deque(maxlen=100_000)
        self._gauges: Gauges | None = None

    def bind(
        self,
        *,
        clock: Clock,
        counts: QueueCounts,
        budgets: Budgets,
        namespaces: Namespaces,
        policies: PolicyStatuses,
        parked: ParkedJobs,
        router: ClaimRouter,
        store_health: StoreHealth,
    ) -> None:
        """Read gauges from these at scrape time (a later bind replaces them)."""
        sources = GaugeSources(
            clock=clock, counts=counts, budgets=budgets, namespaces=namespaces,
            policies=policies, parked=parked, router=router, store_health=store_health,
        )  # fmt: skip
        if self._gauges is None:
            self._gauges = Gauges(sources, self.label, self.budget_label, self.namespace_label)
            self.registry.register(self._gauges)
        else:
            self._gauges.sources = sources

    def _child(
        self, metric: Counter | Histogram, queue: str, labels: QueueLabels | None = None
    ) -> Any:
        # labels() costs a lock and a tuple build per call; cache the children.
        key = (metric, queue)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels((labels or self.label)(queue))
        return child

    def _count(self, metric: Counter, queue: str) -> Any:
        """``metric``'s per-queue counter to ``inc``: the child's value holder
        itself where the client has one. Its ``inc`` is one call where the
        child's is four (checks of the metric's kind and of the amount's sign,
        which these counts never fail), and jobs pay them several times each."""
        key = (metric, queue)
        value = self._values.get(key)
        if value is None:
            child = self._child(metric, queue)
            value = self._values[key] = getattr(child, "_value", child)
        return value

    def group_claimed(self, queue: str, group: str, n: int) -> None:
        """``n`` claims of ``group`` in a group-aware queue."""
        self._group_claims.labels(self.label(queue), self.group_label(group)).inc(n)

    def budget_debited(self, budget: str, cost: int) -> None:
        """A claim debited ``cost`` tokens from ``budget``."""
        self._child(self.budget_debits, budget, self.budget_label).inc(cost)

    def budget_settled(self, budget: str, actual: float) -> None:
        """A completion settled ``budget``'s debit to ``actual`` tokens."""
        self._child(self.budget_settled_tokens, budget, self.budget_label).inc(actual)

    def budget_paused(self, budget: str) -> None:
        """A pause started or lengthened ``budget``'s pause."""
        self._child(self.budget_pauses, budget, self.budget_label).inc()

    def admission_charged(self, queue: str, n: int) -> None:
        """``n`` claims of ``queue`` were charged to its policy's window."""
        self._count(self._charged, queue).inc(n)

    def admission_refused(self, queue: str, reason: str) -> None:
        """A claim on ``queue`` was refused by its admission policy for ``reason``."""
        self._admission_refusals.labels(self.label(queue), reason).inc()

    def door_decision(self, limit: str, outcome: str) -> None:
        """A door decision on ``limit``: allowed, blocked or would_block (shadow mode)."""
        _decided(self._door, self._door_children, limit, outcome, 1)

    def admission_decision(self, limit: str, outcome: str, n: int = 1) -> None:
        """``n`` jobs decided by a budget, policy or quota ``limit`` (a value of
        :mod:`actors.shadow`): allowed, blocked or would_block (shadowed)."""
        _decided(self._decisions, self._decision_children, limit, outcome, n)

    def quota_refused(self, namespace: str, code: str) -> None:
        """A quota refused an enqueue with ``code`` (queue_full, rate_limited, ...)."""
        self._quota_refusals.labels(self.namespace_label(namespace), code).inc()

    def quota_shed(self, namespace: str, limit: str, n: int) -> None:
        """``n`` jobs were shed by ``limit`` (max_pending or enqueue_rate)."""
        self._shed.labels(self.namespace_label(namespace), limit).inc(n)

    def retention_deleted(self, namespace: str, reason: str, n: int) -> None:
        """The retention leader deleted ``n`` rows of ``namespace`` for ``reason``."""
        self._retention_deleted.labels(self.namespace_label(namespace), reason).inc(n)

    def monthly_level(self, namespace: str, level: int) -> None:
        """``namespace`` reached ``level`` percent of its monthly quota (announced once)."""
        self._monthly_levels.labels(self.namespace_label(namespace), str(level)).inc()

    def periodic_fired(self, name: str, result: str) -> None:
        """Periodic entry ``name`` fired for a slot: ``fired``, ``refused`` or ``duplicate``."""
        self._periodic_fires.labels(self.periodic_label(name), result).inc()

    def enqueued(self, queue: str, state: str, n: int = 1) -> None:
        """``n`` jobs were enqueued (in ``state``: dead when shed)."""
        self._count(self._enqueued, queue).inc(n)
        if state == "dead":
            self._count(self._dead, queue).inc(n)

    def moved(self, queue: str, source: str, target: str, n: int = 1) -> None:
        """``n`` jobs of ``queue`` went from ``source`` to ``target``."""
        if target == "running":
            self._count(self._claimed, queue).inc(n)
        elif target == "completed":
            self._count(self._completed, queue).inc(n)
        elif target == "dead":
            self._count(self._dead, queue).inc(n)

    def failed(self, queue: str) -> None:
        """A worker reported a failure, or a lease lapsed."""
        self._count(self._failed, queue).inc(1)

    def observe_lag(self, seconds: float) -> None:
        """One sample of event-loop lag."""
        self.loop_lag.observe(seconds)
        self.lag_samples.append(seconds)

    def notify_lag(self, seconds: float) -> None:
        """A doorbell notice arrived ``seconds`` after it was published (the
        series appears at the first notice: none on SQLite)."""
        self._notify_lag.labels(self.per_daemon.daemon).observe(seconds)

    def lag_summary(self) -> dict[str, float] | None:
        """p50/p99/max of recent lag samples in ms, when the probe runs."""
        if not self.lag_samples:
            return None
        ordered = sorted(self.lag_samples)
        pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
        return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": ordered[-1] * 1000,
                "samples": len(ordered)}  # fmt: skip

    def claim_wait(self, queue: str, seconds: float) -> None:
        """One claimed job waited ``seconds`` from its ``ready_at``."""
        self._child(self._claim_wait, queue).observe(seconds)

    def claim_waits(self, queue: str, waits: list[float]) -> None:
        """Claimed jobs of ``queue`` waited ``waits`` seconds each from their ``ready_at``.

        One lock per bucket touched instead of two per job: ``observe`` costs
        about 2 µs, and a claim of 100 jobs observes 100 waits.
        """
        child = self._child(self._claim_wait, queue)
        bounds = getattr(child, "_upper_bounds", None)
        buckets = getattr(child, "_buckets", None)
        total = getattr(child, "_sum", None)
        if bounds is None or buckets is None or total is None:
            for seconds in waits:  # a prometheus-client without those internals
                child.observe(seconds)
            return
        if len(waits) < 4:  # a claim of a few jobs (one, most often): two increments each
            for seconds in waits:
                total.inc(seconds)
                buckets[bisect_left(bounds, seconds)].inc(1)  # the first bound >= seconds
            return
        hits = [0] * len(bounds)
        for seconds in waits:
            hits[bisect_left(bounds, seconds)] += 1  # the first bound >= seconds
        total.inc(sum(waits))
        for i, n in enumerate(hits):
            if n:
                buckets[i].inc(n)


def _decided(counter: Counter, children: dict[tuple[str, str], Any], limit: str, outcome: str,
             n: int) -> None:  # fmt: skip
    key = (limit, outcome)
    child = children.get(key)
    if child is None:  # labels() costs a lock and a tuple: once per pair
        child = children[key] = counter.labels(limit, outcome)
    child.inc(n)


__all__ = [
    "OTHER",
    "DaemonGauges",
    "GaugeSources",
    "Gauges",
    "Metrics",
    "ParkedJobs",
    "PolicyStatuses",
    "QueueLabels",
]
