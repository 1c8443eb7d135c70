"""The namespace actor: one namespace's quota document and what enforces it.

It holds the namespace's quota (or the fact that it cannot be read: fail
closed), the ``enqueue_rate`` token bucket, and the jobs its admission
decisions have added inside a transaction that has not committed yet, so two
calls in one group transaction cannot both take the last room.

Decisions are synchronous methods: the check and the change it guards happen
with no ``await`` between them. Counts come from the caller (the daemon's
committed counts); every change made here returns its inverse, which the
caller runs if its transaction rolls back.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs

from actors.bucket import TokenBucket
from actors.budget import TokenPool
from actors.errors import Refused
from actors.quota import Bucket, Quota
from actors.shadow import QUOTA_PENDING, QUOTA_RATE
from actors.usage import MonthlyUse, StorageBlock

Undo = Callable[[], None]


@attrs.frozen
class Admitted:
    """The outcome of enqueue admission for one call's jobs of a namespace."""

    #: How many of the call's jobs are written live (the first ones).
    live: int
    #: Why the others are shed (``drop``): ``"max_pending"`` or ``"enqueue_rate"``.
    shed_reason: str | None = None
    #: Each limit evaluated: (limit label, jobs it admits, jobs it holds or, when
    #: the document is shadowed, would hold), in evaluation order.
    decisions: tuple[tuple[str, int, int], ...] = ()


def retry_after_s(wait_ms: int) -> int:
    """Seconds to wait, rounded up and clamped to 1-60 (PROTOCOL.md)."""
    return max(1, min(60, math.ceil(wait_ms / 1000)))


class NamespaceActor:
    """One namespace's quota and its enqueue-rate bucket."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.quota: Quota | None = None
        #: Why the stored document cannot be used (fail closed), else None.
        self.broken: str | None = None
        self.rate: TokenPool | None = None
        #: The door's buckets (request_rate, message_rate) and the settings
        #: they were made with (an update never adds tokens).
        self.buckets: dict[str, TokenBucket] = {}
        self.bucket_specs: dict[str, tuple[Bucket, float]] = {}
        #: Waiting ``claim_next`` calls holding a slot (``max_waiting_claims``).
        self.waiting = 0
        #: The storage and monthly blocks, from the last measurements.
        self.storage = StorageBlock()
        self.monthly = MonthlyUse()
        #: Jobs admitted or claimed by transactions not yet committed.
        self.pending_extra = 0
        self.running_extra = 0

    # -- the document -------------------------------------------------------------

    def set_quota(self, quota: Quota | None, now_ms: int) -> None:
        """Take a (re)loaded document. The rate bucket keeps its tokens (a raised
        rate hands out none for free); a new bucket starts full."""
        self.broken = None
        self.quota = quota
        # A changed cap applies to the last measurement at once (hysteresis kept).
        if quota is None:
            self.storage.measure(None, None, None)
        else:
            self.storage.measure(
                self.storage.measured, quota.max_retained_bytes, quota.retained_release_band
            )
        rate = quota.enqueue_rate if quota is not None else None
        if rate is None:
            self.rate = None
        elif self.rate is None:
            self.rate = TokenPool(rate.bucket(), now_ms)
        elif self.rate.spec != rate.bucket():
            self.rate.update(rate.bucket(), now_ms)

    def set_broken(self, reason: str) -> None:
        """The stored document cannot be read or decoded: fail closed."""
        self.broken = reason
        self.quota = None
        self.rate = None

    def unavailable(self) -> Refused:
        """``quota_unavailable``: this namespace stops, no other."""
        return Refused(
            "quota_unavailable",
            f"the quota of namespace '{self.namespace}' cannot be read: {self.broken}",
            limit="quota",
        )

    # -- enqueue ------------------------------------------------------------------

    def admit(self, n: int, pending: int, queue: str, now_ms: int) -> tuple[Admitted, Undo]:
        """Admit ``n`` new jobs against ``pending`` (scheduled and pending jobs now).

        Depth first, so a call refused for depth spends no rate tokens; then
        rate. ``reject`` refuses the whole call (nothing spent); ``drop`` keeps
        what fits and sheds the rest. A shadowed document (``enforce = false``)
        admits all ``n`` and says in :attr:`Admitted.decisions` how many each
        limit would have held; its rate bucket pays only for the jobs it would
        have admitted (a denial never debits). Returns the outcome and its undo.
        """
        if self.broken is not None:
            raise self.unavailable()
        quota = self.quota
        if quota is None or n == 0:
            return Admitted(n), _nothing
        enforce = quota.enforce
        pending += self.pending_extra
        live, reason = n, None
        decisions = []
        fit = n  # what max_pending admits; the rate decides on those
        cap = quota.max_pending
        if cap is not None:
            if pending + n > cap:
                if quota.on_excess == "reject" and enforce:
                    raise _queue_full(queue, pending, n, cap)
                fit = 0 if quota.on_excess == "reject" else max(0, cap - pending)
                if enforce:
                    live, reason = fit, "max_pending"
            decisions.append((QUOTA_PENDING, fit, n - fit))
        undo_rate = _nothing
        if self.rate is not None and fit > 0:
            affordable = fit if self.rate.can_debit(fit, now_ms) else 0
            if affordable < fit and quota.on_excess == "drop":
                affordable = min(fit, int(self.rate.available(now_ms)))
            if affordable < fit and quota.on_excess == "reject" and enforce:
                raise self._rate_limited(fit, now_ms)
            if affordable < fit and enforce:
                live, reason = affordable, "enqueue_rate"
            decisions.append((QUOTA_RATE, affordable, fit - affordable))
            if affordable:
                raw = self.rate.raw()
                self.rate.debit(affordable, now_ms)
                rate = self.rate
                undo_rate = lambda: rate.restore(raw)  # noqa: E731
        self.pending_extra += live

        def undo() -> None:
            self.pending_extra -= live
            undo_rate()

        return Admitted(live, reason, tuple(decisions)), undo

    def _rate_limited(self, n: int, now_ms: int) -> Refused:
        assert self.rate is not None and self.quota is not None
        at = self.rate.eligible_at(n, now_ms)
        # A call bigger than the bucket can never pass whole: say a minute.
        wait = 60_000 if at is None else at - now_ms
        return Refused(
            "rate_limited",
            f"rate limit exceeded for: namespace '{self.namespace}' "
            f"enqueue_rate {self.quota.enqueue_rate}",
            reason="RATE_LIMITED", limit="enqueue_rate", retry_after=retry_after_s(wait),
        )  # fmt: skip

    def committed_pending(self, n: int) -> None:
        """``n`` admitted jobs committed: the daemon's counts hold them now."""
        self.pending_extra -= n

    # -- dispatch ------------------------------------------------------------------

    def running_room(self, running: int, *, shadow: bool = False) -> int | None:
        """How many more jobs may start now (None: no limit, or a shadowed one;
        ``shadow``: the room a shadowed ``max_running`` would leave)."""
        quota = self.quota
        if quota is None or quota.max_running is None or quota.enforce == shadow:
            return None
        return max(0, quota.max_running - running - self.running_extra)

    def claiming(self, n: int) -> Undo:
        """``n`` jobs are being claimed by an uncommitted transaction."""
        self.running_extra += n

        def undo() -> None:
            self.running_extra -= n

        return undo

    def committed_running(self, n: int) -> None:
        """``n`` claims committed: the daemon's counts hold them now."""
        self.running_extra -= n


