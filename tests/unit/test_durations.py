"""daemon/durations.py: "500ms", "30s", "5m", "2h", "7d" or integer milliseconds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.durations import format_duration_ms, parse_duration_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("7d", 604_800_000),
        ("0s", 0),
        (" 10 s ", 10_000),
        (1500, 1500),
        (0, 0),
    ],
)
def test_parses(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    "bad",
    [
        "5",
        "5w",
        "-5s",
        "1.5s",
        "s",
        "",
        "5 minutes",
        "5M",
        "5S",
        -1,
        1.5,
        None,
        True,
        False,
        [],
        {"s": 5},
    ],
)
def test_refuses(bad):
    with pytest.raises(ValueError, match="duration"):
        parse_duration_ms(bad)


def test_message_shows_the_bad_value():
    with pytest.raises(ValueError, match="got '5w'"):
        parse_duration_ms("5w")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0ms"),
        (1, "1ms"),
        (1_500, "1500ms"),
        (30_000, "30s"),
        (90_000, "90s"),
        (3_600_000, "1h"),
        (86_400_000, "1d"),
        (5_400_000, "90m"),
    ],
)
def test_formats_with_the_largest_exact_unit(ms, text):
    assert format_duration_ms(ms) == text


@given(st.integers(min_value=0, max_value=10**12))
def test_format_then_parse_round_trips(ms):
    assert parse_duration_ms(format_duration_ms(ms)) == ms
