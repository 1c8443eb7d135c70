"""The short text of a stacked window: ``N/PERIOD[@ZONE][,start=HH:MM][,weekday=Ddd]``.

What an operator types on the command line (``sluice queue budget set --window``)
and in the board's policy editor, and what both show back:

- ``10/s``: 10 a second (UTC: the default zone);
- ``100000/day@America/New_York``: 100,000 a day from midnight in New York;
- ``500/h@UTC,start=00:30``: 500 an hour from half past;
- ``2000/week@Europe/Berlin,weekday=Fri,start=09:00``: a week from Friday 09:00;
- ``1000000/month@Asia/Tokyo``: a calendar month of Tokyo.

Periods: ``s``/``sec``/``second``, ``m``/``min``/``minute``, ``h``/``hour``,
``d``/``day``, ``w``/``week``, ``mo``/``month`` (``m`` is a minute, as in
``enqueue_rate``). A week starts on Monday unless ``weekday`` says otherwise.
Only the shape is checked here; the policy's decoder
(:func:`actors.claim_windows.parse_windows`) judges the values.
"""

from __future__ import annotations

from typing import Any

UNITS = {
    "s": "second", "sec": "second", "second": "second",
    "m": "minute", "min": "minute", "minute": "minute",
    "h": "hour", "hour": "hour", "d": "day", "day": "day",
    "w": "week", "week": "week", "mo": "month", "month": "month",
}  # fmt: skip
#: The name each period is written back with.
SHORT = {"second": "s", "minute": "min", "hour": "h", "day": "day", "week": "week",
         "month": "month"}  # fmt: skip


def parse_spec(text: str) -> dict[str, Any]:
    """One spec as a ``windows`` element; ValueError saying what is wrong."""
    head, *options = text.strip().split(",")
    count, slash, rest = head.partition("/")
    unit, at, tz = rest.partition("@")
    if not slash or not count.isascii() or not count.isdigit():
        raise ValueError(f"must be N/PERIOD[@ZONE], e.g. 10/s or 100000/day@America/New_York; "
                         f"got {text!r}")  # fmt: skip
    period = UNITS.get(unit)
    if period is None:
        raise ValueError(f"unknown period {unit!r} in {text!r}: s, m, h, d, w, mo (or second, "
                         "minute, hour, day, week, month)")  # fmt: skip
    window: dict[str, Any] = {"max_claims": int(count), "period": period,
                              "tz": tz if at else "UTC"}  # fmt: skip
    for option in options:
        key, eq, value = option.partition("=")
        if key not in ("start", "weekday") or not eq or key in window:
            raise ValueError(f"bad option {option!r} in {text!r}: start=HH:MM or weekday=Mon..Sun")
        window[key] = value
    if period == "week":
        window.setdefault("weekday", "Mon")
    return window


def to_spec(window: dict[str, Any]) -> str:
    """A ``windows`` element written as a spec (what :func:`parse_spec` reads back)."""
    period = str(window.get("period"))
    text = f"{window.get('max_claims')}/{SHORT.get(period, period)}@{window.get('tz')}"
    if window.get("start", "00:00") != "00:00":
        text += f",start={window['start']}"
    if window.get("weekday"):
        text += f",weekday={window['weekday']}"
    return text
