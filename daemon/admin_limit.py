"""The admin write limiter: management writes, per caller, 1 a second with a burst of 10.

A stolen or runaway management token should not be able to churn budgets,
policies, quotas and queues (each write is a store transaction and an audit
record) as fast as the transport carries calls. So every call of a verb in
:data:`ADMIN_WRITES` takes one token from its caller's bucket (an exact
:class:`actors.bucket.TokenBucket` of capacity :data:`BURST` refilled
:data:`RATE_PER_S` a second), or is refused ``rate_limited`` (429) with
``limit: "admin_writes"`` and ``retry_after``.

Who the caller is:

- with tokens, the token's name, on both transports (one bucket per token,
  so the socket and HTTP meet the same limit with the same outcome);
- in open mode over HTTP, the client's address (``client``), since anyone who
  can reach the port is a caller;
- in open mode over the socket: no limit. The socket's file permissions are
  its access control, and a local process that may open it may do anything.

A call is charged once it has been planned: a call refused before it would
touch the store (malformed arguments, a verb not granted, a queue out of
scope, not found, read-only) costs nothing; a call that goes on to its write
costs one token even if the write then refuses (a ``conflict`` found in the
transaction still cost one). Time is the daemon's clock, so a
``MockClock`` drives it in tests. Always enforced: shadow mode
(``enforce = false``) is for the quota document's door limits, not this.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from actors.bucket import TokenBucket, retry_after_s
from actors.errors import Refused

if TYPE_CHECKING:
    from daemon.core import Core
    from daemon.session import Session

log = logging.getLogger("sluicegate.limits")

#: Verbs that need a management grant (``manage``, ``operator`` or the explicit
#: policy grants) and change state. ``dead_replay`` is not here: ``produce``
#: may call it and it goes through enqueue admission (the door's buckets), as
#: every producer path does.
ADMIN_WRITES = frozenset({
    "budget_create", "budget_put", "budget_patch", "budget_delete",
    "policy_set", "policy_clear",
    "quota_set", "quota_clear",
    "queue_configure",
})  # fmt: skip
BURST = 10
RATE_PER_S = 1.0
MESSAGE = "admin write rate limit exceeded"
#: Full buckets (the same as fresh ones) are dropped at most this often.
SWEEP_EVERY_MS = 60_000


class AdminWriteLimiter:
    """Buckets of admin writes by caller key (``token:<name>`` or ``client:<address>``)."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._buckets: dict[str, TokenBucket] = {}
        self._swept_at = 0

    @staticmethod
    def key(session: Session, client: str | None) -> str | None:
        """The bucket a call is charged to, or None when it is not limited."""
        if session.token_name is not None:
            return "token:" + session.token_name
        if client is not None:
            return "client:" + client
        return None

    def charge(self, session: Session, client: str | None) -> None:
        """Take one token for an admin write, or raise ``rate_limited``."""
        key = self.key(session, client)
        if key is None:
            return
        now = self._core.clock.now_ms()
        self._sweep(now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(BURST, RATE_PER_S, now)
        wait = bucket.take(1, now)
        if wait == 0:
            self._core.metrics.door_decision("admin_writes", "allowed")
            return
        log.info("limits key=%s limit=admin_writes blocked=true", key)
        self._core.metrics.door_decision("admin_writes", "blocked")
        raise Refused(
            "rate_limited", MESSAGE, limit="admin_writes", retry_after=retry_after_s(wait)
        )

    def _sweep(self, now_ms: int) -> None:
        # A full bucket behaves exactly as a fresh one: dropping it changes no
        # decision, and keeps the map as small as the callers active lately.
        if now_ms - self._swept_at < SWEEP_EVERY_MS:
            return
        self._swept_at = now_ms
        for key, bucket in list(self._buckets.items()):
            if bucket.tokens(now_ms) >= BURST:
                del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
