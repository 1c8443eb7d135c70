"""``--window N/PERIOD[@ZONE][,start=HH:MM][,weekday=Ddd]``: stacked windows on the
command line (``sluice queue budget set``), and how they read back; the syntax
is :mod:`actors.window_spec`'s. The option repeats, one window per period. The
CLI refuses itself (exit 2) a malformed spec, a cap out of range, an unknown
zone (with a "did you mean"), a bad start or weekday; the daemon checks the
rest (``invalid_argument`` naming ``windows[i].<field>``, exit 1). Also the
zone and start types of the single-window options.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from typing import Any

from actors.window_spec import parse_spec, to_spec

#: The daemon's bounds (``actors.claim_windows``, ``actors.window``), restated so
#: that the CLI does not load the window math (pendulum) to start.
MAX_CLAIMS = 1_000_000
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
START_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


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
    try:
        window = parse_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if window["max_claims"] > MAX_CLAIMS:
        raise argparse.ArgumentTypeError(f"at most {MAX_CLAIMS} claims a window, got {text!r}")
    zone_name(window["tz"])
    if "start" in window:
        start_time(window["start"])
    if window.get("weekday", "Mon") not in WEEKDAYS:
        raise argparse.ArgumentTypeError(f"weekday is Mon..Sun, got {window['weekday']!r}")
    return window


def describe_windows(windows: list[dict[str, Any]]) -> str:
    """``10/s@UTC · 100000/day@America/New_York``: the specs ``--window`` takes."""
    return " · ".join(to_spec(w) for w in windows)


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
