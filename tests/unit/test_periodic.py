"""Periodic jobs: schedule math, the actor on MockClock, at most one fire per slot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from actors.clock import Clock
from actors.periodic import Cron, Every, ScheduleError, parse_schedule, zone
from daemon.config import Config, ConfigError, parse_config
from daemon.core import Core
from daemon.main import periodic_scheduler
from daemon.periodic import PeriodicScheduler, fire_write, settings_key
from daemon.store import settings as settings_sql
from daemon.store.opening import open_database
from daemon.verbs.periodic import fire_enqueue
from tests.unit.harness import WALL0, call

LA = "America/Los_Angeles"
MIN = 60_000
#: Virtual seconds a test may take (the watchdog in conftest bounds real time).
LIMIT = 7 * 86_400


def at(text: str, tz: str = LA) -> int:
    """``2024-03-10T03:00`` in ``tz`` as ms since the epoch."""
    return int(datetime.fromisoformat(text).replace(tzinfo=zone(tz)).timestamp() * 1000)


def config(*entries: dict[str, Any]) -> Config:
    return parse_config({"periodic": [{"queue": "q", "type": "t", **e} for e in entries]}, "t.toml")


@asynccontextmanager
async def daemon(
    tmp_path: Path, cfg: Config, wall_start_ms: int = WALL0, *, timers: bool = True
) -> AsyncIterator[tuple[Core, PeriodicScheduler]]:
    """A Core on ``tmp_path``'s database (a restart when it exists) and its scheduler.

    ``timers=False`` runs only the committer beside the scheduler: days of
    virtual time then cost no settings-watcher ticks.
    """
    db = open_database(tmp_path / "db.sqlite")
    try:
        core = Core(cfg, db, Clock(wall_start_ms=wall_start_ms))
        # Wired as the composition root wires it (daemon.main), started after the core.
        scheduler = periodic_scheduler(core, cfg.periodic)
        async with trio.open_nursery() as nursery:
            await nursery.start(core.run if timers else core.writer.run)
            await nursery.start(scheduler.run)
            try:
                yield core, scheduler
            finally:
                nursery.cancel_scope.cancel()
    finally:
        db.conn.close()


def jobs(core: Core) -> list[dict[str, Any]]:
    rows = core.conn.execute(
        "SELECT namespace, queue, type, payload, state, ready_at, created_at, priority, lease_ms "
        "FROM jobs ORDER BY id"
    ).fetchall()
    keys = ("namespace", "queue", "type", "payload", "state", "ready_at", "created_at",
            "priority", "lease_ms")  # fmt: skip
    return [dict(zip(keys, r, strict=True)) | {"payload": orjson.loads(r[3])} for r in rows]


def fires(core: Core, name: str, result: str) -> float:
    value = core.metrics.registry.get_sample_value(
        "sluicegate_periodic_fires_total", {"name": name, "result": result}
    )
    return value or 0


def record(core: Core, entry_index: int = 0) -> dict[str, Any]:
    entry = core.config.periodic[entry_index]
    return orjson.loads(settings_sql.get(core.conn, settings_key(entry)) or "null")


# -- schedule math -------------------------------------------------------------------


def test_every_slots_are_aligned_to_the_epoch():
    five = Every(5 * MIN, "5m")
    assert five.next_after(WALL0) == 1_700_000_100_000  # 5_666_667 * 300_000
    assert five.next_after(1_700_000_100_000) == 1_700_000_400_000
    assert five.latest_at_or_before(1_700_000_100_000) == 1_700_000_100_000
    assert five.latest_at_or_before(1_700_000_099_999) == 1_699_999_800_000
    assert five.describe() == "every 5m"
    day = Every(86_400_000, "1d")
    assert day.next_after(WALL0) == at("2023-11-15T00:00", "UTC")


def test_a_wall_clock_cron_slot_fires_once_across_dst_changes():
    daily = Cron.parse("30 2 * * *", LA)
    # Spring forward: 02:30 does not exist on 2024-03-10; it fires at 03:00 PDT.
    slots = [daily.next_after(at("2024-03-09T12:00"))]
    for _ in range(2):
        slots.append(daily.next_after(slots[-1]))
    assert slots == [at("2024-03-10T03:00"), at("2024-03-11T02:30"), at("2024-03-12T02:30")]
    # Fall back: 01:30 happens twice on 2024-11-03; it fires at the first only.
    early = Cron.parse("30 1 * * *", LA)
    first = early.next_after(at("2024-11-02T12:00"))
    assert first == at("2024-11-03T01:30") and first == at("2024-11-03T08:30", "UTC")
    assert early.next_after(first) == at("2024-11-04T01:30")  # the second 01:30 is skipped
    # From inside the repeated hour, the slot already passed is not offered again.
    in_second_pass = at("2024-11-03T09:10", "UTC")  # 01:10 PST, after 01:30 PDT
    assert early.next_after(in_second_pass) == at("2024-11-04T01:30")
    assert early.latest_at_or_before(in_second_pass) == first
    assert daily.latest_at_or_before(at("2024-03-10T12:00")) == at("2024-03-10T03:00")
    assert daily.describe() == "cron 30 2 * * * America/Los_Angeles"


def test_an_interval_cron_follows_elapsed_time_across_dst():
    half_hourly = Cron.parse("*/30 * * * *", LA)
    slot, seen = at("2024-11-03T00:10"), []
    for _ in range(6):
        slot = half_hourly.next_after(slot)
        seen.append(slot)
    utc = [at(f"2024-11-03T{t}", "UTC") for t in ("07:30", "08:00", "08:30", "09:00", "09:30")]
    assert seen[:5] == utc  # both 01:00 and both 01:30: each is a distinct half hour
    assert half_hourly.latest_at_or_before(at("2024-11-03T09:45", "UTC")) == utc[-1]


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ((None, None, None, None), "every", "give exactly one of every or cron"),
        ((MIN, "1m", "* * * * *", None), "every", "give exactly one of every or cron"),
        ((500, "500ms", None, None), "every", "must be at least 1s"),
        ((MIN, "1m", None, "UTC"), "tz", "tz goes with cron"),
        ((None, None, "* * * *", None), "cron", "expected 5 fields"),
        ((None, None, "0 0 * * * *", None), "cron", "expected 5 fields"),
        ((None, None, "61 * * * *", None), "cron", "not a cron expression"),
        ((None, None, "0 0 * * *", "Mars/Olympus"), "tz", "unknown time zone"),
        ((None, None, "0 0 * * *", "../../etc/passwd"), "tz", "unknown time zone"),
    ],
)
def test_bad_schedules_name_their_field(args, field, message):
    with pytest.raises(ScheduleError) as info:
        parse_schedule(*args)
    assert info.value.field == field and message in info.value.message


def test_config_errors_name_the_entry_and_field():
    def problems(*entries: dict[str, Any]) -> list[str]:
        with pytest.raises(ConfigError) as info:
            config(*entries)
        return info.value.problems

    assert problems({"name": "a", "every": "5m", "cron": "* * * * *"}) == [
        "periodic[0].every: give exactly one of every or cron"
    ]
    assert problems({"name": "a", "every": "5m"}, {"name": "b", "cron": "* * *"}) == [
        "periodic[1].cron: expected 5 fields (minute hour day month weekday), got 3"
    ]
    assert problems({"name": "a", "cron": "0 3 * * *", "tz": "Nowhere/Else"}) == [
        "periodic[0].tz: unknown time zone 'Nowhere/Else'"
    ]
    assert problems({"name": "a", "every": "5m", "tz": LA})[0].startswith("periodic[0].tz: ")
    assert problems({"name": "a", "every": "soon"})[0].startswith(
        "periodic[0].every: expected a duration"
    )
    assert problems({"every": "5m"}) == ["periodic[0].name: name is required"]
    assert problems({"name": "a", "every": "5m", "priority": 70000}) == [
        "periodic[0].priority: must be between 0 and 65535, got 70000"
    ]
    assert problems({"name": "a", "every": "5m", "payload": 3}) == [
        'periodic[0].payload: must be a table, such as { report = "daily" }'
    ]
    assert problems({"name": "a", "every": "5m", "evry": 1})[0].startswith(
        "periodic[0].evry: unknown field 'evry'"
    )
    assert problems(
        {"name": "a", "every": "1m"}, {"name": "a", "every": "1m", "namespace": "b"}
    ) == ["periodic[1].name: 'a' is used by another entry"]
    good = config({"name": "n", "cron": "0 3 * * MON", "tz": LA, "lease_ms": "30s",
                   "namespace": "billing", "payload": {"k": [1]}})  # fmt: skip
    entry = good.periodic[0]
    assert (entry.lease_ms, entry.namespace, entry.schedule.describe()) == (
        30_000,
        "billing",
        "cron 0 3 * * MON America/Los_Angeles",
    )


# -- the scheduler on a Core ---------------------------------------------------------


async def test_every_fires_at_aligned_slots_through_enqueue(tmp_path, autojump_clock):
    cfg = config({"name": "tick", "every": "5m", "payload": {"report": "x"}, "priority": 7,
                  "lease_ms": "30s"})  # fmt: skip
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, cfg) as (core, scheduler):
            t0 = trio.current_time()
            await trio.testing.wait_all_tasks_blocked()
            assert jobs(core) == []
            assert scheduler.next_fire_at(cfg.periodic[0]) == 1_700_000_100_000
            await trio.sleep(11 * 60)
            assert trio.current_time() - t0 == 660
            got = jobs(core)
            slots = [1_700_000_100_000, 1_700_000_400_000]
            assert [(j["ready_at"], j["created_at"]) for j in got] == [(s, s) for s in slots]
            assert got[0] | {"ready_at": 0, "created_at": 0} == {
                "namespace": "default", "queue": "q", "type": "t", "payload": {"report": "x"},
                "state": "pending", "ready_at": 0, "created_at": 0, "priority": 7,
                "lease_ms": 30_000,
            }  # fmt: skip
            assert fires(core, "tick", "fired") == 2
            assert record(core)["slot_at"] == slots[-1]
            listed = await call(core, "periodic_list")
            assert listed == {"periodic": [{
                "name": "tick", "queue": "q", "type": "t", "schedule": "every 5m",
                "next_fire_at": 1_700_000_700_000, "last_fired_at": slots[-1],
                "last_slot_at": slots[-1], "last_result": "fired",
            }]}  # fmt: skip
            audit = core.conn.execute("SELECT count(*) FROM jobs WHERE namespace = 'default'")
            assert audit.fetchone()[0] == 2


async def test_cron_in_a_zone_fires_once_across_spring_forward(tmp_path, autojump_clock):
    cfg = config({"name": "nightly", "cron": "30 2 * * *", "tz": LA})
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, cfg, at("2024-03-09T12:00"), timers=False) as (core, _s):
            await trio.sleep(3 * 86_400)
            assert [j["ready_at"] for j in jobs(core)] == [
                at("2024-03-10T03:00"),
                at("2024-03-11T02:30"),
                at("2024-03-12T02:30"),
            ]


async def test_cron_fires_once_in_the_repeated_hour_of_fall_back(tmp_path, autojump_clock):
    cfg = config({"name": "early", "cron": "30 1 * * *", "tz": LA})
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, cfg, at("2024-11-02T12:00"), timers=False) as (core, _s):
            await trio.sleep(2 * 86_400)
            assert [j["ready_at"] for j in jobs(core)] == [
                at("2024-11-03T01:30"),
                at("2024-11-04T01:30"),
            ]
            assert at("2024-11-04T01:30") - at("2024-11-03T01:30") == 25 * 3_600_000


async def test_a_slot_fires_at_most_once_across_a_restart(tmp_path, autojump_clock):
    cfg = config({"name": "tick", "every": "5m"})
    slot = 1_700_000_100_000
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, cfg) as (core, _s):
            await trio.sleep(101)  # virtual time: autojump_clock; the slot at WALL0 + 100 s fired
            assert [j["ready_at"] for j in jobs(core)] == [slot]
        # A second Core on the same file, within the same slot period.
        async with daemon(tmp_path, cfg, wall_start_ms=slot + 1_000) as (core, scheduler):
            await trio.testing.wait_all_tasks_blocked()
            assert scheduler.next_fire_at(cfg.periodic[0]) == slot + 5 * MIN
            # A fire of a slot already handled (a crash between commit and memory)
            # writes nothing and is counted as a duplicate.
            write = fire_write(fire_enqueue(core), cfg.periodic[0], slot)
            assert await core.writer.write(write) == {"result": "duplicate"}
            await scheduler.fire(settings_key(cfg.periodic[0]), slot)
            assert fires(core, "tick", "duplicate") == 1
            assert [j["ready_at"] for j in jobs(core)] == [slot]
            await trio.sleep(5 * 60)
            assert [j["ready_at"] for j in jobs(core)] == [slot, slot + 5 * MIN]


async def test_after_downtime_one_catch_up_fire_for_the_latest_missed_slot(
    tmp_path, autojump_clock
):
    cfg = config({"name": "tick", "every": "5m"})
    slot = 1_700_000_100_000
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, cfg) as (core, _s):
            await trio.sleep(101)  # virtual time: autojump_clock
        restart = slot + 3_600_000 + 10_000  # twelve slots missed
        async with daemon(tmp_path, cfg, wall_start_ms=restart) as (core, scheduler):
            await trio.testing.wait_all_tasks_blocked()
            got = jobs(core)
            assert [(j["ready_at"], j["created_at"]) for j in got] == [
                (slot, slot),
                (slot + 3_600_000, restart),
            ]
            assert got[1]["state"] == "pending"
            assert scheduler.next_fire_at(cfg.periodic[0]) == slot + 3_600_000 + 5 * MIN
            assert fires(core, "tick", "fired") == 1


async def test_a_new_entry_never_fires_for_slots_before_it_was_seen(tmp_path, autojump_clock):
    first = config({"name": "tick", "every": "5m"})
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, first) as (core, scheduler):
            await trio.testing.wait_all_tasks_blocked()
            assert record(core)["result"] == "baseline"
            # SIGHUP: a new entry, and a changed schedule (a fresh baseline, no catch-up).
            await trio.sleep(30)  # virtual time: autojump_clock
            fresh = config({"name": "tick", "every": "1h"}, {"name": "new", "every": "10m"})
            core.reload(fresh)
            scheduler.replace(fresh.periodic)
            await trio.testing.wait_all_tasks_blocked()
            assert record(core, 0)["schedule"] == "every 1h"
            assert scheduler.next_fire_at(fresh.periodic[0]) == 1_700_002_800_000
            assert scheduler.next_fire_at(fresh.periodic[1]) == 1_700_000_400_000
            await trio.sleep(400)  # virtual time: autojump_clock
            assert [(j["ready_at"]) for j in jobs(core)] == [1_700_000_400_000]
            # Removed entries stop firing.
            scheduler.replace(())
            await trio.sleep(3_600)
            assert len(jobs(core)) == 1


async def test_a_refused_fire_is_counted_and_not_retried(tmp_path, autojump_clock, caplog):
    cfg = config({"name": "tick", "every": "5m"})
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, cfg) as (core, scheduler):
            await call(core, "quota_set", quota={"max_pending": 0})
            await trio.sleep(11 * 60)  # two slots
            assert jobs(core) == []
            logged = [r.getMessage() for r in caplog.records if r.name == "sluicegate.periodic"]
            assert len(logged) == 2 and logged[0].startswith(
                "periodic name=tick namespace=default queue=q slot_at=1700000100000 "
                "result=refused code=queue_full: queue 'q' is full"
            )
            assert fires(core, "tick", "refused") == 2
            assert fires(core, "tick", "fired") == 0
            stored = record(core)
            assert (stored["slot_at"], stored["result"], stored["refused"]) == (
                1_700_000_400_000,
                "refused",
                "queue_full",
            )
            assert scheduler.next_fire_at(cfg.periodic[0]) == 1_700_000_700_000
            listed = (await call(core, "periodic_list"))["periodic"][0]
            assert (listed["last_result"], listed["last_fired_at"]) == ("refused", None)
            # The quota lifted, the next slot fires.
            await call(core, "quota_clear")
            await trio.sleep(5 * 60)
            assert [j["ready_at"] for j in jobs(core)] == [1_700_000_700_000]


async def test_periodic_list_shows_only_the_callers_namespace(tmp_path, autojump_clock):
    cfg = config(
        {"name": "mine", "cron": "0 3 * * *", "tz": LA},
        {"name": "theirs", "every": "5m", "namespace": "other"},
    )
    with trio.fail_after(LIMIT):
        async with daemon(tmp_path, cfg) as (core, _s):
            listed = (await call(core, "periodic_list"))["periodic"]
            assert [e["name"] for e in listed] == ["mine"]
            assert listed[0]["schedule"] == "cron 0 3 * * * America/Los_Angeles"
            assert listed[0]["next_fire_at"] == at("2023-11-15T03:00")
            assert (listed[0]["last_fired_at"], listed[0]["last_result"]) == (None, None)
            other = (await call(core, "periodic_list", namespace="other"))["periodic"]
            assert [e["name"] for e in other] == ["theirs"]  # open mode is operator
