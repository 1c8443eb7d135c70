"""The client retry policy of seed 001, as one small pure class.

- A 429 (``queue_full``, ``rate_limited``, ``too_many_waiters``, or any other
  code with that status) is the only retryable outcome. A 403 or any other
  refusal surfaces at once, with its code.
- ``retry_after`` (seconds) is honoured when the daemon sends it, with ±20%
  jitter so refused clients do not come back as a herd.
- Without it: exponential backoff from 500 ms, doubling, capped at 30 s, then
  jittered the same way (the cap is applied before the jitter, so clients at
  the cap still spread out).
- Attempts: 10 for producing and administrative calls, unbounded for a waiting
  claim (``claim_next`` with ``wait_ms > 0``), since a consumer loop is meant
  to keep its place through transient rate limiting. Setting ``max_attempts``
  applies it to both.

Connection loss is not retried: a call whose connection dropped may or may not
have been applied, and only the caller knows whether repeating it is safe.
"""

from __future__ import annotations

import random

import attrs

from daemon.sdk.errors import SluicegateError

#: Attempts (the first call included) for calls that do not wait.
DEFAULT_ATTEMPTS = 10


def _positive(_inst: object, attr: attrs.Attribute, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attr.name} must be at least 1, got {value}")


@attrs.frozen
class RetryPolicy:
    """When to retry a refused call, and how long to wait first."""

    #: Attempts for every call, waiting claims included; None: the defaults above.
    max_attempts: int | None = attrs.field(default=None, validator=_positive)
    #: First backoff delay, in seconds.
    base: float = 0.5
    #: Longest backoff delay before jitter, in seconds.
    cap: float = 30.0
    #: Relative jitter: a delay d becomes uniform(d * (1 - j), d * (1 + j)).
    jitter: float = 0.2
    rng: random.Random = attrs.field(factory=random.Random, eq=False, repr=False)

    def limit(self, *, waiting: bool) -> int | None:
        """Attempts allowed for a call (None: unbounded)."""
        if self.max_attempts is not None:
            return self.max_attempts
        return None if waiting else DEFAULT_ATTEMPTS

    def should_retry(self, error: BaseException, attempt: int, *, waiting: bool = False) -> bool:
        """True if a call whose attempt number ``attempt`` (from 1) failed with ``error``
        should be tried again."""
        if not isinstance(error, SluicegateError) or not error.retryable:
            return False
        limit = self.limit(waiting=waiting)
        return limit is None or attempt < limit

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after attempt number ``attempt`` (from 1) was refused."""
        if retry_after is not None and retry_after >= 0:
            nominal = float(retry_after)
        else:
            # min() on the exponent first: 2 ** 1000 would still be exact but pointless.
            nominal = min(self.cap, self.base * 2 ** min(max(attempt - 1, 0), 62))
        return nominal * self.rng.uniform(1 - self.jitter, 1 + self.jitter)


#: A policy that never retries.
NO_RETRY = RetryPolicy(max_attempts=1)
