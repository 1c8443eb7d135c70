"""The job timers: scheduled jobs becoming pending, and lapsed leases reaped.

Each sleeps until its next instant (the earliest ``ready_at`` of a scheduled
job, the earliest lease expiry), never polls, and does its work as one write.
A claim catches up first (:meth:`JobTimers.catch_up`), so a job is claimable
exactly at its ``ready_at`` and a lapsed lease can be taken over before the
reaper's task has run. What the moves change in memory is the transition
step's (:mod:`daemon.admission.views`).
"""

from __future__ import annotations

from actors import lifecycle as lc
from actors.clock import Clock
from actors.due import Due
from actors.reaper import DelayTimer, LeaseReaper
from daemon import failpoints
from daemon.store.interface import Committer, Store, Tx
from daemon.store.rows import dumps

#: Later than every lease (a signed 64-bit instant).
FOREVER = 2**63 - 1


class JobTimers:
    """The delay timer and the lease reaper, with the writes they run."""

    def __init__(self, clock: Clock, store: Store, committer: Committer) -> None:
        jobs = store.jobs
        self.reaper = LeaseReaper(
            clock, Due(jobs.earliest_lease_expiry, lambda _now: committer.write(self.reap_lapsed))
        )
        self.delay_timer = DelayTimer(
            clock, Due(jobs.earliest_scheduled, lambda _now: committer.write(self.promote_due))
        )

    def promote_due(self, tx: Tx) -> None:
        """Make every scheduled job whose time has come pending."""
        tx.store.jobs.promote_due(tx.now_ms)

    def reap_lapsed(self, tx: Tx, *, horizon: int | None = None) -> None:
        """Return lapsed leases to pending, or to dead when attempts are spent
        (``horizon``: leases expiring by then count as lapsed; default now)."""
        jobs, now = tx.store.jobs, tx.now_ms
        for row in jobs.lapsed(now if horizon is None else horizon):
            if row.attempts >= row.max_attempts:
                dead = dumps({"at": now, "reason": "attempts_exhausted"})
                jobs.finish(row, event="reap", state=lc.DEAD, now=now, error="lease expired",
                            dead=dead)  # fmt: skip
            else:
                jobs.finish(row, event="reap", state=lc.PENDING, now=now, error="lease expired")

    def due(self, now_ms: int) -> bool:
        """Whether either timer has work due by ``now_ms``."""
        return any(t is not None and t <= now_ms
                   for t in (self.delay_timer.target, self.reaper.target))  # fmt: skip

    def catch_up(self, tx: Tx) -> None:
        """Before a claim: promote and reap whatever the timers are about to.

        Both are indexed no-ops when nothing is due. A share-mode transaction
        (daemon.admission.limit_free) leaves them to the timers' own writes:
        their moves may touch what limits count, in any namespace.
        """
        now = tx.now_ms
        target = self.delay_timer.target
        if target is not None and target <= now and not tx.shared:
            self.promote_due(tx)
        target = self.reaper.target
        if target is not None and target <= now:
            if not tx.shared:
                self.reap_lapsed(tx)
        elif failpoints.ARMED and failpoints.broken("claim_skips_lease_check"):
            self.reap_lapsed(tx, horizon=FOREVER)  # the broken build (tests only)
