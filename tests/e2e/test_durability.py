"""Crash durability: what the daemon acknowledged survives ``kill -9``."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tests.support import RawClient, wait_until

pytestmark = pytest.mark.e2e


def test_acknowledged_enqueues_survive_kill_9(make_daemon):
    daemon = make_daemon(http=False)
    acked: list[str] = []
    stopped: list[BaseException] = []

    def produce() -> None:
        try:
            with RawClient(daemon.socket) as c:
                for i in range(100_000):
                    acked.append(c.ok("enqueue", queue=f"q{i % 3}", type="t")["job"]["id"])
        except (OSError, ValueError, AssertionError) as exc:  # the daemon died mid-stream
            stopped.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    wait_until(lambda: len(acked) >= 300, timeout=30, what="300 acknowledged enqueues")
    daemon.kill()
    producer.join(10)
    assert not producer.is_alive() and stopped, "the producer should have lost its daemon"
    ids = list(acked)

    daemon.start()
    with RawClient(daemon.socket) as c:
        for job_id in ids:
            assert c.ok("get", job_id=job_id)["job"]["status"] == "pending"
        listed: Counter[tuple[str, str]] = Counter()
        after = None
        while True:
            page = c.ok("list", limit=1000, **({"after": after} if after else {}))
            listed.update((j["queue"], j["status"]) for j in page["jobs"])
            if not (after := page["next"]):
                break
        counted = {
            (row["queue"], status): row[status]
            for row in c.ok("status")["queues"]
            for status in ("scheduled", "pending", "running", "completed", "dead")
            if row[status]
        }
        assert counted == dict(listed)
        assert sum(counted.values()) >= len(ids)
