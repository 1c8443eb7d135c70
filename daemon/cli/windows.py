"""``--window N/PERIOD[@ZONE][,start=HH:MM][,weekday=Ddd]``: stacked windows on the
command line (``sluice queue budget set``), and how they read back.

A spec is a cap, a period and optionally a zone, a start and a weekday:

- ``10/s``: 10 a second (UTC: the default zone);
- ``100000/day@America/New_York``: 100,000 a day from midnight in New York;
- ``500/hour@UTC,start=00:30``: 500 an hour from half past;
- ``2000/week@Europe/Berlin,weekday=Mon,start=09:00``: a week from Monday 09:00;
- ``1000000/month@Asia/Tokyo``: a calendar month of Tokyo.

Periods: ``s``/``sec``/``second``, ``m``/``min``/``minute``, ``h``/``hour``,
``d``/``day``, ``w``/``week``, ``mo``/``month``. A week starts on Monday unless
``weekday`` says otherwise. The option repeats, one window per period; the
daemon checks the rest (``invalid_argument`` naming ``windows[i].<field>``).
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from typing import Any

from actors.claim_windows import MAX_CLAIMS
from actors.window import WEEKDAYS

START_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")

UNITS = {
    "s": "second", "sec": "second", "second": "second",
    "m": "minute", "min": "minute", "minute": "minute",
    "h": "hour", "hour": "hour", "d": "day", "day": "day",
    "w": "week", "week": "week", "mo": "month", "month": "month",
}  # fmt: skip
#: The short names of read-back (``3/s · 5/min``).
SHORT = {"second": "s", "minute": "min", "hour": "hour", "day": "day", "week": "week",
         "month": "month"}  # fmt: skip


def zone_name(text: str) -> str:
    """An argparse type: an IANA zone the daemon's embedded database knows."""
    from actors.window import zone_names  # the daemon's own list (pinned tzdata)

    names = zone_names()
    if text not in names:
        hint = difflib.get_close_matches(text, sorted(names), n=1)
        maybe = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise argparse.ArgumentTypeError(f"unknown zone {text!r}{maybe}")
    return text


def start_time(text: str) -> str:
    """An argparse type: ``HH:MM``, 24-hour."""
    if not START_RE.match(text):
        raise argparse.ArgumentTypeError(f"must be HH:MM, 24-hour, got {text!r}")
    return text


def window_spec(text: str) -> dict[str, Any]:
    """An argparse type: one ``--window`` spec as a ``windows`` element."""
    head, *options = text.split(",")
    count, slash, rest = head.partition("/")
    unit, at, tz = rest.partition("@")
    if not slash or not count.isdigit() or not 0 <= int(count) <= MAX_CLAIMS:
        raise argparse.ArgumentTypeError(
            f"must be N/PERIOD[@ZONE] with N from 0 to {MAX_CLAIMS}, e.g. 10/s or "
            f"100000/day@America/New_York; got {text!r}"
        )
    period = UNITS.get(unit)
    if period is None:
        raise argparse.ArgumentTypeError(
            f"unknown period {unit!r} in {text!r}: s, m, h, d, w, mo (or second, minute, "
            "hour, day, week, month)"
        )
    window: dict[str, Any] = {"max_claims": int(count), "period": period,
                              "tz": zone_name(tz) if at else "UTC"}  # fmt: skip
    for option in options:
        key, eq, value = option.partition("=")
        if key == "start" and eq and START_RE.match(value):
            window["start"] = value
        elif key == "weekday" and eq and value in WEEKDAYS:
            window["weekday"] = value
        else:
            raise argparse.ArgumentTypeError(
                f"bad option {option!r} in {text!r}: start=HH:MM or weekday=Mon..Sun"
            )
    if period == "week":
        window.setdefault("weekday", "Mon")
    return window


def describe_windows(windows: list[dict[str, Any]]) -> str:
    """``3/s UTC · 100000/day from 00:00 America/New_York``."""
    parts = []
    for w in windows:
        start = w.get("start", "00:00")
        text = f"{w.get('max_claims')}/{SHORT.get(str(w.get('period')), w.get('period'))}"
        if w.get("period") == "week":
            text += f" from {w.get('weekday')} {start}"
        elif w.get("period") == "hour" and start != "00:00":
            text += f" from :{start[3:]}"
        elif w.get("period") in ("day", "month") and start != "00:00":
            text += f" from {start}"
        parts.append(f"{text} {w.get('tz')}")
    return " · ".join(parts)


def usage_parts(windows: list[dict[str, Any]], when: Callable[[int, str], str]) -> list[str]:
    """``2 of 3 this second`` and when a used-up one resets, one per window of an
    ``admission_status`` entry; ``when(ms, zone)`` writes an instant."""
    parts = []
    for w in windows:
        text = f"{w.get('used')} of {w.get('max_claims')} this {w.get('period')}"
        if w.get("remaining") == 0 and w.get("window_resets_at") is not None:
            text += f" (resets {when(w['window_resets_at'], str(w.get('tz')))})"
        parts.append(text)
    return parts