def _nothing() -> None:
    return None


def _queue_full(queue: str, pending: int, n: int, cap: int) -> Refused:
    if pending >= cap:
        message = f"queue '{queue}' is full: {pending} pending >= max_pending {cap}"
    else:
        message = f"queue '{queue}' is full: {pending} pending + {n} new > max_pending {cap}"
    return Refused(
        "queue_full", message, reason="QUEUE_FULL", limit="max_pending", value=pending + n, max=cap
    )


class Namespaces:
    """Every namespace actor, made on first write.

    :meth:`get` makes the actor it does not have: for writes (a quota applied,
    a job enqueued or claimed). Reads use :meth:`find`, which never makes one:
    a name anyone can type (``GET /board/ns/<name>``, ``status`` of a namespace
    that does not exist) must not become a namespace until restart.
    """

    def __init__(self) -> None:
        self._actors: dict[str, NamespaceActor] = {}

    def get(self, namespace: str) -> NamespaceActor:
        """The actor of ``namespace``, made if new (a fresh one has no quota)."""
        actor = self._actors.get(namespace)
        if actor is None:
            actor = self._actors[namespace] = NamespaceActor(namespace)
        return actor

    def find(self, namespace: str) -> NamespaceActor:
        """The actor of ``namespace`` to read; a blank one, kept nowhere, if none.

        A namespace without an actor has no quota, no buckets and nothing
        waiting: exactly a blank actor. What a caller changes on the blank one
        is dropped, so only reads (and waits that a quota cannot cap) use it.
        """
        actor = self._actors.get(namespace)
        return actor if actor is not None else NamespaceActor(namespace)

    def unlimited(self, namespace: str) -> bool:
        """True when ``namespace`` has no quota document, nor a broken one: no
        door limit, quota or hold applies to it, so admission skips their steps
        (the common case, asked once per call)."""
        actor = self._actors.get(namespace)
        return actor is None or (actor.quota is None and actor.broken is None)

    def known(self) -> list[NamespaceActor]:
        """Every actor made so far."""
        return list(self._actors.values())
