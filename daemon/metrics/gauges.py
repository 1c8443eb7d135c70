"""The gauges: read from the daemon's memory at scrape time, never from the store.

Queue counts by state, each policy queue's status, namespaces' quotas and
usage, budgets' tokens and parked jobs, the claim router's waiters and the
store's health.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

import attrs
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from actors.policy import STATUSES
from daemon.metrics.labels import QueueLabels

if TYPE_CHECKING:
    from actors.budgets import Budgets
    from actors.clock import Clock
    from actors.counts import QueueCounts
    from actors.namespace import Namespaces
    from actors.policy import PolicyState, Status
    from actors.router import ClaimRouter
    from daemon.store.health import StoreHealth

QueueKey = tuple[str, str]


class PolicyStatuses(Protocol):
    """What the gauges read of the queue policies
    (:class:`daemon.admission.policies.Policies`)."""

    @property
    def states(self) -> Mapping[QueueKey, PolicyState]:
        """The policy queues."""

    def status(self, key: QueueKey) -> Status | None:
        """A policy queue's admission status now."""


class ParkedJobs(Protocol):
    """What the gauges read of the budget gate
    (:class:`daemon.admission.budget_gate.BudgetGate`)."""

    @property
    def parked_by_queue(self) -> Mapping[QueueKey, Mapping[str, int]]:
        """Jobs parked per queue and budget."""


@attrs.frozen
class GaugeSources:
    """What the gauges read at scrape time (never the store: in-memory state only)."""

    clock: Clock
    counts: QueueCounts
    budgets: Budgets
    namespaces: Namespaces
    policies: PolicyStatuses
    parked: ParkedJobs
    router: ClaimRouter
    store_health: StoreHealth


