"""Durations in the config file: integer milliseconds or strings like "30s"."""

from __future__ import annotations

import re

_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PATTERN = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")


def parse_duration_ms(value: object) -> int:
    """``"500ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"7d"`` or an int of ms -> ms."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s or an integer of milliseconds")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return value
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match:
            return int(match[1]) * _UNITS[match[2]]
    raise ValueError(
        f"expected a duration such as 500ms, 30s, 5m, 2h or 7d, or integer milliseconds; "
        f"got {value!r}"
    )


def format_duration_ms(ms: int) -> str:
    """The shortest exact unit string for ``ms`` (``3600000`` -> ``"1h"``)."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
