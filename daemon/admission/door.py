"""The door (seed 001): the first thing every authenticated request meets.

Limits come from the namespace's quota document (``request_rate``,
``message_rate``, ``max_item_bytes``, ...). In this order:

1. **Request bucket**: one token per authenticated request, on either
   transport (``hello``, ``/healthz``, ``/metrics`` are free).
2. **Size cap** (hard, even in shadow mode): each job's payload measured as
   its compact JSON text (:func:`daemon.store.jobs.dumps`: UTF-8, non-ASCII
   unescaped, separators ``,`` and ``:``; ``{"a":1}`` is 7 bytes).
3. **Message bucket**: n tokens for a call that enqueues n jobs (n = 0 never
   touches it); deliveries are debited after the fact by the jobs a claim
   returns, so it can go negative.

With ``daemon.enforce = false`` (shadow mode), or a quota document with
``enforce = false``, a bucket decision that would
block is logged (``limits namespace=<ns> limit=<field> would_block=true``) and
counted, and the request proceeds; hard limits refuse regardless. An
unlimited bucket allows without touching any state. Only rate limits answer
429 (with ``retry_after``); a cap is 413 or 403.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from actors.bucket import TokenBucket, retry_after_s
from actors.errors import Refused
from actors.quota import Bucket
from daemon.store.rows import dumps

if TYPE_CHECKING:
    from actors.clock import Clock
    from actors.namespace import NamespaceActor, Namespaces
    from daemon.config import Config
    from daemon.metrics import Metrics

log = logging.getLogger("sluicegate.limits")

_MESSAGES = {
    "request_rate": "request rate limit exceeded",
    "message_rate": "message rate limit exceeded",
}


#: A bucket unused this long is dropped (seed 001); sweeps at most this often.
IDLE_MS = 600_000
SWEEP_EVERY_MS = 120_000


def log_decision(namespace: str, limit: str, blocked: bool, **fields: Any) -> None:
    """The logfmt line of a limit that holds something back (PROTOCOL.md, "Door
    accounting"): ``limits namespace=<ns> limit=<limit> [<field>=<value> ...]
    would_block=true``, or ``blocked=true`` when enforcing. Door limits, budgets,
    queue policies and quotas all log through here."""
    if not log.isEnabledFor(logging.INFO):
        return
    extra = "".join(f" {k}={v}" for k, v in fields.items())
    outcome = "blocked" if blocked else "would_block"
    log.info("limits namespace=%s limit=%s%s %s=true", namespace, limit, extra, outcome)


class Door:
    """Door decisions for one daemon; buckets live on the namespace actors."""

    def __init__(
        self,
        *,
        clock: Clock,
        namespaces: Namespaces,
        metrics: Metrics,
        config: Callable[[], Config],
        known_queues: Callable[[], Collection[tuple[str, str]]],
    ) -> None:
        """``config``: the live config (a reload replaces it); ``known_queues``: every
        (namespace, queue) the daemon knows, for ``max_queues``."""
        self._clock = clock
        self._namespaces = namespaces
        self._metrics = metrics
        self._config = config
        self._known_queues = known_queues
        self._swept_at = 0
        #: This daemon's part of every per-daemon limit (buckets, waiting slots):
        #: 1 alone, 1/n of n daemons sharing a database (daemon.admission.membership).
        self.share = 1.0
        self._buckets = False  # whether any bucket may exist (cleared by a sweep finding none)

    def set_share(self, share: float) -> None:
        """This daemon's part of the per-daemon limits from now (buckets are
        clamped at their next use: a smaller share never keeps more tokens)."""
        self.share = share

    def _sweep(self, now_ms: int) -> None:
        """Drop buckets idle for :data:`IDLE_MS` (lazily, piggybacked on requests,
        at most once per :data:`SWEEP_EVERY_MS`); never one of a namespace with
        waiting claims."""
        if now_ms - self._swept_at < SWEEP_EVERY_MS:
            return
        self._swept_at = now_ms
        left = False
        for actor in self._namespaces.known():
            if actor.waiting:
                left = left or bool(actor.buckets)
                continue
            for limit, bucket in list(actor.buckets.items()):
                if now_ms - bucket.last_used_ms >= IDLE_MS:
                    del actor.buckets[limit]
                    actor.bucket_specs.pop(limit, None)
            left = left or bool(actor.buckets)
        self._buckets = left

    def _bucket(self, actor: NamespaceActor, limit: str, now_ms: int) -> TokenBucket | None:
        """The namespace's bucket for ``limit`` (None: unlimited), made or updated
        from its quota document (an update never adds tokens)."""
        quota = actor.quota
        spec: Bucket | None = getattr(quota, limit, None) if quota is not None else None
        if spec is None:
            actor.buckets.pop(limit, None)
            return None
        bucket = actor.buckets.get(limit)
        share = self.share  # this daemon's part of the namespace's limit
        if bucket is None:
            bucket = actor.buckets[limit] = TokenBucket(
                spec.capacity * share, spec.refill_per_s * share, now_ms
            )
            self._buckets = True
            actor.bucket_specs[limit] = (spec, share)
        elif actor.bucket_specs.get(limit) != (spec, share):
            bucket.update(spec.capacity * share, spec.refill_per_s * share, now_ms)
            actor.bucket_specs[limit] = (spec, share)
        return bucket

    def _charge(self, namespace: str, limit: str, n: int) -> None:
        """Take ``n`` tokens from ``limit``'s bucket, or refuse (or, in shadow mode, log)."""
        actor = self._namespaces.find(namespace)  # no quota, no bucket: nothing to make
        if actor.quota is None or n <= 0:
            return
        now = self._clock.now_ms()
        bucket = self._bucket(actor, limit, now)
        if bucket is None:
            return
        wait = bucket.take(n, now)
        if wait == 0:
            self._metrics.door_decision(limit, "allowed")
            return
        if self._blocks(namespace, limit):
            raise Refused(
                "rate_limited", _MESSAGES[limit], limit=limit, retry_after=retry_after_s(wait)
            )

    def enforces(self, namespace: str) -> bool:
        """Whether a door limit of ``namespace`` that is over refuses (False: shadow
        mode, ``daemon.enforce = false`` or the namespace's quota ``enforce = false``)."""
        quota = self._namespaces.find(namespace).quota
        return self._config().daemon.enforce and (quota is None or quota.enforce)

    def _blocks(self, namespace: str, limit: str) -> bool:
        """A limit is over: log and count the decision; True when enforcing (refuse),
        False in shadow mode (``daemon.enforce = false``, or the namespace's quota
        document shadowed: let it through)."""
        enforce = self.enforces(namespace)
        log_decision(namespace, limit, enforce)
        self._metrics.door_decision(limit, "blocked" if enforce else "would_block")
        return enforce

    # -- the checks ----------------------------------------------------------------

    def request(self, namespace: str) -> None:
        """One authenticated request of ``namespace`` (after auth, before the verb)."""
        if not self._namespaces.unlimited(namespace):
            self._charge(namespace, "request_rate", 1)
        if self._buckets:  # with none (no door limits anywhere) the clock is not read
            self._sweep(self._clock.now_ms())

    def enqueue(self, namespace: str, payloads: list[Any]) -> list[str] | None:
        """A call enqueuing jobs with these payloads: size cap, blocks, then messages.

        Returns the payloads' JSON texts when the size cap measured them (the
        store writes those same texts), else None.
        """
        actor = self._namespaces.get(namespace)
        quota = actor.quota
        if quota is None:
            return None
        cap = quota.max_item_bytes
        texts = None
        if cap is not None:
            texts = [dumps(payload) for payload in payloads]
            for text in texts:
                # An ASCII str knows it is ASCII: its length is its size in bytes.
                size = len(text) if text.isascii() else len(text.encode())
                if size > cap:  # hard, even in shadow mode
                    self._metrics.door_decision("max_item_bytes", "blocked")
                    raise Refused(
                        "payload_too_large",
                        f"max_item_bytes exceeded: {size} > {cap}",
                        limit="max_item_bytes", value=size, max=cap,
                    )  # fmt: skip
        # The blocks (403) before the message bucket (429): retrying cannot help.
        self.blocks(namespace)
        self._charge(namespace, "message_rate", len(payloads))
        return texts

    def blocks(self, namespace: str) -> None:
        """The storage and monthly blocks of jobs entering ``namespace`` (an enqueue,
        a dead letter's replay): ``quota_exceeded`` while one holds. Storage first,
        so it is the reason reported when both hold."""
        actor = self._namespaces.find(namespace)
        quota = actor.quota
        if quota is None:
            return
        storage = actor.storage
        if storage.held and quota.max_retained_bytes is not None:
            retained, cap = storage.measured or 0, quota.max_retained_bytes
            self._capped(namespace, "max_retained_bytes", retained, cap,
                         f"max_retained_bytes exceeded: {retained} > {cap}")  # fmt: skip
        monthly = quota.monthly_jobs_quota
        if monthly is not None and actor.monthly.exhausted(monthly, self._clock.now_ms()):
            used = actor.monthly.used
            self._capped(
                namespace, "monthly_jobs_quota", used, monthly,
                f"monthly_jobs_quota exceeded: {used} >= {monthly}; the block lifts at the "
                "next calendar month",
            )  # fmt: skip

    def _capped(self, namespace: str, limit: str, value: int, cap: int, message: str) -> None:
        """A cap (403 ``quota_exceeded``) that shadow mode lets through, logged."""
        if self._blocks(namespace, limit):
            raise Refused("quota_exceeded", message, limit=limit, value=value, max=cap)

    def new_queues(self, namespace: str, queues: set[str]) -> None:
        """``queues`` would be created (by an enqueue or ``queue_configure``):
        ``max_queues`` counts the namespace's queues. A known queue costs a set
        lookup; the count is read from memory (after a restart, from the store:
        a floor, since queues are never removed)."""
        quota = self._namespaces.get(namespace).quota
        if quota is None or quota.max_queues is None:
            return
        known = self._known_queues()
        fresh = {q for q in queues if (namespace, q) not in known}
        if not fresh:
            return
        value = sum(1 for ns, _q in known if ns == namespace) + len(fresh)
        cap = quota.max_queues
        if value > cap:
            self._capped(namespace, "max_queues", value, cap,
                         f"max_queues exceeded: {value} > {cap}")  # fmt: skip

    def retention(self, namespace: str, ttls: dict[str, int | None]) -> None:
        """``queue_configure``'s TTLs against ``max_retention_ms``: refused, never
        clamped; an absent or non-positive TTL (the daemon default) is allowed."""
        quota = self._namespaces.get(namespace).quota
        if quota is None or quota.max_retention_ms is None:
            return
        cap = quota.max_retention_ms
        for option, ttl in ttls.items():
            if ttl is not None and ttl > 0 and ttl > cap:
                self._capped(namespace, "max_retention_ms", ttl, cap,
                             f"max_retention_ms exceeded: {option} {ttl} > {cap}")  # fmt: skip

    def wait_slot(self, namespace: str) -> Callable[[], None]:
        """Take a waiting-claim slot of ``namespace`` for one ``claim_next`` wait;
        returns its release (idempotent: call it on every way out of the wait).

        Over ``max_waiting_claims``: ``too_many_waiters`` (429, ``retry_after``
        5); in shadow mode the slot is granted over the cap and still counted.
        A namespace without an actor has no cap: its waits make none.
        """
        actor = self._namespaces.find(namespace)
        quota = actor.quota
        cap = quota.max_waiting_claims if quota is not None else None
        if cap is not None and self.share < 1:
            cap = int(cap * self.share)  # rounded down: the daemons' caps never sum over
        if (
            cap is not None
            and actor.waiting >= cap
            and self._blocks(namespace, "max_waiting_claims")
        ):
            raise Refused(
                "too_many_waiters", f"max_waiting_claims exceeded: {actor.waiting + 1} > {cap}",
                limit="max_waiting_claims", value=actor.waiting + 1, max=cap, retry_after=5,
            )  # fmt: skip
        actor.waiting += 1
        held = [True]

        def release() -> None:
            if held:
                held.clear()
                actor.waiting -= 1

        return release

    def delivered(self, namespace: str, n: int) -> None:
        """A claim answered with ``n`` jobs: debit the message bucket after the fact."""
        if n <= 0:
            return
        actor = self._namespaces.get(namespace)
        if actor.quota is None:
            return
        now = self._clock.now_ms()
        bucket = self._bucket(actor, "message_rate", now)
        if bucket is not None:
            bucket.force(n, now)

    def describe(self, namespace: str) -> dict[str, Any]:
        """The namespace's door buckets now (for ``status``)."""
        actor = self._namespaces.find(namespace)
        now = self._clock.now_ms()
        return {limit: round(b.tokens(now), 3) for limit, b in sorted(actor.buckets.items())}
