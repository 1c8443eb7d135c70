"""The transition step: the one place a job's move updates the daemon's memory.

The store's jobs journal (:mod:`daemon.store.journal`) reports every move the
moment its statement ran: new rows (:meth:`Views.inserted`), claims
(:meth:`Views.claimed`), promotions (:meth:`Views.promoted`), heartbeats
(:meth:`Views.extended`), and completions, failures, releases, reaps, folds
and replays (:meth:`Views.left`, with the event and the state left). The step
turns each into every in-memory consequence, so no verb calls a hook and
none can forget one:

- inside the transaction, undone if it rolls back (what later writes of the
  same group must see): a budget's bound and in-flight costs, a policy
  queue's freed slot, a group-aware queue's jobs pending and in flight per
  group (daemon.admission.groups), the namespace's usage meter;
- after the COMMIT (``tx.after``): the per-queue counts, metrics, the board's
  history, the running-jobs map, the lease and delay timers, and doorbells
  (a freed ``max_running`` slot wakes the namespace's queues).

What admission *decides* (a budget debit, a quota's or a policy's claim
charge, a parked job) is charged by the decision itself, in
:mod:`daemon.admission.claims`; this step accounts for what the rows did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from actors import lifecycle as lc
from actors.counts import QueueCounts
from actors.history import History
from actors.namespace import Namespaces
from actors.reaper import DelayTimer, LeaseReaper
from daemon.admission.budget_gate import BudgetGate
from daemon.admission.doorbell import Doorbell
from daemon.admission.policies import Policies
from daemon.admission.usage import Meter
from daemon.store.interface import JobRow, Tx

if TYPE_CHECKING:
    from daemon.metrics import Metrics

QueueKey = tuple[str, str]
#: Running jobs' rows are remembered up to this many, and payloads up to this size.
RUNNING_CACHE_MAX = 100_000
RUNNING_CACHE_PAYLOAD = 8192
_FAILED = frozenset(("fail", "reap"))


class Views:
    """Keeps every in-memory view equal to the store, one transition at a time."""

    def __init__(
        self, *, counts: QueueCounts, metrics: Metrics, history: History,
        running: dict[str, JobRow], reaper: LeaseReaper, delay_timer: DelayTimer,
        doorbell: Doorbell, budget_gate: BudgetGate, policies: Policies,
        namespaces: Namespaces, meter: Meter,
    ) -> None:  # fmt: skip
        self.counts = counts
        self.metrics = metrics
        self.history = history
        #: Running jobs' rows by id, so lease checks need no SELECT. Entries
        #: change only after commits; every write using one is guarded on the
        #: lease in the store, so a stale entry is harmless. Bounded: jobs with
        #: big payloads, or past the cap, are simply looked up in the store.
        self.running = running
        self.reaper = reaper
        self.delay_timer = delay_timer
        self.doorbell = doorbell
        self.budget_gate = budget_gate
        self.policies = policies
        self.namespaces = namespaces
        self.meter = meter

    # -- the kinds of move -----------------------------------------------------

    def inserted(self, tx: Tx, rows: Sequence[JobRow]) -> None:
        """New rows, in their arrival states (shed ones dead at once)."""
        per_key: dict[tuple[QueueKey, str], int] = {}
        ready: dict[QueueKey, int] = {}
        live: dict[str, int] = {}
        earliest: int | None = None
        for row in rows:
            key = (row.namespace, row.queue)
            state = row.state
            slot = (key, state)
            per_key[slot] = per_key.get(slot, 0) + 1
            if state != lc.DEAD:  # shed rows were never accepted: not usage
                live[key[0]] = live.get(key[0], 0) + 1
            if state == lc.PENDING and row.parked_on is None:
                ready[key] = ready.get(key, 0) + 1
            elif row.parked_on is not None:
                self.budget_gate.noted_new(tx, row)
            elif state == lc.SCHEDULED and (earliest is None or row.ready_at < earliest):
                earliest = row.ready_at
        self.meter.note(tx, live)
        if self.policies.groups.rings:
            self.policies.groups.moved(tx, None, rows)

        def effect() -> None:
            for (key, state), n in per_key.items():
                self.counts.add(key, state, n)
                self.metrics.enqueued(key[1], state, n)
            for key, n in ready.items():
                self.doorbell.ring(key, n)
            if earliest is not None:
                self.delay_timer.note(earliest)

        tx.after(effect)

    def claimed(self, tx: Tx, rows: Sequence[JobRow]) -> None:
        """Pending jobs became running under a lease."""
        now = tx.now_ms
        earliest = min(r.lease_expires_at for r in rows)  # type: ignore[type-var]
        if self.policies.groups.rings:
            self.policies.groups.moved(tx, lc.PENDING, rows)

        def effect() -> None:
            waits: dict[QueueKey, list[float]] = {}
            self.remember_running(rows)
            self.history.durations.claimed([row.id for row in rows], now)
            last: QueueKey | None = None
            add = None
            for row in rows:  # a claim's rows are mostly of one queue
                key = (row.namespace, row.queue)
                if key != last:
                    last, add = key, waits.setdefault(key, []).append
                waited = now - row.ready_at
                add(waited / 1000 if waited > 0 else 0.0)  # type: ignore[misc]
            for key, seconds in waits.items():  # counted once per queue, not per job
                self.counts.move(key, lc.PENDING, lc.RUNNING, len(seconds))
                self.metrics.moved(key[1], lc.PENDING, lc.RUNNING, len(seconds))
                self.metrics.claim_waits(key[1], seconds)
                self.history.claimed(key, len(seconds), now)
            self.reaper.note(earliest)

        tx.after(effect)

    def promoted(self, tx: Tx, rows: Sequence[JobRow]) -> None:
        """Scheduled jobs whose time came became pending."""
        per_queue: dict[QueueKey, int] = {}
        for row in rows:
            key = (row.namespace, row.queue)
            per_queue[key] = per_queue.get(key, 0) + 1
        self.budget_gate.promoted(tx, rows)
        if self.policies.groups.rings:
            self.policies.groups.moved(tx, lc.SCHEDULED, rows)

        def effect() -> None:
            for key, n in per_queue.items():
                self.counts.move(key, lc.SCHEDULED, lc.PENDING, n)
                self.metrics.moved(key[1], lc.SCHEDULED, lc.PENDING, n)
                self.doorbell.ring(key, n)

        tx.after(effect)

    def left(self, tx: Tx, event: str, source: str, rows: Sequence[JobRow]) -> None:
        """Any other move: out of ``running`` (complete, fail, release, reap),
        or a waiting job folded, or a dead letter replayed."""
        per_key: dict[tuple[QueueKey, str], int] = {}
        earliest: int | None = None
        gate = self.budget_gate
        left_running = source == lc.RUNNING
        ids: list[tuple[str, QueueKey]] = []
        # One pass, each field read once (a complete_many's rows go through here).
        for row in rows:
            if row.budgets is not None:
                gate.moved(tx, source, row)
            key = (row.namespace, row.queue)
            state = row.state
            slot = (key, state)
            per_key[slot] = per_key.get(slot, 0) + 1
            if state == lc.SCHEDULED and (earliest is None or row.ready_at < earliest):
                earliest = row.ready_at
            if left_running:
                ids.append((row.id, key))
        if self.policies.groups.rings:
            self.policies.groups.moved(tx, source, rows)
        failed = [row.queue for row in rows] if event in _FAILED else ()
        now, completed = tx.now_ms, event == "complete"

        def effect() -> None:
            running = self.running
            for job_id, _key in ids:
                running.pop(job_id, None)
            if ids:
                self.history.durations.left(ids, now, completed)
            for (key, target), n in per_key.items():
                self.counts.move(key, source, target, n)
                self.metrics.moved(key[1], source, target, n)
                if target == lc.PENDING:
                    self.doorbell.ring(key, n)
            if earliest is not None:
                self.delay_timer.note(earliest)
            if left_running and self.doorbell.waiting:
                for namespace in {key[0] for key, _t in per_key}:
                    quota = self.namespaces.get(namespace).quota
                    if quota is not None and quota.max_running is not None:
                        self.doorbell.wake_namespace(namespace)  # freed slots
            for queue in failed:
                self.metrics.failed(queue)

        tx.after(effect)
        if left_running and self.policies.states:
            for row in rows:  # after the counts' effect: the reopen check reads them
                self.policies.left_running(tx, (row.namespace, row.queue))

    # -- the running-jobs map ----------------------------------------------------

    def remember_running(self, rows: Sequence[JobRow]) -> None:
        """Keep running jobs' rows in :attr:`running` (within the bounds)."""
        running = self.running
        for row in rows:
            if len(running) < RUNNING_CACHE_MAX and len(row.payload) <= RUNNING_CACHE_PAYLOAD:
                running[row.id] = row

    def extended(self, tx: Tx, rows: Sequence[JobRow]) -> None:
        """A heartbeat moved a running job's lease expiry."""
        for row in rows:
            tx.after(lambda row=row: self._extended(row))

    def _extended(self, row: JobRow) -> None:
        if row.id in self.running:
            self.running[row.id] = row
        self.reaper.note(row.lease_expires_at)  # type: ignore[arg-type]
