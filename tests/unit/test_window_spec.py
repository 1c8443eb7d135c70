"""actors/window_spec.py: the short text of a stacked window, both ways."""

from __future__ import annotations

import pytest

from actors.claim_windows import parse_windows
from actors.window_spec import parse_spec, to_spec


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("10/s", {"max_claims": 10, "period": "second", "tz": "UTC"}),
        ("5/m@UTC", {"max_claims": 5, "period": "minute", "tz": "UTC"}),
        ("100000/day@America/New_York",
         {"max_claims": 100000, "period": "day", "tz": "America/New_York"}),
        ("500/h@UTC,start=00:30", {"max_claims": 500, "period": "hour", "tz": "UTC",
                                   "start": "00:30"}),
        ("2000/w@Europe/Berlin,weekday=Fri,start=09:00",
         {"max_claims": 2000, "period": "week", "tz": "Europe/Berlin", "weekday": "Fri",
          "start": "09:00"}),
        ("7/week", {"max_claims": 7, "period": "week", "tz": "UTC", "weekday": "Mon"}),
        ("1000000/mo@Asia/Tokyo", {"max_claims": 1000000, "period": "month", "tz": "Asia/Tokyo"}),
    ],
)  # fmt: skip
def test_a_spec_reads_as_a_windows_element_and_writes_back(text, window):
    assert parse_spec(text) == window
    (decoded,) = parse_windows([window])  # the policy's decoder takes it as it is
    assert parse_spec(to_spec(decoded.to_dict())) == window


@pytest.mark.parametrize(
    ("text", "says"),
    [("10", "N/PERIOD"), ("ten/s", "N/PERIOD"), ("-1/s", "N/PERIOD"),
     ("\u0661\u0660/s", "N/PERIOD"),  # Arabic-Indic digits: isdigit() alone would take them
     ("10/fortnight", "unknown period"), ("10/s,start", "bad option"),
     ("10/s,tz=UTC", "bad option"), ("10/d,start=01:00,start=02:00", "bad option")],
)  # fmt: skip
def test_a_bad_spec_says_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        parse_spec(text)
