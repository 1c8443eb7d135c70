"""Doorbells: telling waiting claims that jobs became claimable.

Only claimable work rings: pending jobs, less those parked on a budget, in a
queue whose policy admits claims now (seed 002 REQ-8: no doorbell for work
that cannot be claimed; a queue rings once when its policy reopens it).
"""

from __future__ import annotations

from collections.abc import Callable

from actors import lifecycle as lc
from actors.counts import QueueCounts
from actors.router import ClaimRouter

QueueKey = tuple[str, str]


def _never(_key: QueueKey) -> bool:
    return False


def _none_parked(_key: QueueKey) -> int:
    return 0


class Doorbell:
    """Rings the claim router for queues whose jobs became claimable."""

    def __init__(self, counts: QueueCounts, router: ClaimRouter) -> None:
        self._counts = counts
        self._router = router
        #: Jobs of a queue parked on budgets (the budget gate's count, set at wiring).
        self.parked_in: Callable[[QueueKey], int] = _none_parked
        #: True while a queue's policy admits no claim (the policies', set at wiring).
        self.held: Callable[[QueueKey], bool] = _never
        #: Tells the other daemons sharing the database (PostgreSQL; set at wiring).
        self.remote: Callable[[QueueKey, int], None] | None = None
        #: Tells them a limit's settings changed here (PostgreSQL; set at wiring).
        self.remote_limits: Callable[[], None] | None = None

    def claimable(self, key: QueueKey) -> int:
        """Pending jobs of ``key`` that a claim may take (not parked)."""
        return self._counts.get(key, lc.PENDING) - self.parked_in(key)

    def ring(self, key: QueueKey, n: int) -> None:
        """``n`` jobs of ``key`` became claimable; the counts already include them."""
        if self.remote is not None:
            self.remote(key, n)  # their claims decide with their own admission
        if self.held(key):
            return
        now = self.claimable(key)
        self._router.ring(key, n, pending=now, edge=now == n)

    def reopened(self, key: QueueKey) -> None:
        """``key``'s policy admits claims again: ring once for what waits."""
        self._tell_others(key)
        n = self.claimable(key)
        if n > 0:
            self._router.ring(key, n, pending=n, edge=True)

    def _tell_others(self, key: QueueKey) -> None:
        """Room opened on ``key`` (a slot, a window): other daemons' waiting claims
        look again. Their jobs are not in this daemon's counts, so the ring says
        one, whatever this daemon counts; their own admission decides."""
        if self.remote is not None:
            self.remote(key, 1)

    def wake_namespace(self, namespace: str) -> None:
        """Ring every queue of ``namespace`` that has claimable jobs (a freed slot,
        a raised limit)."""
        for queue in self._counts.queues_of(namespace):
            key = (namespace, queue)
            self._tell_others(key)
            n = self.claimable(key)
            if n > 0:
                self._router.ring(key, n, pending=n, edge=False)

    def limits_changed(self) -> None:
        """A budget, policy, quota or queue setting was written here (after its
        commit): the other daemons read the limit state back now, not at their
        next write or their 10 s refresh, so their reads show it too."""
        if self.remote_limits is not None:
            self.remote_limits()

    @property
    def waiting(self) -> bool:
        """Whether any claim waits (a wake is wasted otherwise)."""
        return bool(self._router.waiting)
