"""Calendar windows of queue admission policies (seed 002 REQ-1, REQ-5), free of I/O.

A window ``{period: second|minute|hour|day|week|month, tz, start: "HH:MM",
weekday?}`` cuts time into consecutive intervals ``[start, end)`` of integer
milliseconds since the epoch. Its boundaries fall at ``start`` local
wall-clock time in ``tz``: every hour at minute MM (``start`` is ``"00:MM"``),
every day at HH:MM, every week on ``weekday`` at HH:MM, every month on its
first day at HH:MM (calendar months of the zone: 28 to 31 local days, give or
take a DST shift).

``second`` and ``minute`` windows are the ticks of the clock itself: every
whole second (minute) since the epoch, ``start`` being ``"00:00"``. Every
zone's offset has been a whole number of minutes since 1972, so these ticks
are the zone's own wall-clock seconds and minutes, and the rule below would
draw the same boundaries except in a fall-back, where it would make one
window of an hour and a minute (the repeated wall minutes were all reached
before): a rate per minute stays a rate per elapsed minute instead. ``tz``
names the zone for display and is validated like any other.

The rule, exactly: a boundary labelled with the local wall time L (say
2026-11-01 00:00) is **the first instant at which the local wall clock reads L
or later**. Windows are the intervals between consecutive distinct
boundaries, so they tile time with no gap and no overlap, and:

- an instant belongs to the window of the latest label the wall clock has
  *reached so far*. When the clock falls back it reopens nothing: the window
  current at the transition runs on until the clock reaches a label it has
  not reached before, so it absorbs the repeated stretch. The fall-back day
  is one window of 25 hours. Hourly ``00:00`` in America/Los_Angeles on that
  day has one window from 01:00 PDT to 02:00 PST, two hours (01:00 PST starts
  nothing: 01:00 was reached an hour before); hourly ``00:30`` has 01:30 PDT
  to 02:30 PST; in Australia/Lord_Howe, which falls back from 02:00 to
  01:30, hourly ``00:00`` has 01:00 to 02:00, 90 minutes. A label inside a
  repeated stretch starts at its first occurrence.
- a label that falls in a spring-forward gap resolves to the first valid
  instant after the gap, the transition itself (02:30 in America/Los_Angeles
  on the spring day is 03:00 PDT). The spring-forward day is 23 hours long.
  Two labels that resolve to the same instant (hourly 02:00 and 03:00 there)
  are one boundary: no empty window is ever returned.
- a month's label is its first day at ``start``, so a month window follows
  the rule above exactly as a day window does: the month whose first day is a
  fall-back day starts at the first occurrence of ``start`` (2026-11-01 01:30
  in America/Los_Angeles is 01:30 PDT; 01:45 PST belongs to November), and a
  ``start`` in a gap resolves to the transition.

Zones are loaded from the pinned ``tzdata`` package by path, never through
``zoneinfo``'s search path, so neither the host's ``/usr/share/zoneinfo`` nor
a forgotten ``zoneinfo.reset_tzpath`` can change a boundary, and a name only
the host knows (``posix/UTC``, ``localtime``) is an unknown zone. The zone
objects are pendulum's :class:`~pendulum.tz.timezone.Timezone`. Pendulum's own
normalisation of local times is *not* used: it resolves a time in a gap by
shifting it forward by the gap's length (02:30 -> 03:30) and an ambiguous time
to its second occurrence, and REQ-5 wants 03:00 and the first.

Speed: each :class:`Window` memoizes the last window :func:`bounds` computed
and returns it while the instant asked about lies inside it, so the claims of
one window cost one comparison each; when the window rolls over, the old end
is reused as the new start. The memo holds only a correct ``[start, end)``
(zone data never changes while the process runs) and is checked against the
instant on every call, so a stale entry is never used; equal windows do not
share it. A miss costs a few microseconds (a few ``zoneinfo`` look-ups), a
boundary in a gap a bisection of about 12 more.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import re
from importlib import resources
from typing import Any, Literal

import attrs
from pendulum.tz.timezone import Timezone

from actors.errors import invalid

Period = Literal["second", "minute", "hour", "day", "week", "month"]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
WEEK_MS = 7 * DAY_MS
#: Nominal lengths; a month's is the longest a month has (31 days).
PERIOD_MS: dict[str, int] = {
    "second": 1000, "minute": 60_000, "hour": HOUR_MS, "day": DAY_MS, "week": WEEK_MS,
    "month": 31 * DAY_MS,
}  # fmt: skip
#: Periods in order of length (the order ``windows`` are reported in).
PERIODS = tuple(PERIOD_MS)
#: Periods that are ticks of the clock, the same in every zone (module docstring).
_TICKS: dict[str, int] = {"second": 1000, "minute": 60_000}
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_KEYS = ("period", "tz", "start", "weekday")
_START = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
#: 1970-01-01, local day 0 of the wall-clock millisecond scale, was a Thursday.
_EPOCH_WEEKDAY = 3
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


@functools.cache
def zone_names() -> frozenset[str]:
    """Every zone name of the pinned ``tzdata`` package (its ``zones`` list)."""
    text = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


@functools.cache
def zone(name: str) -> Timezone:
    """The zone ``name`` from the pinned ``tzdata`` package; KeyError if it has none."""
    if name not in zone_names():  # also keeps ".." and absolute paths out
        raise KeyError(name)
    path = resources.files("tzdata").joinpath("zoneinfo", *name.split("/"))
    with path.open("rb") as f:
        return Timezone.from_file(f, key=name)


@attrs.frozen
class Window:
    """A calendar window; constructing one validates it (``invalid_argument``)."""

    period: Period
    tz: str
    start: str
    weekday: str | None = None
    #: Label phase in local wall-clock ms: labels are ``k * period + _phase``.
    _phase: int = attrs.field(init=False, eq=False, repr=False)
    _zone: Timezone = attrs.field(init=False, eq=False, repr=False)
    #: The last window computed, ``(start, end, label index of end)``; see the
    #: module docstring.
    _memo: list[tuple[int, int, int | None]] = attrs.field(
        init=False, eq=False, repr=False, factory=lambda: [(0, 0, None)]
    )

    def __attrs_post_init__(self) -> None:
        phase, tz = _check(self)
        object.__setattr__(self, "_phase", phase)
        object.__setattr__(self, "_zone", tz)

    @property
    def period_ms(self) -> int:
        """The nominal length of a window (an actual one may differ by a DST shift)."""
        return PERIOD_MS[self.period]

    def to_dict(self) -> dict[str, Any]:
        """The window object of the wire contract (``weekday`` omitted when None)."""
        out: dict[str, Any] = {"period": self.period, "tz": self.tz, "start": self.start}
        if self.weekday is not None:
            out["weekday"] = self.weekday
        return out


def _check(w: Window) -> tuple[int, Timezone]:
    """Validate a window: its label phase (local wall ms) and its zone."""
    if not isinstance(w.period, str) or w.period not in PERIOD_MS:
        raise invalid(
            "window.period",
            f"window.period must be second, minute, hour, day, week or month, got {w.period!r}",
        )
    try:
        tz = zone(w.tz) if isinstance(w.tz, str) else None
    except KeyError:
        tz = None
    if tz is None:
        raise invalid("window.tz", f"window.tz must be an IANA zone name, got {w.tz!r}")
    match = _START.fullmatch(w.start) if isinstance(w.start, str) else None
    if match is None:
        raise invalid("window.start", f"window.start must be HH:MM, 24-hour, got {w.start!r}")
    if w.period == "hour" and match[1] != "00":
        raise invalid(
            "window.start",
            f"an hourly window.start is 00:MM, MM being the minute each window starts, "
            f"got {w.start!r}",
        )
    if w.period in _TICKS and w.start != "00:00":
        raise invalid(
            "window.start", f"a {w.period} window.start is 00:00 (it ticks with the clock), "
            f"got {w.start!r}",
        )  # fmt: skip
    phase = int(match[1]) * HOUR_MS + int(match[2]) * 60_000
    if w.period == "week":
        if not isinstance(w.weekday, str) or w.weekday not in WEEKDAYS:
            raise invalid(
                "window.weekday", f"a weekly window needs weekday Mon..Sun, got {w.weekday!r}"
            )
        phase += (WEEKDAYS.index(w.weekday) - _EPOCH_WEEKDAY) % 7 * DAY_MS
    elif w.weekday is not None:
        raise invalid("window.weekday", f"weekday is only for a weekly window, not {w.period}")
    return phase, tz


def parse_window(value: Any) -> Window:
    """Decode the wire window object; ``invalid_argument`` naming the first bad field."""
    if not isinstance(value, dict):
        raise invalid("window", "window must be an object {period, tz, start, weekday?}")
    for key in value:
        if key not in _KEYS:
            hint = difflib.get_close_matches(str(key), _KEYS, n=1)
            maybe = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise invalid("window", f"unknown window field {key!r}{maybe}")
    for key in ("period", "tz", "start"):
        if value.get(key) is None:
            raise invalid(f"window.{key}", f"window.{key} is required")
    return Window(value["period"], value["tz"], value["start"], value.get("weekday"))


_fromtimestamp = dt.datetime.fromtimestamp


def _offset_ms(tz: Timezone, instant_ms: int) -> int:
    """The zone's UTC offset at an instant in ms (transitions fall on whole seconds)."""
    off: Any = _fromtimestamp(instant_ms // 1000, tz).utcoffset()
    return off.days * DAY_MS + off.seconds * 1000


def _local_offset_ms(tz: Timezone, label: int, fold: int = 0) -> int:
    """The offset zoneinfo gives a local wall time (see PEP 495 for ``fold``)."""
    local = _EPOCH + dt.timedelta(0, label // 1000)  # arithmetic clears fold
    off: Any = tz.utcoffset(local.replace(fold=1) if fold else local)
    return off.days * DAY_MS + off.seconds * 1000


def _resolve(tz: Timezone, label: int) -> int:
    """The first instant whose local wall time is ``label`` or later.

    ``label`` is a local wall time in ms on the local epoch scale (ms since
    1970-01-01 00:00 local), a whole number of minutes.
    """
    # fold=0 reads a repeated time as its first occurrence, and a time in a gap
    # with the offset from before the gap, which lands after the gap where the
    # offset differs. So when the offset at the instant found agrees, that
    # instant is the label's only or first occurrence: the usual case.
    early = _local_offset_ms(tz, label)
    if _offset_ms(tz, label - early) == early:
        return label - early
    lo, hi = sorted((label - early, label - _local_offset_ms(tz, label, fold=1)))
    if lo + _offset_ms(tz, lo) == label:  # a first occurrence after all
        return lo
    # In a gap: the wall clock jumps over the label at a transition in (lo, hi],
    # which falls on a whole second; find the first second whose wall time
    # reaches the label.
    lo_s, hi_s = lo // 1000, -(-hi // 1000)
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if mid * 1000 + _offset_ms(tz, mid * 1000) >= label:
            hi_s = mid
        else:
            lo_s = mid
    return hi_s * 1000


def _label(window: Window, k: int) -> int:
    """Label ``k`` of a window in local wall ms: ``k * period + phase``, or for a
    month the first day of month ``k`` (months since 1970-01) plus the phase."""
    if window.period != "month":
        return k * window.period_ms + window._phase
    year, month = divmod(k, 12)
    first = dt.date(1970 + year, month + 1, 1).toordinal() - _EPOCH_ORDINAL
    return first * DAY_MS + window._phase


def _index(window: Window, wall_ms: int) -> int:
    """The latest label ``k`` whose wall time is ``wall_ms`` or before."""
    if window.period != "month":
        return (wall_ms - window._phase) // window.period_ms
    day = _EPOCH + dt.timedelta(0, 0, 0, wall_ms)
    k = (day.year - 1970) * 12 + day.month - 1
    return k if _label(window, k) <= wall_ms else k - 1


def bounds(window: Window, instant_ms: int) -> tuple[int, int]:
    """``(start, end)`` in ms of the window containing ``instant_ms``: start <= instant < end.

    Instants are ms since the Unix epoch, within the years 1..9998.
    """
    start, end, k_end = window._memo[0]
    if start <= instant_ms < end:
        return start, end
    tick = _TICKS.get(window.period)
    if tick is not None:
        start = instant_ms - instant_ms % tick
        window._memo[0] = (start, start + tick, None)
        return start, start + tick
    tz = window._zone
    k = _index(window, instant_ms + _offset_ms(tz, instant_ms))
    # The wall clock has reached label k, so its boundary is <= instant.
    start = end if k == k_end else _resolve(tz, _label(window, k))
    end = _resolve(tz, _label(window, k + 1))
    while end <= instant_ms:  # the clock fell back: a later label was already reached
        k += 1
        start, end = end, _resolve(tz, _label(window, k + 1))
    window._memo[0] = (start, end, k + 1)
    return start, end


def next_boundary(window: Window, instant_ms: int) -> int:
    """The end of the window containing ``instant_ms``: when the next window starts."""
    return bounds(window, instant_ms)[1]
