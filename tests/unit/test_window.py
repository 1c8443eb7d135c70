"""Calendar windows (seed 002 REQ-1, REQ-5): the named scenarios, validation, and
every zone of the pinned tzdata checked against an independent oracle.

The oracle reads the same pinned data through the standard library
(``zoneinfo`` with ``reset_tzpath(to=[])``), finds each zone's transitions by
scanning its UTC offset, and computes a boundary straight from the rule: the
first instant whose local wall time is the label or later. It shares no code
with :mod:`actors.window` (which resolves labels by ``fold``).
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import itertools
import zoneinfo
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
import tzdata
from hypothesis import given, settings
from hypothesis import strategies as st

import actors.window as window_module
from actors.errors import Refused
from actors.window import Window, bounds, next_boundary, parse_window, zone, zone_names

H = 3_600_000
DAY = 24 * H
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def utc(*args: int) -> int:
    """Milliseconds since the epoch of a UTC wall time."""
    return int(dt.datetime(*args, tzinfo=dt.UTC).timestamp()) * 1000  # type: ignore[misc]


def win(period: str, tz: str, start: str, weekday: str | None = None) -> Window:
    return parse_window({"period": period, "tz": tz, "start": start, "weekday": weekday})


def walk(window: Window, instant: int, n: int) -> list[tuple[int, int]]:
    """``n`` consecutive windows from the one containing ``instant``."""
    out = [bounds(window, instant)]
    while len(out) < n:
        out.append(bounds(window, out[-1][1]))
    return out


# -- the named scenarios (2026: US DST Mar 8 / Nov 1, EU Mar 29 / Oct 25) ----------


def test_a_pacific_day_exhausted_at_17_00_next_boundary_is_the_next_pacific_midnight():
    day = win("day", "America/Los_Angeles", "00:00")
    exhausted = utc(2026, 6, 11, 0)  # 17:00 PDT on June 10
    assert next_boundary(day, exhausted) == utc(2026, 6, 11, 7)  # 00:00 PDT
    assert bounds(day, exhausted) == (utc(2026, 6, 10, 7), utc(2026, 6, 11, 7))
    assert bounds(day, utc(2026, 6, 11, 7)) == (utc(2026, 6, 11, 7), utc(2026, 6, 12, 7))
    assert bounds(day, utc(2026, 6, 11, 7) - 1) == (utc(2026, 6, 10, 7), utc(2026, 6, 11, 7))


def test_the_fall_back_day_is_one_window_of_25_hours():
    day = win("day", "America/Los_Angeles", "00:00")
    whole = (utc(2026, 11, 1, 7), utc(2026, 11, 2, 8))  # 00:00 PDT .. 00:00 PST
    first_0130, second_0130 = utc(2026, 11, 1, 8, 30), utc(2026, 11, 1, 9, 30)
    assert bounds(day, first_0130) == whole
    assert bounds(win("day", "America/Los_Angeles", "00:00"), second_0130) == whole  # no memo
    assert whole[1] - whole[0] == 25 * H


def test_the_spring_forward_day_is_23_hours():
    day = win("day", "America/Los_Angeles", "00:00")
    assert bounds(day, utc(2026, 3, 8, 20)) == (utc(2026, 3, 8, 8), utc(2026, 3, 9, 7))


def test_a_start_in_the_spring_forward_gap_resolves_to_the_first_instant_after_it():
    day = win("day", "America/Los_Angeles", "02:30")  # 02:30 does not exist on Mar 8
    assert walk(day, utc(2026, 3, 7, 12), 3) == [
        (utc(2026, 3, 7, 10, 30), utc(2026, 3, 8, 10)),  # 02:30 PST .. 03:00 PDT: 23.5 h
        (utc(2026, 3, 8, 10), utc(2026, 3, 9, 9, 30)),  # 03:00 PDT .. 02:30 PDT: 23.5 h
        (utc(2026, 3, 9, 9, 30), utc(2026, 3, 10, 9, 30)),
    ]


def test_a_start_in_the_repeated_hour_starts_at_its_first_occurrence():
    day = win("day", "America/Los_Angeles", "01:30")
    assert walk(day, utc(2026, 10, 31, 12), 2) == [
        (utc(2026, 10, 31, 8, 30), utc(2026, 11, 1, 8, 30)),  # .. 01:30 PDT, not PST
        (utc(2026, 11, 1, 8, 30), utc(2026, 11, 2, 9, 30)),  # 25 h
    ]
    # 01:10 PST reads earlier than 01:30, but 01:30 was reached an hour before.
    fresh = win("day", "America/Los_Angeles", "01:30")
    assert bounds(fresh, utc(2026, 11, 1, 9, 10)) == (
        utc(2026, 11, 1, 8, 30),
        utc(2026, 11, 2, 9, 30),
    )


def test_hourly_window_begins_at_half_past_every_hour_utc():
    hourly = win("hour", "UTC", "00:30")
    assert bounds(hourly, utc(2026, 5, 5, 10, 29)) == (
        utc(2026, 5, 5, 9, 30),
        utc(2026, 5, 5, 10, 30),
    )
    assert bounds(hourly, utc(2026, 5, 5, 10, 30)) == (
        utc(2026, 5, 5, 10, 30),
        utc(2026, 5, 5, 11, 30),
    )
    assert [e - s for s, e in walk(hourly, utc(2026, 1, 1), 48)] == [H] * 48


def test_hourly_window_across_the_fall_back_hour_is_one_window_of_two_hours():
    # 01:00 PDT starts a window; 01:00 PST starts nothing (01:00 was reached).
    hourly = win("hour", "America/Los_Angeles", "00:00")
    assert walk(hourly, utc(2026, 11, 1, 7), 3) == [
        (utc(2026, 11, 1, 7), utc(2026, 11, 1, 8)),  # 00:00 PDT
        (utc(2026, 11, 1, 8), utc(2026, 11, 1, 10)),  # 01:00 PDT .. 02:00 PST
        (utc(2026, 11, 1, 10), utc(2026, 11, 1, 11)),
    ]
    half = win("hour", "America/Los_Angeles", "00:30")  # 01:30 PDT .. 02:30 PST
    assert bounds(half, utc(2026, 11, 1, 9, 10)) == (
        utc(2026, 11, 1, 8, 30),
        utc(2026, 11, 1, 10, 30),
    )
    assert bounds(half, utc(2026, 11, 1, 9, 45)) == (
        utc(2026, 11, 1, 8, 30),
        utc(2026, 11, 1, 10, 30),
    )


def test_hourly_window_across_the_spring_gap():
    hourly = win("hour", "America/Los_Angeles", "00:00")  # 02:00 and 03:00 are one boundary
    assert bounds(hourly, utc(2026, 3, 8, 9, 59)) == (utc(2026, 3, 8, 9), utc(2026, 3, 8, 10))
    half = win("hour", "America/Los_Angeles", "00:30")  # 02:30 resolves to 03:00 PDT
    assert walk(half, utc(2026, 3, 8, 9, 30), 3) == [
        (utc(2026, 3, 8, 9, 30), utc(2026, 3, 8, 10)),
        (utc(2026, 3, 8, 10), utc(2026, 3, 8, 10, 30)),
        (utc(2026, 3, 8, 10, 30), utc(2026, 3, 8, 11, 30)),
    ]


def test_a_weekly_window_monday_09_00_berlin():
    weekly = win("week", "Europe/Berlin", "09:00", "Mon")
    assert bounds(weekly, utc(2026, 6, 3)) == (utc(2026, 6, 1, 7), utc(2026, 6, 8, 7))
    assert bounds(weekly, utc(2026, 6, 8, 7) - 1)[1] == utc(2026, 6, 8, 7)
    spring = bounds(weekly, utc(2026, 3, 29, 12))
    assert spring == (utc(2026, 3, 23, 8), utc(2026, 3, 30, 7))  # 167 h
    autumn = bounds(weekly, utc(2026, 10, 25, 12))
    assert autumn == (utc(2026, 10, 19, 7), utc(2026, 10, 26, 8))  # 169 h


def test_lord_howe_shifts_by_30_minutes():
    day = win("day", "Australia/Lord_Howe", "00:00")  # +11 in summer, +10:30 in winter
    assert bounds(day, utc(2026, 4, 5, 0)) == (
        utc(2026, 4, 4, 13),
        utc(2026, 4, 5, 13, 30),
    )  # 24.5 h
    assert bounds(day, utc(2026, 10, 4, 0)) == (
        utc(2026, 10, 3, 13, 30),
        utc(2026, 10, 4, 13),
    )  # 23.5 h
    hourly = win("hour", "Australia/Lord_Howe", "00:00")
    # Falls back at 02:00 to 01:30: the 01:00 window runs to 02:00 +10:30.
    assert bounds(hourly, utc(2026, 4, 4, 15, 10)) == (utc(2026, 4, 4, 14), utc(2026, 4, 4, 15, 30))
    # Springs from 02:00 to 02:30: 02:00 resolves to the transition, a 30-minute window.
    assert bounds(hourly, utc(2026, 10, 3, 15, 45)) == (
        utc(2026, 10, 3, 15, 30),
        utc(2026, 10, 3, 16),
    )


@pytest.mark.parametrize(
    ("tz", "midnight", "minute"),
    [
        ("Asia/Kolkata", utc(2026, 6, 30, 18, 30), 30),  # +05:30
        ("Asia/Kathmandu", utc(2026, 6, 30, 18, 15), 15),  # +05:45
        ("Asia/Kabul", utc(2026, 6, 30, 19, 30), 30),  # +04:30
    ],
)
def test_zones_with_offsets_off_the_hour(tz, midnight, minute):
    day, hourly = win("day", tz, "00:00"), win("hour", tz, "00:00")
    assert bounds(day, midnight + 1) == (midnight, midnight + DAY)
    noonish = utc(2026, 7, 1, 12, minute)
    assert bounds(hourly, noonish + 59 * 60_000) == (noonish, noonish + H)


def test_a_two_hour_shift_and_midnight_transitions():
    # Antarctica/Troll goes +00 -> +02 and back: days of 22 and 26 hours.
    troll = win("day", "Antarctica/Troll", "00:00")
    assert bounds(troll, utc(2026, 3, 29, 12)) == (utc(2026, 3, 29, 0), utc(2026, 3, 29, 22))
    assert bounds(troll, utc(2026, 10, 25, 12)) == (utc(2026, 10, 24, 22), utc(2026, 10, 26, 0))
    # America/Santiago springs from 24:00 to 01:00, so 00:00 is in the gap; and
    # falls back from 24:00 to 23:00, so the day before midnight is 25 hours.
    santiago = win("day", "America/Santiago", "00:00")
    assert bounds(santiago, utc(2026, 9, 6, 12)) == (utc(2026, 9, 6, 4), utc(2026, 9, 7, 3))
    assert bounds(santiago, utc(2026, 4, 4, 12)) == (utc(2026, 4, 4, 3), utc(2026, 4, 5, 4))


@pytest.mark.skipif(tzdata.IANA_VERSION != "2026f", reason="facts of tzdata 2026f")
def test_the_pinned_data_decides_not_the_hosts():
    # In tzdata 2026f British Columbia keeps -07 from 2026 on; older data (the
    # host's 2025b here) still falls back on Nov 1.
    day = win("day", "America/Vancouver", "00:00")
    assert bounds(day, utc(2026, 11, 1, 12)) == (utc(2026, 11, 1, 7), utc(2026, 11, 2, 7))


def test_zones_come_from_the_tzdata_package_whatever_the_search_path():
    host = "/usr/share/zoneinfo"
    saved = zoneinfo.TZPATH
    zone.cache_clear()
    try:
        zoneinfo.reset_tzpath(to=[host])  # as if the daemon forgot reset_tzpath
        for name in sorted(zone_names()):
            package = resources.files("tzdata").joinpath("zoneinfo", *name.split("/"))
            assert zone(name)._file_bytes == package.read_bytes(), name
        # Names only a host has are unknown zones.
        for host_only in ("posix/UTC", "right/UTC", "localtime", "posixrules", f"{host}/UTC"):
            with pytest.raises(Refused) as info:
                win("day", host_only, "00:00")
            assert info.value.details["field"] == "window.tz"
    finally:
        zoneinfo.reset_tzpath(to=saved)
        zone.cache_clear()


def test_bounds_memoizes_the_current_window(monkeypatch):
    day = win("day", "Europe/Berlin", "06:00")
    first = bounds(day, utc(2026, 6, 1, 12))
    calls = []
    real = window_module._resolve
    monkeypatch.setattr(window_module, "_resolve", lambda *a: calls.append(a) or real(*a))
    for t in (first[0], first[0] + 1, first[1] - 1, utc(2026, 6, 1, 12)):
        assert bounds(day, t) == first
    assert calls == []
    assert bounds(day, first[1]) == (first[1], first[1] + DAY)  # rolls over: one resolve
    assert len(calls) == 1
    assert bounds(day, first[0] - 1) == (first[0] - DAY, first[0])  # back again: computed


# -- seconds, minutes and months --------------------------------------------------


@pytest.mark.parametrize(("period", "tick"), [("second", 1000), ("minute", 60_000)])
def test_second_and_minute_windows_tick_with_the_clock_through_a_fall_back(period, tick):
    """Each elapsed second (minute) is one window, even while the wall clock
    repeats 01:00-02:00 in Los Angeles (2026-11-01): never a window of an hour."""
    window = win(period, "America/Los_Angeles", "00:00")
    fall_back = utc(2026, 11, 1, 9)  # 02:00 PDT becomes 01:00 PST
    spans = walk(window, fall_back - 3 * tick + 1, 7)
    assert spans[0] == (fall_back - 3 * tick, fall_back - 2 * tick)
    assert all(end - start == tick for start, end in spans)
    assert [s for s, _ in spans][3] == fall_back


def test_a_month_window_follows_the_zones_calendar_months():
    month = win("month", "UTC", "00:00")
    lengths = [(end - start) // DAY for start, end in walk(month, utc(2026, 1, 1), 12)]
    assert lengths == [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    assert bounds(month, utc(2028, 2, 10)) == (utc(2028, 2, 1), utc(2028, 3, 1))  # leap: 29


def test_a_pacific_month_spans_the_spring_change_one_hour_short():
    """March 2026 in Los Angeles: 00:00 PST on the 1st to 00:00 PDT on April 1st."""
    month = win("month", "America/Los_Angeles", "00:00")
    assert bounds(month, utc(2026, 3, 20)) == (utc(2026, 3, 1, 8), utc(2026, 4, 1, 7))
    assert bounds(month, utc(2026, 3, 1, 7, 59)) == (utc(2026, 2, 1, 8), utc(2026, 3, 1, 8))


def test_a_month_starting_in_the_repeated_hour_starts_at_its_first_occurrence():
    """November 2026 in Los Angeles begins on its fall-back day: a start of 01:30
    is 01:30 PDT, and 01:45 PST (the wall clock's second 01:45) is November's."""
    month = win("month", "America/Los_Angeles", "01:30")
    november = (utc(2026, 11, 1, 8, 30), utc(2026, 12, 1, 9, 30))
    assert bounds(month, utc(2026, 11, 1, 8, 29))[1] == november[0]
    assert bounds(month, utc(2026, 11, 1, 9, 45)) == november
    assert next_boundary(month, november[0]) == november[1]


def test_a_month_start_round_trips_and_validates():
    doc = {"period": "month", "tz": "Europe/Berlin", "start": "06:00"}
    assert parse_window(doc).to_dict() == doc
    assert parse_window(doc).period_ms == 31 * DAY


# -- validation ---------------------------------------------------------------------

GOOD: dict[str, Any] = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (None, "window"),
        ([], "window"),
        ("day", "window"),
        ({**GOOD, "weekdays": "Mon"}, "window"),
        ({**GOOD, "zone": "UTC"}, "window"),
        ({"tz": "UTC", "start": "00:00"}, "window.period"),
        ({**GOOD, "period": "fortnight"}, "window.period"),
        ({**GOOD, "period": "minute", "start": "00:30"}, "window.start"),
        ({**GOOD, "period": "second", "start": "01:00"}, "window.start"),
        ({**GOOD, "period": "month", "weekday": "Mon"}, "window.weekday"),
        ({**GOOD, "period": "Day"}, "window.period"),
        ({**GOOD, "period": ["day"]}, "window.period"),
        ({"period": "day", "start": "00:00"}, "window.tz"),
        ({**GOOD, "tz": "Mars/Olympus"}, "window.tz"),
        ({**GOOD, "tz": "america/los_angeles"}, "window.tz"),
        ({**GOOD, "tz": "../../../../etc/passwd"}, "window.tz"),
        ({**GOOD, "tz": "/usr/share/zoneinfo/UTC"}, "window.tz"),
        ({**GOOD, "tz": ""}, "window.tz"),
        ({**GOOD, "tz": 0}, "window.tz"),
        ({**GOOD, "tz": ["UTC"]}, "window.tz"),
        ({"period": "day", "tz": "UTC"}, "window.start"),
        ({**GOOD, "start": "24:00"}, "window.start"),
        ({**GOOD, "start": "9:00"}, "window.start"),
        ({**GOOD, "start": "09:60"}, "window.start"),
        ({**GOOD, "start": "0900"}, "window.start"),
        ({**GOOD, "start": "09:00:00"}, "window.start"),
        ({**GOOD, "start": "09:00\n"}, "window.start"),
        ({**GOOD, "start": " 09:00"}, "window.start"),
        ({**GOOD, "start": "\uff10\uff19:00"}, "window.start"),  # fullwidth digits
        ({**GOOD, "start": 900}, "window.start"),
        ({**GOOD, "period": "hour", "start": "01:30"}, "window.start"),
        ({**GOOD, "weekday": "Mon"}, "window.weekday"),
        ({**GOOD, "period": "hour", "weekday": "Mon"}, "window.weekday"),
        ({**GOOD, "period": "week"}, "window.weekday"),
        ({**GOOD, "period": "week", "weekday": None}, "window.weekday"),
        ({**GOOD, "period": "week", "weekday": "Monday"}, "window.weekday"),
        ({**GOOD, "period": "week", "weekday": "mon"}, "window.weekday"),
        ({**GOOD, "period": "week", "weekday": 1}, "window.weekday"),
        ({**GOOD, "period": "week", "weekday": ["Mon"]}, "window.weekday"),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(doc, field):
    with pytest.raises(Refused) as info:
        parse_window(doc)
    assert (info.value.code, info.value.details) == ("invalid_argument", {"field": field})


def test_an_unknown_field_suggests_the_known_one():
    with pytest.raises(Refused) as info:
        parse_window({**GOOD, "weekdays": "Mon"})
    assert "did you mean 'weekday'" in info.value.message


def test_constructing_a_window_validates_it_too():
    with pytest.raises(Refused) as info:
        Window("day", "Mars/Olympus", "00:00")
    assert info.value.details == {"field": "window.tz"}


@pytest.mark.parametrize(
    "doc",
    [
        GOOD,
        {"period": "hour", "tz": "UTC", "start": "00:30"},
        {"period": "week", "tz": "Europe/Berlin", "start": "09:00", "weekday": "Mon"},
        {"period": "day", "tz": "Asia/Kathmandu", "start": "23:59"},
    ],
)
def test_a_window_round_trips_to_the_wire_shape(doc):
    window = parse_window(doc)
    assert window.to_dict() == doc
    assert parse_window(window.to_dict()) == window
    if "weekday" not in doc:
        assert parse_window({**doc, "weekday": None}) == window  # null is absent


# -- every zone against the oracle --------------------------------------------------

SPAN = (utc(2025, 11, 15), utc(2028, 2, 20))  # 2026 and 2027, with a month's margin
YEARS = (dt.date(2026, 1, 1), dt.date(2028, 1, 1))
SCAN_S = 86_400  # transitions are weeks apart (asserted); a missed pair fails the comparison
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


@pytest.fixture(scope="module", autouse=True)
def _tzdata_only() -> Iterator[None]:
    """The oracle's zoneinfo reads the pinned tzdata package, never the host."""
    saved = zoneinfo.TZPATH
    zoneinfo.reset_tzpath(to=[])
    yield
    zoneinfo.reset_tzpath(to=saved)


class Oracle:
    """One zone over :data:`SPAN`: its transitions and offsets, from zoneinfo alone."""

    def __init__(self, name: str) -> None:
        assert zoneinfo.TZPATH == ()
        zi = zoneinfo.ZoneInfo.no_cache(name)

        def offset_ms(second: int) -> int:
            off = dt.datetime.fromtimestamp(second, zi).utcoffset()
            assert off is not None
            return int(off.total_seconds()) * 1000

        lo_s, hi_s = SPAN[0] // 1000, SPAN[1] // 1000
        #: Segment i is [starts[i], starts[i+1]) in ms at offsets[i].
        self.starts, self.offsets = [SPAN[0]], [offset_ms(lo_s)]
        for second in range(lo_s + SCAN_S, hi_s + SCAN_S, SCAN_S):
            if offset_ms(second) != self.offsets[-1]:
                a, b = second - SCAN_S, second  # offset changes in (a, b]
                while b - a > 1:
                    mid = (a + b) // 2
                    a, b = (mid, b) if offset_ms(mid) == self.offsets[-1] else (a, mid)
                self.starts.append(b * 1000)
                self.offsets.append(offset_ms(b))
        changes = self.starts[1:]
        assert all(b - a > 2 * SCAN_S * 1000 for a, b in itertools.pairwise(changes)), name
        # The latest wall time reached by the end of each segment (ms, local scale).
        self.reach: list[float] = []
        top = float("-inf")
        for i, start in enumerate(self.starts[1:]):
            top = max(top, start - 1 + self.offsets[i])
            self.reach.append(top)
        self.reach.append(float("inf"))

    @property
    def transitions(self) -> list[tuple[int, int, int]]:
        """``(instant, offset before, offset after)`` of each transition in the span."""
        return [
            (self.starts[i], self.offsets[i - 1], self.offsets[i])
            for i in range(1, len(self.starts))
        ]

    def wall(self, instant: int) -> int:
        i = bisect.bisect_right(self.starts, instant) - 1
        return instant + self.offsets[i]

    def boundary(self, label: int) -> int:
        """The first instant whose local wall time is ``label`` or later."""
        i = bisect.bisect_left(self.reach, label)
        at = max(self.starts[i], label - self.offsets[i])
        assert SPAN[0] < at < SPAN[1]
        return at


@functools.cache
def oracle(name: str) -> Oracle:
    return Oracle(name)


def label(day: dt.date, start: str) -> int:
    """A local wall time, as ms since 1970-01-01 00:00 local."""
    hh, mm = start.split(":")
    return (day.toordinal() - _EPOCH_ORDINAL) * DAY + int(hh) * H + int(mm) * 60_000


def labels(
    period: str, start: str, weekday: str | None, first: dt.date, last: dt.date
) -> list[int]:
    """Every label of a window from local day ``first`` to ``last``, in order."""
    if period == "hour":
        return [label(first, start) + i * H for i in range(((last - first).days + 1) * 24)]
    if period == "month":
        days = (first + dt.timedelta(days=i) for i in range((last - first).days + 1))
        return [label(day, start) for day in days if day.day == 1]
    step = 1
    if period == "week":
        step = 7
        while WEEKDAYS[first.weekday()] != weekday:
            first += dt.timedelta(days=1)
    span = (last - first).days + 1
    return [label(first + dt.timedelta(days=i), start) for i in range(0, span, step)]


def check_walk(window: Window, zone_oracle: Oracle, window_labels: list[int]) -> int:
    """Walk ``window`` across the labels' boundaries and compare with the oracle.

    The windows must tile time (each starts where the previous ended) and
    their boundaries must be exactly the oracle's distinct boundaries. Where a
    window is not its nominal length, or holds a transition, membership is
    also checked at its edges and around the transition with a fresh memo.
    """
    expected = sorted({zone_oracle.boundary(at) for at in window_labels})
    got = [expected[0]]
    start, end = bounds(window, expected[0])
    assert start == expected[0]
    while end <= expected[-1]:
        got.append(end)
        start, end = bounds(window, end)
        assert start == got[-1]  # no gap, no overlap
    assert got == expected, window
    odd = {i for i, (s, e) in enumerate(itertools.pairwise(expected)) if e - s != window.period_ms}
    for at, _, _ in zone_oracle.transitions:
        if expected[0] <= at < expected[-1]:
            odd.add(bisect.bisect_right(expected, at) - 1)
    for i in sorted(odd):
        s, e = expected[i], expected[i + 1]
        probes = [s, e - 1, *(p for at, _, _ in zone_oracle.transitions for p in (at - 1, at))]
        for probe in (p for p in probes if s <= p < e):
            fresh = Window(window.period, window.tz, window.start, window.weekday)
            assert bounds(fresh, probe) == (s, e), (window, probe)
    return len(expected)


def hhmm(wall_ms: int) -> str:
    minutes = wall_ms % DAY // 60_000
    return f"{minutes // 60:02}:{minutes % 60:02}"


def edge_starts(zone_oracle: Oracle) -> set[str]:
    """Start times at the edges and middle of each gap or repeated stretch."""
    out = set()
    for at, before, after in zone_oracle.transitions:
        a, b = at + before, at + after  # the wall clock jumps from a to b
        out |= {hhmm(a), hhmm(b), hhmm((a + b) // 2)}
    return out


@functools.cache
def zone_groups() -> list[list[str]]:
    """Every zone name, grouped by identical data (tzdata stores a link as a copy)."""
    groups: dict[bytes, list[str]] = {}
    for name in sorted(zoneinfo.available_timezones()):
        data = resources.files("tzdata").joinpath("zoneinfo", *name.split("/")).read_bytes()
        groups.setdefault(data, []).append(name)
    return list(groups.values())


def test_every_zone_name_is_accepted_and_loads_its_own_data():
    assert set(zoneinfo.available_timezones()) == zone_names()  # the same pinned list
    instant = utc(2026, 7, 1, 12)
    for group in zone_groups():
        data = zone(group[0])._file_bytes
        expected = bounds(win("day", group[0], "00:00"), instant)
        for name in group:
            assert zone(name)._file_bytes == data
            assert bounds(win("day", name, "00:00"), instant) == expected


ODD_STARTS = ("13:37", "23:59", "06:45", "12:00", "00:01")


def transition_days(zone_oracle: Oracle) -> list[dt.date]:
    """The local day on which each transition happens."""
    return [
        dt.date.fromordinal(_EPOCH_ORDINAL + (at + before) // DAY)
        for at, before, _ in zone_oracle.transitions
    ]


def test_day_windows_in_every_zone_for_two_years():
    # One walk per distinct zone data (same bytes, same windows: see the test above).
    total = 0
    for n, (name, *_) in enumerate(zone_groups()):
        zone_oracle = oracle(name)
        starts = {("00:00", *ODD_STARTS)[n % 6]}  # a fixed offset needs no more
        if zone_oracle.transitions:
            starts |= {"00:00", ODD_STARTS[n % len(ODD_STARTS)]}
        for start in starts:
            window_labels = labels("day", start, None, *YEARS)
            total += check_walk(win("day", name, start), zone_oracle, window_labels)
    assert total > len(zone_groups()) * 730


def test_day_windows_starting_at_the_edges_of_every_transition():
    # Starts at, inside and just past each gap or repeated stretch, every zone.
    for name, *_ in zone_groups():
        zone_oracle = oracle(name)
        for day in transition_days(zone_oracle):
            first, last = day - dt.timedelta(days=3), day + dt.timedelta(days=3)
            for start in edge_starts(zone_oracle):
                window_labels = labels("day", start, None, first, last)
                check_walk(win("day", name, start), zone_oracle, window_labels)


def test_week_windows_in_every_zone_for_two_years():
    for n, (name, *_) in enumerate(zone_groups()):
        zone_oracle = oracle(name)
        cases = {(WEEKDAYS[n % 7], ODD_STARTS[n % len(ODD_STARTS)])}
        for day in transition_days(zone_oracle):  # the week of each transition
            cases |= {(WEEKDAYS[day.weekday()], s) for s in edge_starts(zone_oracle) | {"00:00"}}
        for weekday, start in cases:
            window_labels = labels("week", start, weekday, *YEARS)
            check_walk(win("week", name, start, weekday), zone_oracle, window_labels)


def test_month_windows_in_every_zone_for_two_years():
    """Calendar months of every zone, starting at midnight and at the edges of a
    transition (which falls on a month's first day in some zones and years)."""
    total = 0
    for n, (name, *_) in enumerate(zone_groups()):
        zone_oracle = oracle(name)
        starts = {"00:00", ODD_STARTS[n % len(ODD_STARTS)]}
        starts |= {s for day in transition_days(zone_oracle) if day.day == 1
                   for s in edge_starts(zone_oracle)}  # fmt: skip
        for start in starts:
            window_labels = labels("month", start, None, *YEARS)
            total += check_walk(win("month", name, start), zone_oracle, window_labels)
    assert total >= len(zone_groups()) * 2 * 24


def test_hour_windows_around_every_transition_of_every_zone():
    for name, *_ in zone_groups():
        zone_oracle = oracle(name)
        minutes = {"00:00", "00:30"} | {f"00:{s[3:]}" for s in edge_starts(zone_oracle)}
        for day in transition_days(zone_oracle):
            first, last = day - dt.timedelta(days=1), day + dt.timedelta(days=1)
            for start in minutes:
                window_labels = labels("hour", start, None, first, last)
                check_walk(win("hour", name, start), zone_oracle, window_labels)


def oracle_bounds(window: Window, instant: int) -> tuple[int, int]:
    """The window containing ``instant``, from the oracle's boundaries around it."""
    zone_oracle = oracle(window.tz)
    day = dt.date.fromordinal(_EPOCH_ORDINAL + zone_oracle.wall(instant) // DAY)
    reach = dt.timedelta(days=reach_days(window.period))
    around = labels(window.period, window.start, window.weekday, day - reach, day + reach)
    cuts = sorted({zone_oracle.boundary(at) for at in around})
    i = bisect.bisect_right(cuts, instant)
    return cuts[i - 1], cuts[i]


def reach_days(period: str) -> int:
    """Local days either side of an instant that hold the labels around it."""
    return 40 if period == "month" else 8


def local_ms(zi: zoneinfo.ZoneInfo, instant: int) -> int:
    """The wall time at an instant, as ms since 1970-01-01 00:00 local."""
    wall = dt.datetime.fromtimestamp(instant // 1000, zi).replace(tzinfo=None)
    return (wall - dt.datetime(1970, 1, 1)) // dt.timedelta(milliseconds=1) + instant % 1000


windows = st.builds(
    lambda period, tz, hh, mm, weekday: Window(
        period,
        tz,
        f"{0 if period == 'hour' else hh:02}:{mm:02}",
        weekday if period == "week" else None,
    ),
    st.sampled_from(["hour", "day", "week", "month"]),
    st.sampled_from(sorted(zone_names())),
    st.integers(0, 23),
    st.sampled_from([0, 0, 15, 30, 45, 59]) | st.integers(0, 59),
    st.sampled_from(WEEKDAYS),
)


@settings(max_examples=300, deadline=None)
@given(windows, st.integers(utc(2026, 1, 2), utc(2027, 12, 30)), st.data())
def test_bounds_of_any_instant_match_the_oracle_and_the_rule(window, instant, data):
    transitions = oracle(window.tz).transitions
    if transitions and data.draw(st.booleans(), label="near a transition"):
        at, _, _ = data.draw(st.sampled_from(transitions))
        instant = at + data.draw(st.integers(-2 * DAY, 2 * DAY))
    start, end = bounds(window, instant)
    assert start <= instant < end
    assert (start, end) == oracle_bounds(window, instant)
    assert next_boundary(window, instant) == end
    # Each boundary is where the wall clock, read by zoneinfo, first reaches a label:
    # one millisecond before, it reads less than a label it reads at the boundary.
    zi = zoneinfo.ZoneInfo.no_cache(window.tz)
    for at in (start, end):
        before, after = (local_ms(zi, t) for t in (at - 1, at))
        day = dt.date.fromordinal(_EPOCH_ORDINAL + before // DAY)
        reach = dt.timedelta(days=reach_days(window.period))
        around = labels(window.period, window.start, window.weekday, day, day + reach)
        assert before < min(x for x in around if x > before) <= after
    # The memo answers for any instant of the window, and only for those.
    again = data.draw(st.integers(start, end - 1))
    assert bounds(window, again) == (start, end)
    assert bounds(window, end)[0] == end
    assert bounds(window, start - 1)[1] == start
