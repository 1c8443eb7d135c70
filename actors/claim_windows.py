"""Stacked claim windows of a queue policy: several calendar windows at once.

A policy may cap claims in several windows together (``windows: [{max_claims,
period, tz, start?, weekday?}]``, e.g. 10 a second and 100,000 a day, Celery
#2186). A claim needs room in every window and is charged to all of them. The
single-window form (``max_claims_per_window`` + ``window``) is a one-element
list here.

Rules of the list:

- at most one window per period (:data:`~actors.window.PERIODS`), so at most
  six; a period is what a deferral names a window by (``{period, tz}``) and
  the key its usage is stored under;
- ``start`` defaults to ``"00:00"`` (the single-window form requires it);
- kept in the order given: read back as written.

:class:`WindowUsage` is one window's live usage in a queue: the claims charged
to its current window, and (after a backward step of the host's clock and a
restart) to windows ahead of the clock.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import attrs

from actors.errors import Refused, invalid
from actors.window import PERIODS, Window, bounds, parse_window

MAX_CLAIMS = 1_000_000
#: How long the usage of a second or minute window is kept: a day. Older rows
#: matter only to a restart after the host's clock stepped back by more.
KEEP_TICKS_MS = 86_400_000
#: Windows left behind whose usage a meter keeps (:attr:`WindowUsage.behind`).
KEEP_BEHIND = 2
#: One window per period.
MAX_WINDOWS = len(PERIODS)
_KEYS = ("max_claims", "period", "tz", "start", "weekday")


@attrs.frozen
class ClaimWindow:
    """At most ``max_claims`` claims per window of ``window`` (0 pauses)."""

    max_claims: int
    window: Window

    @property
    def key(self) -> str:
        """The window's name within its policy and its usage rows' key: its period."""
        return self.window.period

    def to_dict(self) -> dict[str, Any]:
        """One element of the policy's ``windows`` on the wire."""
        return {"max_claims": self.max_claims, **self.window.to_dict()}

    def name(self) -> dict[str, str]:
        """What a deferral says of the window: ``{period, tz}``."""
        return {"period": self.window.period, "tz": self.window.tz}


def claim_count(field: str, value: Any) -> int:
    """A claims cap: an integer from 0 to :data:`MAX_CLAIMS`."""
    if type(value) is not int or not 0 <= value <= MAX_CLAIMS:
        raise invalid(field, f"{field} must be an integer from 0 to {MAX_CLAIMS}")
    return value


def parse_windows(value: Any) -> tuple[ClaimWindow, ...]:
    """Decode ``windows``; ``invalid_argument`` naming the first bad field
    (``windows``, ``windows[2].period``, ...)."""
    if not isinstance(value, list) or not value:
        raise invalid("windows", "windows must be a non-empty list of {max_claims, period, tz, "
                      "start?, weekday?}")  # fmt: skip
    if len(value) > MAX_WINDOWS:
        raise invalid("windows", f"at most {MAX_WINDOWS} windows, one per period "
                      f"({', '.join(PERIODS)}), got {len(value)}")  # fmt: skip
    out: list[ClaimWindow] = []
    for i, doc in enumerate(value):
        at = f"windows[{i}]"
        if not isinstance(doc, dict):
            raise invalid(at, f"{at} must be an object {{max_claims, period, tz, start?, "
                          "weekday?}")  # fmt: skip
        for key in doc:
            if key not in _KEYS:
                hint = difflib.get_close_matches(str(key), _KEYS, n=1)
                maybe = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise invalid(at, f"unknown field {key!r} in {at}{maybe}")
        claims = claim_count(f"{at}.max_claims", doc.get("max_claims"))
        window = {k: v for k, v in doc.items() if k != "max_claims"}
        if window.get("start") is None:
            window["start"] = "00:00"
        try:
            parsed = parse_window(window)
        except Refused as exc:
            field = str(exc.details.get("field", "window")).replace("window", at, 1)
            raise invalid(field, exc.message.replace("window.", f"{at}.")) from None
        if any(w.key == parsed.period for w in out):
            raise invalid(f"{at}.period", f"{at} repeats the period {parsed.period!r}: one "
                          "window per period")  # fmt: skip
        out.append(ClaimWindow(claims, parsed))
    return tuple(out)


