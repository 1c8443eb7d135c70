"""A namespace's storage and monthly blocks (seed 001), as small pure decisions.

Both are driven by measurements taken on a tick, not by the request: the
retention leader measures retained bytes, the roll-up tick counts the
month's enqueued jobs. A request only reads the decision.

- **Storage** (``max_retained_bytes``) is a level with hysteresis: it blocks
  strictly above the cap and releases only below ``cap * (1 - band)``. A tick
  with no measurement leaves the decision alone (never released on a phantom
  zero); a namespace over the cap at its first measurement blocks at once.
- **Monthly** (``monthly_jobs_quota``) is an allowance: exhausted when fully
  used (``>=``), for the UTC calendar month the count was taken in, so the
  block lifts when the month turns. Levels 50, 80, 90 and 100% are announced
  once per month, rising only.

The two are independent: releasing one never releases the other.
"""

from __future__ import annotations

import datetime as dt

import attrs

#: Announced levels of the monthly quota, in percent.
LEVELS = (50, 80, 90, 100)
#: ``retained_release_band`` when the document does not say.
DEFAULT_RELEASE_BAND = 0.1


@attrs.define
class StorageBlock:
    """Retained bytes of a namespace against ``max_retained_bytes``."""

    #: The last measurement (bytes), None before the first.
    measured: int | None = None
    held: bool = False

    def measure(self, measured: int | None, cap: int | None, band: float | None) -> bool:
        """Take one tick's measurement (None: none this tick); True if ``held`` changed."""
        before = self.held
        if measured is not None:
            self.measured = measured
        if cap is None:
            self.held = False
        elif self.measured is None or measured is None:
            pass  # nothing measured this tick: the decision stands
        elif measured > cap:
            self.held = True
        elif measured < cap * (1 - (DEFAULT_RELEASE_BAND if band is None else band)):
            self.held = False
        return self.held != before


@attrs.define
class MonthlyUse:
    """Jobs a namespace enqueued this UTC month, as of the last roll-up tick."""

    #: ``YYYY-MM`` the count belongs to (None before the first tick).
    month: str | None = None
    used: int = 0
    #: Wall ms when that month ends: the count says nothing after it.
    until_ms: int = 0

    def current(self, now_ms: int) -> int | None:
        """The count, if it belongs to the month of ``now_ms`` (else None: not counted yet)."""
        return self.used if now_ms < self.until_ms else None

    def exhausted(self, quota: int | None, now_ms: int) -> bool:
        """The allowance is used up (``>=``) for the month the count belongs to."""
        return quota is not None and now_ms < self.until_ms and self.used >= quota


def crossed(used: int, quota: int, announced: int) -> list[int]:
    """Levels (percent) ``used`` of ``quota`` has reached above ``announced``."""
    return [level for level in LEVELS if level > announced and used * 100 >= level * quota]


def month_of(now_ms: int) -> tuple[str, int, int]:
    """(``YYYY-MM``, first ms, first ms of the next month) of the UTC month of ``now_ms``."""
    at = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
    start = dt.datetime(at.year, at.month, 1, tzinfo=dt.UTC)
    end = dt.datetime(at.year + at.month // 12, at.month % 12 + 1, 1, tzinfo=dt.UTC)
    return f"{at.year:04d}-{at.month:02d}", _ms(start), _ms(end)


def _ms(at: dt.datetime) -> int:
    return int(at.timestamp()) * 1000
