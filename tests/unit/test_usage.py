"""Seed 001's storage and monthly quotas: the pure decisions, metering, the roll-up,
and both blocks through the real core on MockClock."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
import trio
import trio.testing

from actors.errors import Refused
from actors.usage import StorageBlock, crossed, month_of
from daemon.admission.usage import Meter
from daemon.config import Config, DaemonConfig
from daemon.core import Core
from daemon.store import usage as store
from daemon.store.database import GroupCommit
from daemon.store.opening import open_database
from tests.unit.harness import call, running_core

MIN = 60_000


def _ms(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=dt.UTC).timestamp()) * 1000


# -- the pure decisions ------------------------------------------------------------


def test_storage_blocks_strictly_above_the_cap_and_releases_below_the_band():
    block = StorageBlock()
    assert not block.measure(100, 100, 0.1) and not block.held  # at the cap: not above
    assert block.measure(101, 100, 0.1) and block.held
    assert not block.measure(95, 100, 0.1) and block.held  # inside the band: still held
    assert not block.measure(90, 100, 0.1) and block.held  # 90 is not below 100 * 0.9
    assert block.measure(89, 100, 0.1) and not block.held
    assert StorageBlock().measure(10**9, 100, None)  # over at the first pass: blocks at once
    default_band = StorageBlock(measured=0, held=True)
    default_band.measure(90, 100, None)
    assert default_band.held  # the default band is 0.1
    default_band.measure(89, 100, None)
    assert not default_band.held


def test_a_tick_without_a_measurement_leaves_the_decision_alone():
    block = StorageBlock()
    block.measure(200, 100, 0.1)
    assert not block.measure(None, 100, 0.1) and block.held and block.measured == 200
    assert not StorageBlock().measure(None, 100, 0.1)  # nothing known: nothing blocked
    assert block.measure(None, None, None) and not block.held  # no cap any more: released


def test_levels_are_crossed_rising_only():
    assert crossed(49, 100, 0) == []
    assert crossed(50, 100, 0) == [50]
    assert crossed(95, 100, 0) == [50, 80, 90]
    assert crossed(95, 100, 80) == [90]
    assert crossed(100, 100, 90) == [100]
    assert crossed(120, 100, 100) == []  # announced already
    assert crossed(10, 100, 90) == []  # a wobble down announces nothing
    assert crossed(0, 0, 0) == [50, 80, 90, 100]  # a zero allowance is exhausted at once


def test_the_utc_month_of_an_instant():
    assert month_of(_ms(2026, 12, 31, 23, 59, 59)) == (
        "2026-12", _ms(2026, 12, 1), _ms(2027, 1, 1))  # fmt: skip
    assert month_of(_ms(2027, 1, 1)) == ("2027-01", _ms(2027, 1, 1), _ms(2027, 2, 1))
    assert month_of(_ms(2028, 2, 29, 12))[2] == _ms(2028, 3, 1)


# -- metering and the roll-up (store level) ----------------------------------------------


def _usage(conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT namespace, minute, jobs, rolled FROM usage_minutes ORDER BY 1, 2"
    ).fetchall()


def test_the_meter_writes_one_row_per_namespace_and_minute_in_the_same_transaction(tmp_path):
    db = open_database(tmp_path / "db.sqlite")
    meter = Meter()
    now = [_ms(2026, 12, 1, 10)]
    writer = GroupCommit(db.conn, lambda: now[0])
    writer.pending.append(meter)
    writer.run_now(lambda tx: meter.note(tx, {"a": 2, "b": 1}))
    writer.run_now(lambda tx: meter.note(tx, {"a": 3}))

    def refused_after_writing(tx):
        meter.note(tx, {"a": 100})
        tx.conn.execute("INSERT INTO settings (key, value, updated_at) VALUES ('x', 'y', 0)")
        raise Refused("invalid_argument", "no")

    with pytest.raises(Refused):
        writer.run_now(refused_after_writing)
    minute = now[0] // MIN
    # The refused write's share went back with its statements.
    assert _usage(db.conn) == [("a", minute, 5, 0), ("b", minute, 1, 0)]
    db.conn.close()


def test_the_roll_up_rolls_each_increment_once_and_prunes(tmp_path):
    db = open_database(tmp_path / "db.sqlite")
    conn = db.conn
    day = _ms(2026, 12, 10) // MIN
    store.meter(conn, [("a", day + 5, 3), ("a", day - 1440, 4), ("b", day + 7, 1)])
    store.roll_up(conn, keep_before_minute=0, keep_after_day=0)
    days = "SELECT namespace, day, jobs FROM usage_days ORDER BY 1, 2"
    assert conn.execute(days).fetchall() == [
        ("a", day // 1440 - 1, 4), ("a", day // 1440, 3), ("b", day // 1440, 1)]  # fmt: skip
    store.meter(conn, [("a", day + 5, 2)])  # lands after the roll-up: rolled next time
    december = (_ms(2026, 12, 1), _ms(2027, 1, 1))
    assert store.month_totals(conn, *december) == {"a": 4 + 3 + 2, "b": 1}
    store.roll_up(conn, keep_before_minute=day, keep_after_day=day // 1440)
    assert conn.execute(days).fetchall() == [("a", day // 1440, 5), ("b", day // 1440, 1)]
    assert store.month_totals(conn, *december) == {"a": 5, "b": 1}  # not counted twice
    assert _usage(conn) == [("a", day + 5, 5, 5), ("b", day + 7, 1, 1)]  # older minutes pruned
    assert store.month_totals(conn, _ms(2027, 1, 1), _ms(2027, 2, 1)) == {}
    db.conn.close()


# -- the monthly block through the core ---------------------------------------------------


def _config(**daemon: Any) -> Config:
    return Config(daemon=DaemonConfig(rollup_interval=MIN, **daemon))


async def _enqueue(core: Core, n: int, namespace: str = "default") -> None:
    await call(core, "enqueue_many", namespace=namespace,
               jobs=[{"queue": "q", "type": "t", "payload": {"a": 1}}] * n)  # fmt: skip


async def _refusal(core: Core) -> Refused:
    with pytest.raises(Refused) as info:
        await _enqueue(core, 1)
    return info.value


async def _tick(core: Core, seconds: float = 60) -> None:
    await trio.sleep(seconds)  # virtual time: autojump_clock
    await trio.testing.wait_all_tasks_blocked()


def _levels(core: Core, level: int) -> float:
    sample = core.metrics.registry.get_sample_value
    return sample("sluicegate_monthly_quota_levels_total",
                  {"namespace": "default", "level": str(level)}) or 0  # fmt: skip


async def test_the_monthly_quota_blocks_at_the_tick_when_used_up(tmp_path, autojump_clock, caplog):
    caplog.set_level(logging.INFO, "sluicegate.limits")
    start = _ms(2026, 12, 1)
    async with running_core(tmp_path, config=_config(), wall_start_ms=start) as core:
        await call(core, "quota_set", quota={"monthly_jobs_quota": 10})
        await _enqueue(core, 9)
        await _tick(core)
        await _enqueue(core, 1)  # 9 < 10 at the tick: allowed (over is >=, at the tick)
        await _tick(core)
        refusal = await _refusal(core)
        assert (refusal.code, refusal.status, refusal.message) == (
            "quota_exceeded", 403,
            "monthly_jobs_quota exceeded: 10 >= 10; the block lifts at the next calendar month",
        )  # fmt: skip
        assert refusal.details == {"limit": "monthly_jobs_quota", "value": 10, "max": 10}
        # Each level once, rising only: 50, 80, 90 at the first tick (9), 100 at the next.
        assert [_levels(core, lv) for lv in (50, 80, 90, 100)] == [1, 1, 1, 1]
        audit = core.conn.execute(
            "SELECT action, before, after FROM audit WHERE action = 'monthly_level' ORDER BY id"
        ).fetchall()
        assert [(a, b) for a, b, _ in audit] == [
            ("monthly_level", '{"level":0}'), ("monthly_level", '{"level":90}')]  # fmt: skip
        assert '"level":100,"used":10' in audit[-1][2]
        lines = [r.getMessage() for r in caplog.records if "monthly_jobs_quota level" in r.message]
        assert [line.split("level=")[1].split()[0] for line in lines] == ["50", "80", "90", "100"]
        await _tick(core)
        await call(core, "quota_set", quota={"monthly_jobs_quota": 100})  # a wobble down...
        await _tick(core)
        await call(core, "quota_set", quota={"monthly_jobs_quota": 10})
        await _tick(core)
        assert [_levels(core, lv) for lv in (50, 80, 90, 100)] == [1, 1, 1, 1]  # ...says nothing


async def test_a_raised_allowance_applies_at_once_and_the_month_turn_lifts_the_block(
    tmp_path, autojump_clock
):
    # One hour before the year turns; the tick interval is a day, so only the
    # turn of the month can lift the block on time.
    start = _ms(2026, 12, 31, 23)
    config = Config(daemon=DaemonConfig(rollup_interval=86_400_000))
    async with running_core(tmp_path, config=config, wall_start_ms=start) as core:
        await _enqueue(core, 3)
        await call(core, "quota_set", quota={"monthly_jobs_quota": 2})
        await _enqueue(core, 1)  # evaluated on the tick, not before
        await core.usage.tick()  # a tick now (as at start): 4 used
        assert (await _refusal(core)).details["limit"] == "monthly_jobs_quota"
        await call(core, "quota_set", quota={"monthly_jobs_quota": 5})
        await _enqueue(core, 1)  # the last count (4) against the raised allowance
        await call(core, "quota_set", quota={"monthly_jobs_quota": 2})
        assert (await _refusal(core)).code == "quota_exceeded"
        await trio.sleep_until(core.clock.deadline_for(_ms(2027, 1, 1)))
        await trio.testing.wait_all_tasks_blocked()
        await _enqueue(core, 1)  # January: a new allowance
        assert core.namespaces.get("default").monthly.month == "2027-01"


async def test_a_restart_re_blocks_at_its_first_tick(tmp_path, autojump_clock):
    start = _ms(2026, 12, 5)
    async with running_core(tmp_path, config=_config(), wall_start_ms=start) as core:
        await call(core, "quota_set", quota={"monthly_jobs_quota": 4})
        await _enqueue(core, 4)
        await _tick(core)
        assert _levels(core, 100) == 1
    async with running_core(tmp_path, config=_config(), wall_start_ms=start + MIN) as core:
        await trio.testing.wait_all_tasks_blocked()
        assert (await _refusal(core)).details["limit"] == "monthly_jobs_quota"
        assert _levels(core, 100) == 0  # announced by the first run, not again


async def test_shadow_mode_counts_the_monthly_block_but_lets_it_through(
    tmp_path, autojump_clock, caplog
):
    caplog.set_level(logging.INFO, "sluicegate.limits")
    config = _config(enforce=False)
    async with running_core(tmp_path, config=config, wall_start_ms=_ms(2026, 12, 5)) as core:
        await call(core, "quota_set", quota={"monthly_jobs_quota": 1})
        await _enqueue(core, 1)
        await _tick(core)
        await _enqueue(core, 1)
        assert "limits namespace=default limit=monthly_jobs_quota would_block=true" in caplog.text


# -- the storage block through the core ----------------------------------------------------


async def test_the_storage_quota_blocks_above_the_cap_and_releases_below_the_band(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, config=_config(), wall_start_ms=_ms(2026, 12, 5)) as core:
        await _enqueue(core, 10)  # ten payloads of {"a":1}: 70 bytes
        await call(core, "quota_set", quota={"max_retained_bytes": 65})
        await _enqueue(core, 1)  # nothing measured yet: nothing blocked
        await _tick(core)  # the retention leader measures 77 bytes
        refusal = await _refusal(core)
        assert (refusal.code, refusal.message, refusal.details) == (
            "quota_exceeded", "max_retained_bytes exceeded: 77 > 65",
            {"limit": "max_retained_bytes", "value": 77, "max": 65},
        )  # fmt: skip
        status = (await call(core, "status"))["quota"]["usage"]
        assert (status["retained_bytes"], status["storage_blocked"]) == (77, True)
        # A raised cap meets the last measurement at once; 77 is not below 80 * 0.9.
        await call(core, "quota_set", quota={"max_retained_bytes": 80})
        assert (await _refusal(core)).details["limit"] == "max_retained_bytes"
        await call(core, "quota_set",
                   quota={"max_retained_bytes": 80, "retained_release_band": 0.03})  # fmt: skip
        await _enqueue(core, 1)  # 77 < 80 * 0.97: released


async def test_no_measurement_keeps_the_block_and_storage_is_reported_before_monthly(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, config=_config(), wall_start_ms=_ms(2026, 12, 5)) as core:
        await call(core, "quota_set", quota={"max_retained_bytes": 10, "monthly_jobs_quota": 2})
        await _enqueue(core, 2)
        await _tick(core)
        assert (await _refusal(core)).details["limit"] == "max_retained_bytes"  # both held
        core.conn.execute("DELETE FROM jobs")  # the rows go, but no daemon leads retention:
        core.config = _config(maintenance=False)
        await _tick(core)
        assert (await _refusal(core)).details["limit"] == "max_retained_bytes"  # decision stands
        core.config = _config()
        await _tick(core)  # measured 0: storage releases, the monthly block does not
        assert (await _refusal(core)).details["limit"] == "monthly_jobs_quota"


# -- several daemons on one database: roles (PostgreSQL's advisory locks) ---------------


async def _leads() -> bool:
    return True


async def _follows() -> bool:
    return False


async def test_a_daemon_without_the_roll_up_role_reads_the_totals_and_writes_nothing(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, config=_config(), wall_start_ms=_ms(2026, 12, 5)) as core:
        core.usage.leadership = _follows  # another daemon holds the role
        await call(core, "quota_set", quota={"monthly_jobs_quota": 4})
        await _enqueue(core, 4)
        await _tick(core)
        assert (await _refusal(core)).details["limit"] == "monthly_jobs_quota"  # it blocks...
        assert [_levels(core, lv) for lv in (50, 80, 90, 100)] == [0, 0, 0, 0]  # ...announces not
        assert core.conn.execute("SELECT sum(rolled) FROM usage_minutes").fetchone() == (0,)
        assert core.conn.execute("SELECT count(*) FROM usage_days").fetchone() == (0,)
        core.usage.leadership = _leads  # this daemon takes the role
        await _tick(core)
        assert _levels(core, 100) == 1
        assert core.conn.execute("SELECT sum(jobs) FROM usage_days").fetchone() == (4,)


async def test_the_retention_leader_shares_its_measurement_and_the_others_block_on_it(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, config=_config(), wall_start_ms=_ms(2026, 12, 5)) as core:
        core.retention_work.leadership = _leads
        await _enqueue(core, 10)  # 70 bytes
        await call(core, "quota_set", quota={"max_retained_bytes": 65})
        await _tick(core)
        stored = "SELECT value FROM settings WHERE key = 'quota:retained:default'"
        assert core.conn.execute(stored).fetchone() == ("70",)
        assert (await _refusal(core)).details["value"] == 70
        # Another daemon leads now, and measured less: this one follows its figure.
        core.retention_work.leadership = _follows
        with core.conn:
            core.conn.execute(
                "UPDATE settings SET value = '50' WHERE key = 'quota:retained:default'"
            )
        await _tick(core)
        await _enqueue(core, 1)  # released: 50 < 65 * 0.9