class WindowUsage:
    """Claims charged to one window of a policy queue."""

    def __init__(self, limit: ClaimWindow) -> None:
        self.limit = limit
        self.start = 0
        self.end = 0
        #: Claims charged to ``[start, end)``.
        self.used = 0
        #: Claims the store holds for windows after the current one, by start. Only
        #: a step of the host's clock back (then a restart) leaves any: a window
        #: charged on the old time comes round again and must not admit twice.
        self.ahead: dict[int, int] = {}
        #: The usage of the last few windows the meter left, by start. A decision
        #: may be taken at an instant just before another task's read rolled the
        #: meter on: on PostgreSQL other tasks run while a transaction's statement
        #: is on the wire (daemon.store.bridge), and the transaction's instant was
        #: read before. Rolled back to its window, the meter must find its usage,
        #: not zero (a second's window over-admitted across daemons otherwise).
        self.behind: dict[int, int] = {}
        #: The window start at which older usage rows were last forgotten.
        self.pruned_at: int | None = None

    def prune_before(self) -> int | None:
        """For a second or minute window that moved on since the last prune: the
        start before which its stored usage may be forgotten (else None)."""
        if self.limit.window.period not in ("second", "minute") or self.pruned_at == self.start:
            return None
        self.pruned_at = self.start
        return self.start - KEEP_TICKS_MS

    @property
    def key(self) -> str:
        return self.limit.key

    def roll(self, now_ms: int, stored_usage: Callable[[str, int], int] | None = None) -> None:
        """Move to the window containing ``now_ms``. A new one starts at what the
        store says was charged to it (``stored_usage(key, start)``: another
        daemon's claims), else at what :attr:`ahead` or :attr:`behind` holds for
        it, else at zero. The window left is kept in whichever of the two it is now."""
        if self.start <= now_ms < self.end:
            return
        left, left_used = self.start, self.used
        start, self.end = bounds(self.limit.window, now_ms)
        self.start = start
        if stored_usage is not None:
            self.used = stored_usage(self.key, start)
        else:
            used = self.ahead.pop(start, None)
            self.used = self.behind.pop(start, 0) if used is None else used
        if left and left != start:
            (self.ahead if left > start else self.behind)[left] = left_used
        if self.ahead:
            self.ahead = {s: used for s, used in self.ahead.items() if s > start}
        if self.behind:
            kept = sorted(s for s in self.behind if s < start)[-KEEP_BEHIND:]
            self.behind = {s: self.behind[s] for s in kept}

    def uncharge(self, start: int, n: int) -> None:
        """Take back ``n`` claims charged to the window starting at ``start`` (a
        rolled-back transaction), wherever the meter has rolled since."""
        if start == self.start:
            self.used -= n
        elif start in self.ahead:
            self.ahead[start] -= n
        elif start in self.behind:
            self.behind[start] -= n

    def room(self) -> int:
        """Claims the window admits now."""
        return max(0, self.limit.max_claims - self.used)

    @property
    def exhausted(self) -> bool:
        """No claim left in the current window (a cap of 0 included)."""
        return self.used >= self.limit.max_claims

    def carry(self, old: WindowUsage) -> None:
        """Take over ``old``'s live numbers (a policy rewritten with the same window)."""
        self.start, self.end, self.used = old.start, old.end, old.used
        self.ahead, self.behind = old.ahead, old.behind

    def to_dict(self) -> dict[str, Any]:
        """The window's usage on the wire (``admission_status``, the board)."""
        return {
            **self.limit.name(), "max_claims": self.limit.max_claims, "used": self.used,
            "remaining": self.room(), "window_start_at": self.start,
            "window_resets_at": self.end,
        }  # fmt: skip
