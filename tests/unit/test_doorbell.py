"""daemon/admission/doorbell.py: rings for this daemon's waiting claims, and the
notices other daemons sharing PostgreSQL get (``remote``)."""

from __future__ import annotations

from actors import lifecycle as lc
from actors.counts import QueueCounts
from actors.router import ClaimRouter
from daemon.admission.doorbell import Doorbell

KEY = ("n", "q")


def bell_with_notices() -> tuple[Doorbell, QueueCounts, list[tuple[tuple[str, str], int]]]:
    counts = QueueCounts()
    bell = Doorbell(counts, ClaimRouter())
    told: list[tuple[tuple[str, str], int]] = []
    bell.remote = lambda key, n: told.append((key, n))
    return bell, counts, told


def test_a_reopened_queue_tells_the_other_daemons_even_with_nothing_counted_here():
    """This daemon may count no pending job of the queue (another enqueued them):
    the others still hear of the room, and their claims decide."""
    bell, counts, told = bell_with_notices()
    bell.reopened(KEY)
    assert told == [(KEY, 1)]
    counts.add(KEY, lc.PENDING, 3)
    bell.reopened(KEY)
    assert told == [(KEY, 1), (KEY, 1)]


def test_a_freed_namespace_slot_tells_the_other_daemons_of_each_known_queue():
    bell, counts, told = bell_with_notices()
    counts.add(KEY, lc.RUNNING, 1)
    counts.add(("n", "other"), lc.PENDING, 2)
    bell.wake_namespace("n")
    assert sorted(told) == [(("n", "other"), 1), (KEY, 1)]


def test_alone_nothing_is_published():
    bell = Doorbell(QueueCounts(), ClaimRouter())
    bell.reopened(KEY)  # no remote: one daemon, nothing to tell (and nothing raised)
    bell.wake_namespace("n")
