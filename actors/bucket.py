"""A token bucket for the door (seed 001): capacity = burst, refill = sustained rate.

Exact integer arithmetic: a token is :data:`SCALE` units and the refill adds
``rate_units_per_ms`` units a millisecond (rates are exact to 0.001 token a
second), so "when does the deficit refill" is exact to the millisecond and no
drift accumulates. A fresh bucket is full. A denial never debits. Raising the
capacity keeps the current count; lowering it clamps the count (seed 001: a
plan upgrade hands out no free tokens). :meth:`TokenBucket.force` debits after
the fact (deliveries) and may drive the count negative, so the next request
waits until it refills above zero.
"""

from __future__ import annotations

import math

SCALE = 1_000_000  # units per token


def retry_after_s(wait_ms: int) -> int:
    """``ceil(deficit / refill_rate)`` in seconds, clamped to 1-60 (PROTOCOL.md)."""
    return max(1, min(60, math.ceil(wait_ms / 1000)))


class TokenBucket:
    """One bucket: ``capacity`` tokens, refilled ``refill_per_s`` tokens a second."""

    __slots__ = ("_as_of", "_cap", "_rate", "_units", "last_used_ms")

    def __init__(self, capacity: float, refill_per_s: float, now_ms: int) -> None:
        # A capacity may be a share of a limit (a fraction): kept in whole units.
        self._cap = int(capacity * SCALE)
        self._rate = round(refill_per_s * SCALE / 1000)  # units per ms
        self._units = self._cap  # a fresh bucket is full
        self._as_of = now_ms
        self.last_used_ms = now_ms

    @property
    def capacity(self) -> int:
        return self._cap // SCALE

    def _level(self, now_ms: int) -> int:
        elapsed = now_ms - self._as_of
        if elapsed <= 0 or self._units >= self._cap:
            return self._units
        return min(self._cap, self._units + elapsed * self._rate)

    def tokens(self, now_ms: int) -> float:
        """Tokens now (may be negative after :meth:`force`)."""
        return self._level(now_ms) / SCALE

    def take(self, n: int, now_ms: int) -> int:
        """Take ``n`` tokens if the bucket holds them: 0 when taken, else the
        milliseconds until it will (nothing is debited on a denial). ``n = 0``
        is always allowed and touches nothing."""
        if n <= 0:
            return 0
        self.last_used_ms = now_ms
        level = self._level(now_ms)
        need = n * SCALE
        if level >= need:
            self._units, self._as_of = level - need, max(self._as_of, now_ms)
            return 0
        if self._rate <= 0 or need > self._cap:
            return 60_000  # never refills enough: say the most we ever say
        return -(-(need - level) // self._rate)

    def force(self, n: int, now_ms: int) -> None:
        """Debit ``n`` unconditionally (deliveries after the fact); may go negative."""
        if n <= 0:
            return
        self.last_used_ms = now_ms
        self._units, self._as_of = self._level(now_ms) - n * SCALE, max(self._as_of, now_ms)

    def update(self, capacity: float, refill_per_s: float, now_ms: int) -> None:
        """New settings without new tokens: keep the count, clamp it to the new capacity."""
        level = self._level(now_ms)
        self._cap = int(capacity * SCALE)
        self._rate = round(refill_per_s * SCALE / 1000)
        self._units, self._as_of = min(level, self._cap), max(self._as_of, now_ms)
