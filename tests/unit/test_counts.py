"""actors/counts.py: in-memory counts per queue and state."""

from __future__ import annotations

from actors.counts import QueueCounts
from actors.lifecycle import STATES

K = ("ns", "q")


def test_add_move_get():
    counts = QueueCounts()
    assert counts.get(K, "pending") == 0
    counts.add(K, "pending", 3)
    counts.add(K, "scheduled")
    counts.move(K, "pending", "running", 2)
    counts.move(K, "scheduled", "pending")
    assert counts.queue(K) == {
        "scheduled": 0,
        "pending": 2,
        "running": 2,
        "completed": 0,
        "dead": 0,
    }


def test_queue_of_an_unknown_key_is_zeros_and_a_copy():
    counts = QueueCounts()
    assert counts.queue(("x", "y")) == dict.fromkeys(STATES, 0)
    counts.add(K, "pending")
    copy = counts.queue(K)
    copy["pending"] = 99
    assert counts.get(K, "pending") == 1
    assert ("x", "y") not in dict(iter(counts))


def test_load_replaces_everything():
    counts = QueueCounts()
    counts.add(("ns", "old"), "pending", 5)
    counts.load([("ns", "q", "pending", 2), ("ns", "q", "dead", 1), ("other", "q", "running", 4)])
    assert counts.get(("ns", "old"), "pending") == 0
    assert counts.namespace("ns") == {"q": {**dict.fromkeys(STATES, 0), "pending": 2, "dead": 1}}
    assert counts.namespace("other")["q"]["running"] == 4
    assert sorted(k for k, _ in counts) == [("ns", "q"), ("other", "q")]


def test_iteration_is_safe_while_counts_change():
    counts = QueueCounts()
    counts.add(("ns", "a"), "pending")
    for _key, _c in counts:
        counts.add(("ns", "b"), "pending")
    assert counts.get(("ns", "b"), "pending") == 1
