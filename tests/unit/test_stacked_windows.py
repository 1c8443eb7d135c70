"""Stacked windows (issue 18, part 4) through the real core on MockClock: a claim
needs room in every window and is charged to all of them; a deferral names the
window that holds it back, with the latest reopening of the exhausted ones.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.errors import Refused
from actors.policy import parse_policy
from daemon.core import Core
from tests.unit.harness import WALL0, call, running_core

SECOND, MINUTE, HOUR = 1000, 60_000, 3_600_000
#: The first whole minute after the harness's start instant.
MINUTE0 = WALL0 - WALL0 % MINUTE + MINUTE
LA = ZoneInfo("America/Los_Angeles")


def per(n: int, period: str, tz: str = "UTC", **extra: Any) -> dict[str, Any]:
    return {"max_claims": n, "period": period, "tz": tz, **extra}


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


async def at(core: Core, instant_ms: int) -> None:
    """Let virtual (and so wall) time run to ``instant_ms``."""
    await trio.sleep((instant_ms - core.clock.now_ms()) / 1000)  # virtual time (autojump_clock)


async def fill(core: Core, n: int) -> None:
    await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t"} for _ in range(n)])


async def claim(core: Core, n: int = 10, **kw: Any) -> dict[str, Any]:
    return await call(core, "claim_next", queues=["q"], max=n, lease_ms=86_400_000, **kw)


async def claimed(core: Core, n: int = 10) -> int:
    return len((await claim(core, n))["jobs"])


def held_by(held: dict[str, Any]) -> tuple[str, int]:
    """The holding window's period and its reopening, from an exact UTC deferral."""
    assert (held["reason"], held["exact"], held["window"]["tz"]) == (
        "window_exhausted", True, "UTC")  # fmt: skip
    return held["window"]["period"], held["next_eligible_at"]


async def windows_status(core: Core) -> list[dict[str, Any]]:
    return (await call(core, "admission_status", queue="q"))["queues"][0]["windows"]


async def test_three_a_second_and_five_a_minute(tmp_path, autojump_clock):
    """Over one minute exactly 5 claims, never more than 3 in a second; the second
    holds first, then the minute, each named with its exact reopening."""
    async with running_core(tmp_path, wall_start_ms=MINUTE0) as core:
        await call(core, "policy_set", queue="q", windows=[per(3, "second"), per(5, "minute")])
        await fill(core, 20)
        per_second: dict[int, int] = {}
        answer = await claim(core)
        assert len(answer["jobs"]) == 3
        admission = answer["jobs"][-1]["admission"]  # the tightest window's fields, then each
        assert (admission["remaining"], admission["window_resets_at"]) == (0, MINUTE0 + SECOND)
        assert [(w["period"], w["used"], w["remaining"]) for w in admission["windows"]] == [
            ("second", 3, 0), ("minute", 3, 2)]  # fmt: skip
        (held,) = (await claim(core))["deferred"]
        assert held_by(held) == ("second", MINUTE0 + SECOND)
        per_second[0] = 3
        for step in range(1, 240):  # every 250 ms of the minute
            now = MINUTE0 + step * 250
            await at(core, now)
            got = await claimed(core)
            second = (now - MINUTE0) // SECOND
            per_second[second] = per_second.get(second, 0) + got
        assert sum(per_second.values()) == 5
        assert max(per_second.values()) <= 3 and per_second[1] == 2
        (held,) = (await claim(core))["deferred"]
        assert held_by(held) == ("minute", MINUTE0 + MINUTE)
        with pytest.raises(Refused) as info:  # a claim by id says the same
            pending = (await call(core, "list", queue="q", status="pending"))["jobs"][0]
            await call(core, "claim", job_id=pending["id"])
        assert info.value.details["window"] == {"period": "minute", "tz": "UTC"}
        # A waiting claim is served when the minute reopens, by the reopen timer.
        answer = await claim(core, wait_ms=120_000)
        assert 0 <= core.clock.now_ms() - (MINUTE0 + MINUTE) < 50
        assert len(answer["jobs"]) == 3  # the new minute, and its first second's three


