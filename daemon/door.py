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

With ``daemon.enforce = false`` (shadow mode) a bucket decision that would
block is logged (``limits namespace=<ns> limit=<field> would_block=true``) and
counted, and the request proceeds; hard limits refuse regardless. An
unlimited bucket allows without touching any state. Only rate limits answer
429 (with ``retry_after``); a cap is 413 or 403.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from actors.bucket import TokenBucket, retry_after_s
from actors.errors import Refused
from actors.quota import Bucket
from daemon.store.jobs import dumps

if TYPE_CHECKING:
    from actors.namespace import NamespaceActor
    from daemon.core import Core

log = logging.getLogger("sluicegate.limits")

_MESSAGES = {
    "request_rate": "request rate limit exceeded",
    "message_rate": "message rate limit exceeded",
}


class Door:
    """Door decisions for one daemon; buckets live on the namespace actors."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def _bucket(self, actor: NamespaceActor, limit: str, now_ms: int) -> TokenBucket | None:
        """The namespace's bucket for ``limit`` (None: unlimited), made or updated
        from its quota document (an update never adds tokens)."""
        quota = actor.quota
        spec: Bucket | None = getattr(quota, limit, None) if quota is not None else None
        if spec is None:
            actor.buckets.pop(limit, None)
            return None
        bucket = actor.buckets.get(limit)
        if bucket is None:
            bucket = actor.buckets[limit] = TokenBucket(spec.capacity, spec.refill_per_s, now_ms)
            actor.bucket_specs[limit] = spec
        elif actor.bucket_specs.get(limit) != spec:
            bucket.update(spec.capacity, spec.refill_per_s, now_ms)
            actor.bucket_specs[limit] = spec
        return bucket

    def _charge(self, namespace: str, limit: str, n: int) -> None:
        """Take ``n`` tokens from ``limit``'s bucket, or refuse (or, in shadow mode, log)."""
        actor = self._core.namespaces.get(namespace)
        if actor.quota is None or n <= 0:
            return
        now = self._core.clock.now_ms()
        bucket = self._bucket(actor, limit, now)
        if bucket is None:
            return
        wait = bucket.take(n, now)
        if wait == 0:
            self._core.metrics.door_decision(limit, "allowed")
            return
        retry = retry_after_s(wait)
        if not self._core.config.daemon.enforce:
            log.info("limits namespace=%s limit=%s would_block=true", namespace, limit)
            self._core.metrics.door_decision(limit, "would_block")
            return
        log.info("limits namespace=%s limit=%s blocked=true", namespace, limit)
        self._core.metrics.door_decision(limit, "blocked")
        raise Refused("rate_limited", _MESSAGES[limit], limit=limit, retry_after=retry)

    # -- the checks ----------------------------------------------------------------

    def request(self, namespace: str) -> None:
        """One authenticated request of ``namespace`` (after auth, before the verb)."""
        self._charge(namespace, "request_rate", 1)

    def enqueue(self, namespace: str, payloads: list[Any]) -> None:
        """A call enqueuing jobs with these payloads: size cap, then messages."""
        actor = self._core.namespaces.get(namespace)
        quota = actor.quota
        if quota is None:
            return
        cap = quota.max_item_bytes
        if cap is not None:
            for payload in payloads:
                size = len(dumps(payload).encode())
                if size > cap:  # hard, even in shadow mode
                    self._core.metrics.door_decision("max_item_bytes", "blocked")
                    raise Refused(
                        "payload_too_large",
                        f"max_item_bytes exceeded: {size} > {cap}",
                        limit="max_item_bytes", value=size, max=cap,
                    )  # fmt: skip
        self._charge(namespace, "message_rate", len(payloads))

    def delivered(self, namespace: str, n: int) -> None:
        """A claim answered with ``n`` jobs: debit the message bucket after the fact."""
        if n <= 0:
            return
        actor = self._core.namespaces.get(namespace)
        if actor.quota is None:
            return
        now = self._core.clock.now_ms()
        bucket = self._bucket(actor, "message_rate", now)
        if bucket is not None:
            bucket.force(n, now)

    def describe(self, namespace: str) -> dict[str, Any]:
        """The namespace's door buckets now (for ``status``)."""
        actor = self._core.namespaces.get(namespace)
        now = self._core.clock.now_ms()
        return {limit: round(b.tokens(now), 3) for limit, b in sorted(actor.buckets.items())}
