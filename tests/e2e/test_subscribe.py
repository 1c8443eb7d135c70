"""Doorbell events: one per "nothing claimable -> claimable" edge of a subscribed queue."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_subscribe_rings_once_per_edge(daemon, connect):
    sub, producer = connect(daemon), connect(daemon)
    assert sub.ok("subscribe", queues=["q", "later"]) | {"id": 0} == {"id": 0, "ok": True}

    def heard() -> list[dict]:
        # Events are queued before the producer's answer is; a round trip on the
        # subscriber's connection therefore delivers every event rung so far.
        sub.ok("status")
        return sub.events

    producer.ok("enqueue", queue="q", type="t")
    assert heard() == [{"event": "doorbell", "queue": "q", "pending": 1}]

    # Still pending: a second job is no new edge. Another queue is not subscribed.
    producer.ok("enqueue", queue="q", type="t")
    producer.ok("enqueue", queue="other", type="t")
    assert heard() == [{"event": "doorbell", "queue": "q", "pending": 1}]

    # Drained, then new work: a new edge.
    assert len(producer.ok("claim_next", queues=["q"], max=10)["jobs"]) == 2
    producer.ok("enqueue", queue="q", type="t")
    assert heard()[1:] == [{"event": "doorbell", "queue": "q", "pending": 1}]

    # A delayed job rings when it becomes claimable, not when it is enqueued.
    producer.ok("enqueue", queue="later", type="t", delay_ms=200)
    assert len(heard()) == 2
    event = sub.read()  # blocks until the delay timer promotes the job
    assert event == {"event": "doorbell", "queue": "later", "pending": 1}