async def test_the_deferral_names_the_exhausted_window_that_reopens_last(tmp_path, autojump_clock):
    """3 a second and 3 a minute: both used up by the same claims; the job waits
    for the minute (the later reopening), not for the second."""
    async with running_core(tmp_path, wall_start_ms=MINUTE0 + 10 * SECOND) as core:
        await call(core, "policy_set", queue="q", windows=[per(3, "second"), per(3, "minute")])
        await fill(core, 5)
        assert await claimed(core) == 3
        (held,) = (await claim(core))["deferred"]
        assert (held["window"], held["next_eligible_at"]) == (
            {"period": "minute", "tz": "UTC"}, MINUTE0 + MINUTE)  # fmt: skip
        status = (await call(core, "admission_status", queue="q"))["queues"][0]
        assert status["status"]["window"] == {"period": "minute", "tz": "UTC"}
        assert [w["remaining"] for w in status["windows"]] == [0, 0]


@pytest.mark.parametrize(
    ("day", "hours"),
    [(datetime(2026, 3, 8, tzinfo=LA), 23), (datetime(2026, 11, 1, tzinfo=LA), 25)],
    ids=["spring_forward", "fall_back"],
)
async def test_a_pacific_day_window_counts_the_dst_days_of_2026(tmp_path, autojump_clock, day,
                                                                 hours):  # fmt: skip
    """The windows form's day window in Los Angeles is 23 h on 2026-03-08 and 25 h
    on 2026-11-01: one budget for the whole local day, stacked with a second."""
    start = ms(day)
    end = ms(day.replace(day=day.day + 1))
    assert end - start == hours * HOUR
    # No timers: the day is crossed by claims alone, without 2-second ticks.
    async with running_core(tmp_path, wall_start_ms=start + SECOND, timers=False) as core:
        stacked = [per(10, "second", "America/Los_Angeles"), per(2, "day", "America/Los_Angeles")]
        await call(core, "policy_set", queue="q", windows=stacked)
        await fill(core, 5)
        assert await claimed(core, 1) == 1
        await at(core, end - MINUTE)  # 23:59 local: still the same day
        assert await claimed(core) == 1
        day_window = (await windows_status(core))[1]
        assert (day_window["window_start_at"], day_window["window_resets_at"]) == (start, end)
        (held,) = (await claim(core))["deferred"]
        assert (held["window"]["period"], held["next_eligible_at"]) == ("day", end)
        await at(core, end)
        assert await claimed(core) == 2


async def test_celery_2186_ten_a_second_and_100000_a_day(tmp_path, autojump_clock):
    """Celery #2186 asks for 10 tasks a second and 100,000 a day on the same work.
    With 99,990 of the day's used (stored before a restart), the next second gets
    its 10, then the day holds everything until New York's midnight, when the
    rate is 10 a second again."""
    ny = ZoneInfo("America/New_York")
    evening = ms(datetime(2026, 6, 10, 23, 0, tzinfo=ny))
    midnight = ms(datetime(2026, 6, 11, 0, 0, tzinfo=ny))
    windows = [per(10, "second"), per(100_000, "day", "America/New_York")]
    async with running_core(tmp_path, wall_start_ms=evening) as core:
        await call(core, "policy_set", queue="q", windows=windows)
        await fill(core, 40)
        day_start = (await windows_status(core))[1]["window_start_at"]
    with closing(sqlite3.connect(tmp_path / "db.sqlite")) as conn, conn:  # 99,990 claims today
        conn.execute("INSERT INTO policy_usage (namespace, queue, window_key, window_start, "
                     "used) VALUES ('default', 'q', 'day', ?, 99990)",
                     (day_start,))  # fmt: skip
    async with running_core(tmp_path, wall_start_ms=evening + SECOND) as core:
        assert await claimed(core, 40) == 10
        (held,) = (await claim(core))["deferred"]
        assert (held["window"], held["next_eligible_at"]) == (
            {"period": "day", "tz": "America/New_York"}, midnight)  # fmt: skip
        await at(core, midnight - SECOND)
        assert await claimed(core, 40) == 0
        await at(core, midnight)
        assert await claimed(core, 40) == 10
        assert (await claim(core))["deferred"][0]["window"]["period"] == "second"


