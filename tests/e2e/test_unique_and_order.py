"""Unique keys, debounce folding, and the order in which claims hand jobs out."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def _ids(client, **args) -> list[str]:
    return [j["id"] for j in client.ok("list", **args)["jobs"]]


def test_unique_key_duplicate_writes_nothing_until_the_job_finishes(daemon, connect):
    c = connect(daemon)
    first = c.ok("enqueue", queue="q", type="t", unique_key="k", payload={"v": 1})
    assert first["duplicate"] is False
    job_id = first["job"]["id"]

    dup = c.ok("enqueue", queue="q", type="t", unique_key="k", payload={"v": 2})
    assert dup["duplicate"] is True and dup["folded"] is False
    assert dup["job"]["id"] == job_id and dup["job"]["payload"] == {"v": 1}
    assert dup["job"]["updated_at"] == first["job"]["updated_at"]
    assert _ids(c) == [job_id]
    assert c.ok("status")["queues"][0]["pending"] == 1

    # The same key in another queue is another job.
    other = c.ok("enqueue", queue="q2", type="t", unique_key="k")
    assert other["duplicate"] is False and other["job"]["id"] != job_id

    with daemon.http() as http:
        r = http.post("/jobs", json={"queue": "q", "type": "t", "unique_key": "k"})
        assert r.status_code == 200 and r.json()["duplicate"] is True and r.json()["id"] == job_id

    # A running job still holds its key.
    lease = c.ok("claim", job_id=job_id)["job"]["lease"]
    assert c.ok("enqueue", queue="q", type="t", unique_key="k")["duplicate"] is True
    assert _ids(c, queue="q") == [job_id]

    # Once it completes the key is free again.
    c.ok("complete", job_id=job_id, lease=lease)
    fresh = c.ok("enqueue", queue="q", type="t", unique_key="k")
    assert fresh["duplicate"] is False and fresh["job"]["id"] != job_id
    assert _ids(c, queue="q") == [job_id, fresh["job"]["id"]]


def test_debounce_folds_a_waiting_duplicate(daemon, connect):
    c = connect(daemon)
    first = c.ok("enqueue", queue="q", type="t", unique_key="k", payload={"v": 1})["job"]
    assert first["status"] == "pending"

    folded = c.ok(
        "enqueue", queue="q", type="t", unique_key="k", payload={"v": 2}, debounce_ms=60_000
    )
    job = folded["job"]
    assert folded["folded"] is True and folded["duplicate"] is False
    assert job["id"] == first["id"] and job["payload"] == {"v": 2}
    assert job["ready_at"] == job["updated_at"] + 60_000 > first["ready_at"]
    assert job["status"] == "scheduled"
    assert c.ok("claim_next", queues=["q"])["empty"] is True
    assert _ids(c) == [first["id"]]
    (row,) = c.ok("status")["queues"]
    assert (row["pending"], row["scheduled"]) == (0, 1)

    with daemon.http() as http:
        r = http.post(
            "/jobs",
            json={"queue": "q", "type": "t", "unique_key": "k", "payload": {"v": 3},
                  "debounce_ms": 200},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["folded"] is True and r.json()["id"] == first["id"]
        assert r.json()["ready_at"] == r.json()["updated_at"] + 200

    # The last fold wins, and the job runs once its (re-set) ready_at comes.
    got = c.ok("claim_next", queues=["q"], wait_ms=5000)["jobs"][0]["job"]
    assert got["id"] == first["id"] and got["payload"] == {"v": 3} and got["attempts"] == 1
    assert _ids(c) == [first["id"]]


def test_claims_follow_priority_then_ready_at_then_id(daemon, connect):
    c = connect(daemon)
    base = c.ok("status")["daemon"]["started_at"] - 10_000  # instants in the past
    # (name, queue, priority, ready_at): enqueued in this (scrambled) order.
    specs = [
        ("late-low", "q1", 32768, base),
        ("p10-r300", "q2", 10, base + 300),
        ("p10-r100-a", "q1", 10, base + 100),
        ("p5", "q2", 5, base + 900),
        ("p10-r100-b", "q2", 10, base + 100),
        ("p10-r200", "q1", 10, base + 200),
        ("p0", "q1", 0, base + 999),
    ]
    expected = ["p0", "p5", "p10-r100-a", "p10-r100-b", "p10-r200", "p10-r300", "late-low"]

    def enqueue_all(suffix: str) -> dict[str, str]:
        names = {}
        for label, queue, priority, ready_at in specs:
            job = c.ok(
                "enqueue", queue=queue + suffix, type="t", priority=priority, ready_at=ready_at
            )["job"]
            assert job["status"] == "pending"
            names[job["id"]] = label
        return names

    # One at a time across two queues.
    names = enqueue_all("")
    order = []
    while not (got := c.ok("claim_next", queues=["q1", "q2"]))["empty"]:
        order.extend(names[j["job"]["id"]] for j in got["jobs"])
    assert order == expected

    # And within one claim of many.
    names = enqueue_all("b")
    got = c.ok("claim_next", queues=["q2b", "q1b"], max=100)["jobs"]
    assert [names[j["job"]["id"]] for j in got] == expected
