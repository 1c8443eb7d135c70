"""The admin write limiter: management writes, per caller, at a configured rate.

A stolen or runaway management token should not be able to churn budgets,
policies, quotas and queues (each write is a store transaction and an audit
record) as fast as the transport carries calls. So every call of a verb in
:data:`ADMIN_WRITES` takes one token from its caller's bucket, or is refused
``rate_limited`` (429) with ``limit: "admin_writes"``, ``retry_after``, and a
message naming the limit and where to change it.

The limit (:class:`WriteLimit`): ``[daemon] admin_write_rate`` (default
``"1/s"``) with ``admin_write_burst`` (default 10); a token may override both
with ``write_rate`` (``"20/s"``, or ``"unlimited"``) and ``write_burst``
(default: the rate's count, as ``enqueue_rate``'s bucket). Rates are
``<count>/<unit>``, parsed by :func:`daemon.config.parse_write_rate` (the
quota's :func:`actors.quota.parse_rate`, or ``"unlimited"``), and
a bucket is the same exact :class:`actors.budget.TokenPool` an
``enqueue_rate`` uses. A reload that changes a limit applies at the caller's
next admin write: a new bucket starts full, an existing one keeps its tokens,
clamped to the new burst (an update hands out no free tokens).

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
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from actors.bucket import retry_after_s
from actors.budget import TIME_BASED, BudgetSpec, Strategy, TokenPool
from actors.errors import Refused
from actors.quota import Rate
from daemon.config import Config, parse_write_rate

if TYPE_CHECKING:
    from actors.clock import Clock
    from daemon.metrics import Metrics
    from daemon.session import Session

log = logging.getLogger("sluicegate.limits")

#: Verbs that need a management grant (``manage``, ``operator`` or the explicit
#: policy grants) and change state. ``dead_replay`` is not here: ``produce``
#: may call it and it goes through enqueue admission (the door's buckets), as
#: every producer path does; nor is ``budget_pause``, a worker's call on an
#: upstream's 429 (the door's request bucket charges it).
ADMIN_WRITES = frozenset({
    "budget_create", "budget_put", "budget_patch", "budget_delete", "budget_resume",
    "policy_set", "policy_clear",
    "quota_set", "quota_clear",
    "queue_configure",
})  # fmt: skip
MESSAGE = "admin write rate limit exceeded"
HINT = "set write_rate on the token or [daemon] admin_write_rate"
#: Full buckets (the same as fresh ones) are dropped at most this often.
SWEEP_EVERY_MS = 60_000


@attrs.frozen
class WriteLimit:
    """One caller's admin write limit: ``rate`` with a pool of ``burst`` tokens."""

    rate: Rate
    burst: int

    def spec(self) -> BudgetSpec:
        """The token pool: ``count`` tokens a unit, capped at ``burst``."""
        return BudgetSpec(self.rate.count, Strategy(TIME_BASED, self.rate.per_ms, self.burst))

    def __str__(self) -> str:
        return f"{self.rate}, burst {self.burst}"


def write_limit(config: Config, token_name: str | None) -> WriteLimit | None:
    """The limit of a token's admin writes (or of an open-mode HTTP client's:
    ``token_name`` None); None when unlimited."""
    daemon = config.daemon
    token = next((t for t in config.tokens if t.name == token_name), None)
    if token is not None and token.write_rate is not None:
        rate, burst = parse_write_rate(token.write_rate), token.write_burst
    else:
        rate, burst = parse_write_rate(daemon.admin_write_rate), daemon.admin_write_burst
        if token is not None and token.write_burst is not None:
            burst = token.write_burst
    if rate is None:
        return None
    return WriteLimit(rate, burst if burst is not None else rate.count)


class AdminWriteLimiter:
    """Buckets of admin writes by caller key (``token:<name>`` or ``client:<address>``)."""

    def __init__(self, *, clock: Clock, metrics: Metrics, config: Callable[[], Config]) -> None:
        """``config``: the live config (a reload replaces it; limits apply at the next write)."""
        self._clock = clock
        self._metrics = metrics
        self._config = config
        self._buckets: dict[str, TokenPool] = {}
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
        limit = write_limit(self._config(), session.token_name)
        if limit is None:
            self._buckets.pop(key, None)
            return
        now = self._clock.now_ms()
        self._sweep(now)
        spec = limit.spec()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenPool(spec, now)
        elif bucket.spec != spec:  # changed by a reload: keep the tokens, clamp them
            bucket.update(spec, now)
        if bucket.debit(1, now):
            self._metrics.door_decision("admin_writes", "allowed")
            return
        log.info("limits key=%s limit=admin_writes blocked=true", key)
        self._metrics.door_decision("admin_writes", "blocked")
        at = bucket.eligible_at(1, now)
        raise Refused(
            "rate_limited", f"{MESSAGE}: {limit} ({HINT})", limit="admin_writes",
            rate=str(limit.rate), burst=limit.burst,
            retry_after=retry_after_s(60_000 if at is None else at - now),
        )  # fmt: skip

    def _sweep(self, now_ms: int) -> None:
        # A full bucket behaves exactly as a fresh one: dropping it changes no
        # decision, and keeps the map as small as the callers active lately.
        if now_ms - self._swept_at < SWEEP_EVERY_MS:
            return
        self._swept_at = now_ms
        for key, bucket in list(self._buckets.items()):
            if bucket.available(now_ms) >= bucket.spec.cap:
                del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