async def test_a_restart_keeps_every_windows_usage(tmp_path, autojump_clock):
    windows = [per(5, "minute"), per(7, "hour"), per(9, "day")]
    async with running_core(tmp_path, wall_start_ms=MINUTE0) as core:
        await call(core, "policy_set", queue="q", windows=windows)
        await fill(core, 12)
        assert await claimed(core, 4) == 4
    async with running_core(tmp_path, wall_start_ms=MINUTE0 + SECOND) as core:
        assert [w["used"] for w in await windows_status(core)] == [4, 4, 4]
        assert await claimed(core) == 1  # the minute's fifth
        await at(core, MINUTE0 + MINUTE)
        assert await claimed(core) == 2  # the hour's sixth and seventh
        (held,) = (await claim(core))["deferred"]
        assert held["window"] == {"period": "hour", "tz": "UTC"}
        rows = core.conn.execute(
            "SELECT window_key, sum(used) FROM policy_usage GROUP BY window_key ORDER BY 1"
        )
        assert rows.fetchall() == [("day", 7), ("hour", 7), ("minute", 7)]


async def test_the_form_given_is_the_form_read_back(tmp_path, autojump_clock):
    one = {"period": "day", "tz": "UTC", "start": "00:00"}
    async with running_core(tmp_path) as core:
        single = await call(core, "policy_set", queue="a", max_claims_per_window=3, window=one)
        assert "windows" not in single["policy"] and single["policy"]["window"] == one
        windows = [per(3, "second"), per(9, "month", start="06:00")]
        stacked = await call(core, "policy_set", queue="b", max_in_flight=2, windows=windows)
        assert stacked["policy"]["windows"] == [
            {"max_claims": 3, "period": "second", "tz": "UTC", "start": "00:00"},
            {"max_claims": 9, "period": "month", "tz": "UTC", "start": "06:00"}]  # fmt: skip
        assert "window" not in stacked["policy"] and stacked["policy"]["max_in_flight"] == 2
        got = await call(core, "policy_get", queue="b")
        assert got["policy"]["windows"] == stacked["policy"]["windows"]


async def test_a_window_kept_across_a_rewrite_keeps_counting(tmp_path, autojump_clock):
    """The single form's window, rewritten as one of several, keeps its usage."""
    one = {"period": "hour", "tz": "UTC", "start": "00:00"}
    async with running_core(tmp_path, wall_start_ms=MINUTE0) as core:
        await call(core, "policy_set", queue="q", max_claims_per_window=5, window=one)
        await fill(core, 8)
        assert await claimed(core, 4) == 4
        await call(core, "policy_set", queue="q", windows=[per(5, "hour"), per(2, "second")])
        assert await claimed(core) == 1  # the hour's fifth, though the second has room


GOOD = per(3, "second")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"windows": [GOOD], "max_claims_per_window": 3,
          "window": {"period": "day", "tz": "UTC", "start": "00:00"}}, "windows"),
        ({"windows": [GOOD], "max_claims_per_window": 3}, "windows"),
        ({"windows": []}, "windows"),
        ({"windows": {"max_claims": 1}}, "windows"),
        ({"windows": [per(1, p) for p in
                      ("second", "minute", "hour", "day", "week", "month", "second")]}, "windows"),
        ({"windows": [GOOD, per(9, "fortnight")]}, "windows[1].period"),
        ({"windows": [GOOD, per(9, "second", "America/New_York")]}, "windows[1].period"),
        ({"windows": [{**GOOD, "max_claims": -1}]}, "windows[0].max_claims"),
        ({"windows": [{**GOOD, "max_claims": None}]}, "windows[0].max_claims"),
        ({"windows": [{**GOOD, "tz": "Mars/Olympus"}]}, "windows[0].tz"),
        ({"windows": [{**GOOD, "limit": 3}]}, "windows[0]"),
        ({"windows": [per(1, "week")]}, "windows[0].weekday"),
        ({"windows": [per(1, "minute", start="00:30")]}, "windows[0].start"),
        ({"windows": ["3/s"]}, "windows[0]"),
    ],
    ids=["both_forms", "both_forms_partly", "empty", "not_a_list", "too_many",
         "bad_period", "duplicate_period", "negative", "missing_cap", "bad_zone",
         "unknown_field", "week_without_weekday", "minute_start", "not_an_object"],
)  # fmt: skip
async def test_a_bad_windows_list_is_refused_naming_the_field(tmp_path, autojump_clock, fields,
                                                              field):  # fmt: skip
    async with running_core(tmp_path) as core:
        with pytest.raises(Refused) as info:
            await call(core, "policy_set", queue="q", **fields)
        assert (info.value.code, info.value.details) == ("invalid_argument", {"field": field})
        with pytest.raises(Refused):  # nothing was written
            await call(core, "policy_get", queue="q")