class Gauges(Collector):
    """The daemon's gauges, one collector on its registry."""

    def __init__(self, sources: GaugeSources, label: QueueLabels, budget_label: QueueLabels,
                 namespace_label: QueueLabels) -> None:  # fmt: skip
        self.sources = sources
        self._label = label
        self._budget_label = budget_label
        self._namespace_label = namespace_label

    def _policies(self) -> Iterator[GaugeMetricFamily]:
        """Seed 002 REQ-12: every status of every policy queue (zeros included),
        and jobs held back by reason; a queue whose status cannot be computed
        is omitted, never reported as zero."""
        policies = GaugeMetricFamily(
            "sluicegate_admission_policies", "Policy queues by admission status.",
            labels=["queue", "status"],
        )  # fmt: skip
        deferred = GaugeMetricFamily(
            "sluicegate_admission_deferred_jobs", "Pending jobs held back by admission.",
            labels=["queue", "reason"],
        )  # fmt: skip
        used = GaugeMetricFamily(
            "sluicegate_admission_window_used",
            "Claims charged to each window of a policy queue (period: the window's).",
            labels=["queue", "period"],
        )
        caps = GaugeMetricFamily(
            "sluicegate_admission_window_max", "Each window's max_claims, per policy queue.",
            labels=["queue", "period"],
        )  # fmt: skip
        statuses: dict[tuple[str, str], int] = {}
        held: dict[tuple[str, str], int] = {}
        windows: dict[tuple[str, str], tuple[int, int]] = {}
        src = self.sources
        for key in list(src.policies.states):
            try:
                status = src.policies.status(key)
            except Exception:
                continue
            if status is None:
                continue
            label = self._label(key[1])
            for name in STATUSES:
                statuses[(label, name)] = statuses.get((label, name), 0) + (status.label == name)
            if status.reason is not None:
                slot = (label, status.reason)
                held[slot] = held.get(slot, 0) + src.counts.get(key, "pending")
            for meter in src.policies.states[key].meters:  # rolled by status()
                n, cap = windows.get((label, meter.key), (0, 0))
                windows[(label, meter.key)] = (n + meter.used, cap + meter.limit.max_claims)
        now = src.clock.now_ms()
        for (ns, queue), per_budget in src.parked.parked_by_queue.items():
            for key, n in per_budget.items():
                budget = src.budgets.get((ns, key))
                paused = budget is not None and budget.paused(now)
                slot = (self._label(queue), "budget_paused" if paused else "budget_exhausted")
                held[slot] = held.get(slot, 0) + n
        for (label, name), n in sorted(statuses.items()):
            policies.add_metric([label, name], n)
        for (label, reason), n in sorted(held.items()):
            deferred.add_metric([label, reason], n)
        for (label, period), (n, cap) in sorted(windows.items()):
            used.add_metric([label, period], n)
            caps.add_metric([label, period], cap)
        yield policies
        yield deferred
        yield used
        yield caps

    def _namespaces(self) -> Iterator[GaugeMetricFamily]:
        """Pending and running against their caps, for namespaces with a quota."""
        names = {
            "pending": "Scheduled and pending jobs of a namespace (what max_pending counts).",
            "running": "Running jobs of a namespace.",
            "max_pending": "The namespace's max_pending.",
            "max_running": "The namespace's max_running.",
            "quota_unavailable": "1 while the namespace's quota cannot be read (fail closed).",
            "retained_bytes": "Bytes of the namespace's rows at the last retention tick "
            "(measured where max_retained_bytes is set).",
            "max_retained_bytes": "The namespace's max_retained_bytes.",
            "storage_blocked": "1 while max_retained_bytes blocks enqueues.",
            "monthly_jobs": "Jobs enqueued this UTC month, as of the last roll-up tick.",
            "monthly_jobs_quota": "The namespace's monthly_jobs_quota.",
            "monthly_blocked": "1 while monthly_jobs_quota blocks enqueues.",
        }
        families = {
            k: GaugeMetricFamily(f"sluicegate_namespace_{k}", text, labels=["namespace"])
            for k, text in names.items()
        }
        counts = self.sources.counts
        for actor in self.sources.namespaces.known():
            quota, ns = actor.quota, actor.namespace
            if quota is None and actor.broken is None:
                continue
            label = self._namespace_label(ns)
            families["pending"].add_metric(
                [label], counts.total(ns, "scheduled") + counts.total(ns, "pending")
            )
            families["running"].add_metric([label], counts.total(ns, "running"))
            families["quota_unavailable"].add_metric([label], int(actor.broken is not None))
            for cap in ("max_pending", "max_running", "max_retained_bytes", "monthly_jobs_quota"):
                value = getattr(quota, cap, None)
                if value is not None:
                    families[cap].add_metric([label], value)
            if quota is None:
                continue
            if quota.max_retained_bytes is not None:
                if actor.storage.measured is not None:
                    families["retained_bytes"].add_metric([label], actor.storage.measured)
                families["storage_blocked"].add_metric([label], int(actor.storage.held))
            if quota.monthly_jobs_quota is not None:
                now = self.sources.clock.now_ms()
                monthly = actor.monthly
                families["monthly_jobs"].add_metric([label], monthly.current(now) or 0)
                families["monthly_blocked"].add_metric(
                    [label], int(monthly.exhausted(quota.monthly_jobs_quota, now))
                )
        yield from families.values()

    def _budgets(self) -> Iterator[GaugeMetricFamily]:
        now = self.sources.clock.now_ms()
        families = {
            "available": GaugeMetricFamily(
                "sluicegate_budget_available", "Tokens a budget has now.", labels=["budget"]
            ),
            "in_flight": GaugeMetricFamily(
                "sluicegate_budget_in_flight", "Cost held by running jobs.", labels=["budget"]
            ),
            "parked": GaugeMetricFamily(
                "sluicegate_budget_parked_jobs", "Jobs parked on a budget.", labels=["budget"]
            ),
            "paused": GaugeMetricFamily(
                "sluicegate_budget_paused",
                "Budgets of this key paused now (budget_pause), one per namespace.",
                labels=["budget"],
            ),
        }
        folded: dict[tuple[str, str], float] = {}
        for (_ns, key), budget in sorted(self.sources.budgets.items()):
            label = self._budget_label(key)
            for name, value in (
                ("available", budget.pool.available(now)),
                ("in_flight", budget.pool.in_flight),
                ("parked", budget.parked),
                ("paused", int(budget.paused(now))),
            ):
                folded[(name, label)] = folded.get((name, label), 0) + value
        for (name, label), value in folded.items():
            families[name].add_metric([label], value)
        yield from families.values()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "sluicegate_jobs", "Jobs by queue and status.", labels=["queue", "status"]
        )
        folded: dict[tuple[str, str], int] = {}
        for (_ns, queue), counts in self.sources.counts:
            label = self._label(queue)
            for status, n in counts.items():
                folded[(label, status)] = folded.get((label, status), 0) + n
        for (label, status), n in sorted(folded.items()):
            jobs.add_metric([label, status], n)
        yield jobs
        yield from self._budgets()
        yield from self._namespaces()
        yield from self._policies()
        stats = self.sources.router.statistics()
        waiting = GaugeMetricFamily("sluicegate_waiting_claims", "Claims waiting for work.")
        waiting.add_metric([], stats.waiters)
        yield waiting
        yield from self._store()

    def _store(self) -> Iterator[GaugeMetricFamily]:
        """The store's health: whether writes fail, and the WAL file's size."""
        health = self.sources.store_health.statistics()
        failing = GaugeMetricFamily(
            "sluicegate_store_failing",
            "1 while the store cannot write (disk full, I/O error): writes answer unavailable.",
        )
        failing.add_metric([], 0 if health.failing is None else 1)
        yield failing
        if health.wal_bytes is not None:  # measured by the checkpointer
            wal = GaugeMetricFamily(
                "sluicegate_wal_bytes",
                "Size of the SQLite -wal file at the last checkpoint round "
                "(daemon.wal_max_bytes is the threshold).",
            )
            wal.add_metric([], health.wal_bytes)
            yield wal
