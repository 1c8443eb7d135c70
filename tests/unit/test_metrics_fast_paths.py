"""The metrics' fast paths count exactly what prometheus-client's own methods do.

:class:`daemon.metrics.Metrics` increments per-queue counters through the
child's value holder and fills the claim-wait histogram's buckets itself (both
cost a job several Python calls less). Each case here runs the same events
through those paths and through the plain ``inc``/``observe`` of a registry
built the same way, and compares the exposition text.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from daemon.metrics import _WAIT_BUCKETS, Metrics


def _lines(registry: CollectorRegistry, prefix: str) -> list[str]:
    text = generate_latest(registry).decode()
    return sorted(
        line for line in text.splitlines() if line.startswith(prefix) and "_created" not in line
    )


@pytest.mark.parametrize(
    "claims",
    [
        [[0.0]],
        [[0.003], [2.5], [0.0004]],
        [[0.001, 7.0, 0.02]],  # a claim of a few jobs
        [[0.2] * 5 + [60.0] * 3],  # a claim of many
        [[1e9]],  # beyond the last finite bound: +Inf only
    ],
)
def test_claim_waits_fill_the_histogram_as_observe_does(claims: list[list[float]]) -> None:
    metrics = Metrics()
    plain = CollectorRegistry()
    histogram = Histogram(
        "sluicegate_claim_wait_seconds", "x", ["queue"], buckets=_WAIT_BUCKETS, registry=plain
    )
    for waits in claims:
        metrics.claim_waits("q", waits)
        for seconds in waits:
            histogram.labels("q").observe(seconds)
    prefix = "sluicegate_claim_wait_seconds"
    assert _lines(metrics.registry, prefix) == _lines(plain, prefix)


def test_queue_counters_count_as_inc_does() -> None:
    metrics = Metrics()
    plain = CollectorRegistry()
    names = {
        "enqueued": "sluicegate_jobs_enqueued",
        "claimed": "sluicegate_jobs_claimed",
        "completed": "sluicegate_jobs_completed",
        "failed": "sluicegate_jobs_failed",
        "dead": "sluicegate_jobs_dead",
        "charged": "sluicegate_admission_charged",
    }
    counters = {k: Counter(v, "x", ["queue"], registry=plain) for k, v in names.items()}
    metrics.enqueued("a", "pending", 3)
    counters["enqueued"].labels("a").inc(3)
    metrics.enqueued("b", "dead", 2)  # shed: enqueued and dead
    counters["enqueued"].labels("b").inc(2)
    counters["dead"].labels("b").inc(2)
    metrics.moved("a", "pending", "running", 2)
    counters["claimed"].labels("a").inc(2)
    metrics.moved("a", "running", "completed")
    counters["completed"].labels("a").inc()
    metrics.moved("a", "running", "dead")
    counters["dead"].labels("a").inc()
    metrics.moved("a", "running", "pending")  # a retry counts nothing here
    metrics.failed("a")
    metrics.failed("a")
    counters["failed"].labels("a").inc(2)
    metrics.admission_charged("a", 4)
    counters["charged"].labels("a").inc(4)
    for name in names.values():
        assert _lines(metrics.registry, name + "_total") == _lines(plain, name + "_total")