async def test_a_second_window_keeps_a_day_of_usage_rows(tmp_path, autojump_clock):
    """A claim every second would add a row a second forever: rows over a day
    older than the current window are forgotten as the window moves on."""
    day = 86_400_000
    async with running_core(tmp_path, wall_start_ms=MINUTE0, timers=False) as core:
        await call(core, "policy_set", queue="q", windows=[per(5, "second")])
        await fill(core, 4)
        assert await claimed(core, 1) == 1
        await at(core, MINUTE0 + 10 * SECOND)
        assert await claimed(core, 1) == 1
        await at(core, MINUTE0 + day + 5 * SECOND)
        assert await claimed(core, 1) == 1  # the first row is over a day old now
        rows = core.conn.execute("SELECT window_start FROM policy_usage ORDER BY 1").fetchall()
        assert rows == [(MINUTE0 + 10 * SECOND,), (MINUTE0 + day + 5 * SECOND,)]


async def test_each_windows_usage_is_a_gauge(tmp_path, autojump_clock):
    async with running_core(tmp_path, wall_start_ms=MINUTE0) as core:
        await call(core, "policy_set", queue="q", windows=[per(3, "second"), per(5, "minute")])
        await fill(core, 6)
        assert await claimed(core) == 3
        await at(core, MINUTE0 + SECOND)
        sample = core.metrics.registry.get_sample_value

        def gauge(name: str, period: str) -> float | None:
            return sample(f"sluicegate_admission_window_{name}", {"queue": "q", "period": period})

        # The scrape rolls the windows: the second that filled is over.
        assert (gauge("used", "second"), gauge("used", "minute")) == (0, 3)
        assert (gauge("max", "second"), gauge("max", "minute")) == (3, 5)


async def test_a_window_charged_ahead_of_a_backward_step_stays_charged(tmp_path, autojump_clock):
    """The host's clock steps back an hour, then a restart: the hour window charged
    on the old time keeps its two claims when it comes round (WindowUsage.ahead,
    per window), while the day window, current on both times, keeps counting."""
    hour0 = MINUTE0 - MINUTE0 % HOUR + HOUR  # a whole hour, 2023-11-14 23:00 UTC
    windows = [per(100, "day"), per(3, "hour")]  # the hour second: not the first's numbers
    async with running_core(tmp_path, wall_start_ms=hour0 + MINUTE) as core:
        await call(core, "policy_set", queue="q", windows=windows)
        await fill(core, 10)
        assert await claimed(core, 2) == 2
    async with running_core(tmp_path, wall_start_ms=hour0 + MINUTE - HOUR) as core:
        day, hour = core.policies.get("default", "q").meters
        assert (hour.used, hour.ahead, day.used) == (0, {hour0: 2}, 2)
        assert await claimed(core) == 3  # the hour before: a window of its own
        await at(core, hour0)
        assert await claimed(core) == 1  # the hour charged on the old time: 2 of 3 already
        assert [w["used"] for w in await windows_status(core)] == [6, 3]


_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(-5, 2_000_000)
    | st.text(max_size=8)
    | st.sampled_from(["second", "minute", "hour", "day", "week", "month", "UTC", "00:00", "Mon"])
)
_DOCS = st.recursive(_VALUES, lambda inner: st.lists(inner, max_size=8) | st.dictionaries(
    st.sampled_from(["max_claims", "period", "tz", "start", "weekday", "x"]), inner, max_size=6),
    max_leaves=30)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["windows", "max_in_flight", "window",
                                        "max_claims_per_window"]), _DOCS, max_size=3))  # fmt: skip
def test_any_policy_document_decodes_or_is_refused_and_reads_back_as_given(doc):
    """Whatever the document: ``invalid_argument``, or a policy whose wire form
    decodes to itself (the form it was given in)."""
    try:
        policy = parse_policy(doc)
    except Refused as exc:
        assert exc.code == "invalid_argument"
        return
    assert parse_policy(policy.to_dict()) == policy
    assert ("windows" in policy.to_dict()) == (doc.get("windows") is not None)
