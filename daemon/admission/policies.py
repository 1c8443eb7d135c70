"""Queue admission policies in the daemon: the registry, the claim's check and
charge, the reopen timer, and what is said about held-back work.

Each queue with a policy has a :class:`~actors.policy.PolicyState`. A claim
asks :meth:`Policies.rooms` how many jobs each of its queues admits, claims at
most that many, and charges them (:meth:`Policies.claimed`) in the same
transaction: memory at once (undone on rollback), each window's usage row in
the store (keyed by the window's period: a policy may stack several windows).
A queue without a policy costs one dictionary lookup.

A deferred queue rings no doorbell. When it is admitted again (a window
boundary, a freed slot, a raised or removed policy) it rings once, with edge,
so each subscriber hears one doorbell and waiting claims are served. The
reopen timer sleeps to the next boundary of an exhausted window.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from actors import lifecycle as lc
from actors.budget import TokenPool
from actors.clock import Clock
from actors.counts import QueueCounts
from actors.due import Due, DueActor
from actors.errors import Refused
from actors.policy import Policy, PolicyState, Status, parse_policy
from actors.shadow import (
    ALLOWED,
    BLOCKED,
    POLICY_IN_FLIGHT,
    POLICY_LIMITS,
    POLICY_WINDOW,
    WOULD_BLOCK,
    over,
)
from daemon.admission.door import log_decision
from daemon.admission.doorbell import Doorbell
from daemon.admission.groups import Groups
from daemon.store.interface import JobRow, Store, Tx

if TYPE_CHECKING:
    from daemon.metrics import Metrics

log = logging.getLogger("sluicegate.policies")
QueueKey = tuple[str, str]


class Policies:
    """Every queue policy of the daemon."""

    def __init__(
        self, *, clock: Clock, counts: QueueCounts, store: Store, metrics: Metrics,
        running: dict[str, JobRow], doorbell: Doorbell, groups: Groups,
    ) -> None:  # fmt: skip
        self._clock = clock
        self._counts = counts
        self._store = store
        self._metrics = metrics
        #: Running jobs' rows (the transition step's map): leases for hints.
        self._running = running
        self._doorbell = doorbell
        #: The group rings of the policies that count groups.
        self.groups = groups
        self.states: dict[QueueKey, PolicyState] = {}
        #: The queues whose policy is shadowed (``enforce`` false): a claim of their
        #: jobs is counted though they cap nothing (the claim's one test: empty).
        self.shadows: set[QueueKey] = set()
        self.reopener = DueActor(clock, Due(self.earliest, self.reopen_due))
        #: Policy writes per (namespace, token): a token bucket each.
        self.write_limits: dict[tuple[str, str], TokenPool] = {}

    # -- loading and writing ------------------------------------------------------

    def load(self, stored: list[tuple[tuple[Any, ...], dict[str, dict[int, int]]]] | None = None,
             ) -> None:  # fmt: skip
        """Read every stored policy (start-up); a bad one fails its queue closed.

        ``stored``: the rows already read, each with its windows' two latest
        usage rows, key -> {start: used} (daemon.admission.cluster reads them in
        one statement).
        """
        policies, now = self._store.policies, self._clock.now_ms()
        kept, self.states = self.states, {}  # their rings keep their counts
        self.groups.rings.clear()
        ask = stored is None  # else each row comes with its windows' latest usage
        rows = [(row, {}) for row in policies.all_policies()] if ask else stored
        for row, latest in rows:
            namespace, queue, text, created, updated, created_by, updated_by, source = row

            def usage(key: str, start: int, ns: str = namespace, q: str = queue,
                      latest: dict[str, dict[int, int]] = latest) -> int:  # fmt: skip
                if ask:
                    return policies.usage(ns, q, key, start)
                return latest.get(key, {}).get(start, 0)

            state = PolicyState(namespace, queue)
            state.created_at, state.updated_at = created, updated
            state.created_by, state.updated_by, state.source = created_by, updated_by, source
            try:
                state.policy = parse_policy(orjson.loads(text))
                self.groups.attach(self._store, state, kept.get((namespace, queue)))
                state.roll(now, usage)
                for meter in state.meters:
                    meter.ahead = (
                        policies.usage_after(namespace, queue, meter.key, meter.start) if ask
                        else {s: n for s, n in latest.get(meter.key, {}).items()
                              if s > meter.start}
                    )  # fmt: skip
            except (Refused, ValueError) as exc:
                state.broken = exc.message if isinstance(exc, Refused) else str(exc)
                log.error("policy of queue %r/%r cannot be evaluated, failing closed: %s",
                          namespace, queue, state.broken)  # fmt: skip
            self.states[(namespace, queue)] = state
        self.shadows = {key for key, state in self.states.items() if state.shadowed}

    def get(self, namespace: str, queue: str) -> PolicyState | None:
        """The policy state of a queue, or None (the one lookup a plain queue pays)."""
        return self.states.get((namespace, queue))

    def put(self, tx: Tx, namespace: str, queue: str, policy: Policy, actor: str,
            source: str = "api") -> PolicyState:  # fmt: skip
        """Create or replace a queue's policy in ``tx``, audited; in force at once.

        A window kept (the same period, zone, start and weekday, whatever its
        cap or the form) keeps counting; a changed one starts in the window the
        new definition puts now in (its stored usage, usually none).
        """
        key = (namespace, queue)
        old = self.states.get(key)
        before = None if old is None else self.describe_policy(old)
        state = PolicyState(namespace, queue)
        state.policy = policy
        state.created_at = old.created_at if old is not None else tx.now_ms
        state.created_by = old.created_by if old is not None else actor
        state.updated_at, state.updated_by, state.source = tx.now_ms, actor, source
        kept = {m.limit.window: m for m in old.meters} if old is not None else {}
        for meter in state.meters:
            if meter.limit.window in kept:
                meter.carry(kept[meter.limit.window])
        state.in_flight_delta = old.in_flight_delta if old is not None else 0
        state.last_label = old.last_label if old is not None else "admitted"
        self.groups.attach(tx.store, state, old)
        store = tx.store
        state.roll(tx.now_ms, lambda key, start: store.policies.usage(namespace, queue, key, start))
        store.policies.save((namespace, queue, orjson.dumps(policy.to_dict()).decode(),
                             state.created_at, state.updated_at, state.created_by,
                             state.updated_by, source))  # fmt: skip
        store.audit.record(
            at=tx.now_ms, actor=actor, namespace=namespace, target_kind="queue",
            target=queue, action="set_policy", before=before, after=self.describe_policy(state),
        )  # fmt: skip
        self.states[key] = state
        self._note(key)
        tx.undo(lambda: self._restore(key, old))
        tx.after(lambda: self.refresh(key))
        return state

    def clear(self, tx: Tx, namespace: str, queue: str, actor: str) -> None:
        """Remove a queue's policy in ``tx``, audited; the queue is admitted at once."""
        key = (namespace, queue)
        old = self.states.pop(key)
        self.shadows.discard(key)
        self.groups.rings.pop(key, None)
        tx.store.policies.delete(namespace, queue)
        tx.store.audit.record(
            at=tx.now_ms, actor=actor, namespace=namespace, target_kind="queue",
            target=queue, action="clear_policy", before=self.describe_policy(old), after=None,
        )  # fmt: skip
        tx.undo(lambda: self._restore(key, old))
        tx.after(lambda: self._reopened(key, old.last_label))

    def _restore(self, key: QueueKey, old: PolicyState | None) -> None:
        if old is None:
            self.states.pop(key, None)
        else:
            self.states[key] = old
        self._note(key)
        self.groups.restored(key, old)

    def _note(self, key: QueueKey) -> None:
        state = self.states.get(key)
        if state is not None and state.shadowed:
            self.shadows.add(key)
        else:
            self.shadows.discard(key)

    @staticmethod
    def describe_policy(state: PolicyState) -> dict[str, Any] | None:
        """The policy object of the wire (its fields and audit fields); one that
        cannot be evaluated has null limits and an ``error`` (it fails closed)."""
        if state.policy is None and state.broken is None:
            return None
        fields = (
            state.policy.to_dict() if state.policy is not None
            else {"max_in_flight": None, "max_claims_per_window": None, "window": None,
                  "error": state.broken}
        )  # fmt: skip
        return {
            "queue": state.queue, **fields,
            "created_at": state.created_at, "updated_at": state.updated_at,
            "created_by": state.created_by, "updated_by": state.updated_by,
            "source": state.source,
        }  # fmt: skip

    # -- the claim ----------------------------------------------------------------

    def running(self, key: QueueKey) -> int:
        """Committed jobs in flight in a queue (a lapsed, unreaped lease included)."""
        return self._counts.get(key, lc.RUNNING)

    def rooms(self, namespace: str, queues: Iterable[str], now_ms: int) -> dict[str, int]:
        """How many claims each policy queue of ``queues`` admits now (only those
        with a policy appear; 0 when deferred)."""
        out = {}
        for queue in queues:
            state = self.states.get((namespace, queue))
            if state is not None:
                room = state.room(self.running(state.key), now_ms)
                if room is not None:
                    out[queue] = room
        return out

    def claimed(self, tx: Tx, rows: list[JobRow]) -> dict[str, dict[str, Any]]:
        """Charge the claims of ``rows`` (one transaction) to their queues' windows;
        returns each policy queue's headroom after them."""
        per_queue: dict[QueueKey, int] = {}
        for row in rows:
            key = (row.namespace, row.queue)
            if key in self.states:
                per_queue[key] = per_queue.get(key, 0) + 1
        headroom = {}
        for key, n in per_queue.items():
            state = self.states[key]
            state.roll(tx.now_ms)
            held, limit = 0, ""
            if state.shadowed:  # as if enforcing: charge what it would admit
                room, limit = state.would_room(self.running(key), tx.now_ms)
                held = over(room, n)
            tx.undo(state.charge(n, n - held))
            for meter in state.meters:
                if n > held:
                    tx.store.policies.charge(key[0], key[1], meter.key, meter.start, n - held)
                before = meter.prune_before()
                if before is not None:
                    tx.store.policies.prune(key[0], key[1], meter.key, before)
            headroom[key[1]] = state.headroom(self.running(key))
            tx.after(lambda s=state, n=n, h=held, lim=limit: self._settled(s, n, h, lim))
        return headroom

    def refused(self, key: QueueKey) -> None:
        """A claim found the policy queue ``key`` deferred with pending work (metrics)."""
        status = self.status(key)
        if status is not None and status.reason is not None:
            self._metrics.admission_refused(key[1], status.reason)
            limit = POLICY_LIMITS.get(status.reason)
            if limit is not None:
                log_decision(key[0], limit, True, queue=key[1])
                self._metrics.admission_decision(limit, BLOCKED)

    def _settled(self, state: PolicyState, n: int, held: int = 0, limit: str = "") -> None:
        """Claims committed: ``n`` in flight, ``held`` of them let through by a
        shadowed policy (``limit`` would have held them: logged, counted)."""
        state.committed(n)
        metrics = self._metrics
        metrics.admission_charged(state.queue, n - held)
        policy = state.policy
        if policy is not None and n > held:
            if state.meters:
                metrics.admission_decision(POLICY_WINDOW, ALLOWED, n - held)
            if policy.max_in_flight is not None:
                metrics.admission_decision(POLICY_IN_FLIGHT, ALLOWED, n - held)
        if held:
            log_decision(state.namespace, limit, False, queue=state.queue, jobs=held)
            metrics.admission_decision(limit, WOULD_BLOCK, held)
        self.refresh(state.key)

    def left_running(self, tx: Tx, key: QueueKey) -> None:
        """A job of ``key`` left ``running`` in ``tx`` (completion, failure, release,
        a reaped lease): its slot is free for the rest of the transaction."""
        state = self.states.get(key)
        if state is None:
            return
        tx.undo(state.left_running())
        tx.after(lambda: (state.committed(-1), self.refresh(key)))

    # -- status, doorbells, reopening ------------------------------------------------

    def status(self, key: QueueKey, now_ms: int | None = None) -> Status | None:
        """A policy queue's admission status now (None without a policy)."""
        state = self.states.get(key)
        if state is None:
            return None
        now = self._clock.now_ms() if now_ms is None else now_ms
        return state.status(self.running(key), now, lambda: self._lease_hint(key))

    def job_status(self, key: QueueKey, group: str, now_ms: int | None = None) -> Status | None:
        """A pending job's policy status: its queue's, or what holds its group
        back when the queue admits other groups (None without a policy)."""
        status = self.status(key, now_ms)
        state = self.states.get(key)
        if (status is None or status.state != "admitted" or state is None or state.ring is None
                or state.shadowed):  # fmt: skip
            return status
        reason = state.ring.held(group, state.free(self.running(key)))
        if reason is None:
            return status
        return Status("deferred", reason, self._lease_hint(key), False)

    def deferred_now(self, key: QueueKey) -> bool:
        """True when the queue has a policy that admits no claim now."""
        status = self.status(key)
        return status is not None and status.state == "deferred"

    def holds(self, key: QueueKey) -> bool:
        """Whether the queue's policy holds its jobs back now (one lookup without one):
        the doorbell's test."""
        return key in self.states and self.deferred_now(key)

    def lease_hint(self, key: QueueKey) -> int | None:
        """The earliest lease expiry of the queue's running jobs (a hint: in_flight_full)."""
        return self._lease_hint(key)

    def _lease_hint(self, key: QueueKey) -> int | None:
        expiries = [
            row.lease_expires_at for row in self._running.values()
            if row.queue == key[1] and row.namespace == key[0]
        ]  # fmt: skip
        return min(expiries, default=None)

    def refresh(self, key: QueueKey) -> None:
        """After a commit: note the queue's status; ring once if it was reopened."""
        state = self.states.get(key)
        if state is None:
            return
        was = state.last_label
        status = self.status(key)
        assert status is not None
        state.last_label = status.label
        if status.reason == "window_exhausted" and status.next_eligible_at is not None:
            # Kept until a refresh at or after the boundary sees it reopen.
            state.reopen_at = status.next_eligible_at
            self.reopener.note(status.next_eligible_at)
        else:
            state.reopen_at = None
        if was != "admitted" and status.state == "admitted":
            self._ring_reopened(key)

    def _reopened(self, key: QueueKey, was: str) -> None:
        if was != "admitted":
            self._ring_reopened(key)

    def _ring_reopened(self, key: QueueKey) -> None:
        self._doorbell.reopened(key)

    def earliest(self) -> int | None:
        """The next boundary of an exhausted window (the reopen timer's target); it
        stays due until :meth:`reopen_due` has rung for it."""
        due = [s.reopen_at for s in self.states.values() if s.reopen_at is not None]
        return min(due, default=None)

    async def reopen_due(self, _now_ms: int) -> None:
        """A boundary passed: every queue whose new window admits rings once (the
        reopen timer's work)."""
        now = self._clock.now_ms()
        for key, state in list(self.states.items()):
            if state.reopen_at is not None and state.reopen_at <= now:
                self.refresh(key)

    def deferred(self, namespace: str, queues: Iterable[str]) -> list[dict[str, Any]]:
        """``claim_next``'s ``deferred`` entries for policy queues holding pending jobs."""
        out = []
        for queue in queues:
            key = (namespace, queue)
            status = self.status(key)
            if status is None or status.state != "deferred":
                continue
            pending = self._counts.get(key, lc.PENDING)
            if pending > 0:
                out.append({"queue": queue, "pending": pending, **status.to_dict()})
                del out[-1]["state"]
        return out
