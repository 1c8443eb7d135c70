"""Queue admission policies (seed 002) through the real core on MockClock.

Each test is named after the seed's scenario it replays (REQ-1 to REQ-13); wall
time moves with the virtual clock, so a Pacific day passes in milliseconds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import trio

from actors.errors import Refused
from daemon.core import Core
from tests.unit.harness import WALL0, call, running_core

LA = ZoneInfo("America/Los_Angeles")
DAY_LA = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


async def at(core: Core, instant_ms: int) -> None:
    """Let virtual (and so wall) time run to ``instant_ms``."""
    now = core.clock.now_ms()
    assert instant_ms >= now, "tests only move forward"
    await trio.sleep((instant_ms - now) / 1000)  # virtual time: autojump_clock


async def policy(core: Core, queue: str = "q", **fields: Any) -> dict[str, Any]:
    return (await call(core, "policy_set", queue=queue, **fields))["policy"]


async def enqueue(core: Core, n: int, queue: str = "q", **extra: Any) -> list[str]:
    jobs = [{"queue": queue, "type": "t", **extra} for _ in range(n)]
    return [r["job"]["id"] for r in (await call(core, "enqueue_many", jobs=jobs))["results"]]


async def claim(core: Core, n: int = 1, queues: tuple[str, ...] = ("q",), **kw: Any) -> dict:
    # A day-long lease: these tests move the clock by hours and mean no lapse.
    kw.setdefault("lease_ms", 86_400_000)
    return await call(core, "claim_next", queues=list(queues), max=n, **kw)


async def claimed(core: Core, n: int = 1, queues: tuple[str, ...] = ("q",)) -> list[dict]:
    return [j["job"] for j in (await claim(core, n, queues))["jobs"]]


def usage_rows(core: Core) -> list[tuple]:
    return core.conn.execute("SELECT queue, window_start, used FROM policy_usage").fetchall()


# -- REQ-1 -----------------------------------------------------------------------------


async def test_no_policy_no_change(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, "other", max_in_flight=1)
        await enqueue(core, 3)
        got = await claim(core, 3)
        assert len(got["jobs"]) == 3 and all(j["admission"] is None for j in got["jobs"])
        assert usage_rows(core) == []
        assert (await call(core, "get", job_id=got["jobs"][0]["job"]["id"]))["job"][
            "admission"
        ] is None


async def test_a_daily_budget(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        # The core starts at 2023-11-14T22:13:20Z = 14:13:20 Pacific.
        await policy(core, max_claims_per_window=100, window=DAY_LA)
        await enqueue(core, 130)
        assert len(await claimed(core, 1000)) == 100
        assert await claimed(core, 1000) == []
        await at(core, ms(datetime(2023, 11, 15, 0, 0, tzinfo=LA)))
        assert len(await claimed(core, 1000)) == 30


async def test_zero_pauses_the_queue(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_in_flight=0)
        [job_id] = await enqueue(core, 1)
        got = await claim(core)
        assert got["jobs"] == [] and got["deferred"] == [
            {"queue": "q", "reason": "paused", "pending": 1, "next_eligible_at": None,
             "exact": False}
        ]  # fmt: skip
        job = (await call(core, "get", job_id=job_id))["job"]
        assert (job["status"], job["attempts"]) == ("pending", 0)


async def test_unknown_zone_is_refused(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        before = await policy(core, max_claims_per_window=5, window=DAY_LA)
        with pytest.raises(Refused) as info:
            await policy(core, max_claims_per_window=5, window={**DAY_LA, "tz": "Mars/Olympus"})
        assert (info.value.code, info.value.details["field"]) == ("invalid_argument", "window.tz")
        assert (await call(core, "policy_get", queue="q"))["policy"] == before


@pytest.mark.parametrize(
    ("fields", "field"),
    [({}, "max_in_flight"), ({"max_in_flight": -1}, "max_in_flight"),
     ({"max_in_flight": 10_001}, "max_in_flight"),
     ({"max_claims_per_window": 5}, "window"),
     ({"max_claims_per_window": 1_000_001, "window": DAY_LA}, "max_claims_per_window"),
     ({"max_claims_per_window": 5, "window": {**DAY_LA, "weekday": "Mon"}}, "window.weekday"),
     ({"max_claims_per_window": 5, "window": {**DAY_LA, "period": "week"}}, "window.weekday"),
     ({"max_claims_per_window": 5, "window": {**DAY_LA, "start": "24:00"}}, "window.start")],
)  # fmt: skip
async def test_a_malformed_policy_is_refused_naming_the_field(tmp_path, autojump_clock, fields,
                                                             field):  # fmt: skip
    async with running_core(tmp_path) as core:
        with pytest.raises(Refused) as info:
            await policy(core, **fields)
        assert (info.value.code, info.value.details["field"]) == ("invalid_argument", field)
        assert (await call(core, "policy_list"))["policies"] == []


# -- REQ-2 -----------------------------------------------------------------------------


async def test_a_pool_shares_one_budget(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, "lane-m", max_claims_per_window=20, window=DAY_LA)
        await enqueue(core, 60, "lane-m")
        taken = [0, 0, 0]

        async def session(i: int) -> None:  # three workers of one pool, claiming as they can
            for _ in range(10):
                taken[i] += len(await claimed(core, 3, ("lane-m",)))

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(session, i)
        assert sum(taken) == 20 and all(taken)


async def test_same_name_different_owners(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", namespace="a", queue="q", max_in_flight=1)
        for ns in ("a", "b"):
            await call(core, "enqueue_many", namespace=ns, jobs=[{"queue": "q", "type": "t"}] * 3)
        got_a = await call(core, "claim_next", namespace="a", queues=["q"], max=5)
        got_b = await call(core, "claim_next", namespace="b", queues=["q"], max=5)
        assert (len(got_a["jobs"]), len(got_b["jobs"])) == (1, 3)
        assert got_b["jobs"][0]["admission"] is None


async def test_a_fan_out_copy_is_governed_by_its_own_queue(tmp_path, autojump_clock):
    """Seed 002's fan-out: the same delivery lands in two namespaces' queues; each
    copy is charged to its own queue identity only."""
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", namespace="a", queue="q", max_claims_per_window=5,
                   window=DAY_LA)  # fmt: skip
        for ns in ("a", "friend"):
            await call(core, "enqueue", namespace=ns, queue="q", type="t", unique_key="delivery")
        got_a = await call(core, "claim_next", namespace="a", queues=["q"])
        got_f = await call(core, "claim_next", namespace="friend", queues=["q"])
        assert got_a["jobs"][0]["admission"]["used"] == 1
        assert got_f["jobs"][0]["admission"] is None
        assert usage_rows(core) == [("q", usage_rows(core)[0][1], 1)]


# -- REQ-3 -----------------------------------------------------------------------------


async def test_a_retry_is_charged(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=10, window=DAY_LA)
        await enqueue(core, 1)
        [job] = await claimed(core)
        await call(core, "fail", job_id=job["id"], lease=job["lease"], error="x", retry_in_ms=1000)
        await trio.sleep(1.01)  # virtual time: autojump_clock
        got = await claim(core)
        assert got["jobs"][0]["admission"]["used"] == 2


async def test_a_takeover_is_charged(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=10, window=DAY_LA)
        await enqueue(core, 1)
        await claim(core, lease_ms=1000)
        await trio.sleep(1.5)  # virtual time: autojump_clock; the lease lapses
        got = await claim(core)
        assert got["jobs"][0]["job"]["attempts"] == 2
        assert got["jobs"][0]["admission"]["used"] == 2


async def test_release_does_not_refund(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=10, window=DAY_LA)
        await enqueue(core, 1)
        [job] = await claimed(core)
        await call(core, "release", job_id=job["id"], lease=job["lease"])
        status = (await call(core, "admission_status", queue="q"))["queues"][0]
        assert status["used"] == 1
        assert (await claim(core))["jobs"][0]["admission"]["used"] == 2


async def test_a_redelivery_is_free(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=10, window=DAY_LA)
        await enqueue(core, 1, unique_key="delivery-1")
        await enqueue(core, 1, unique_key="delivery-1")  # deduplicated onto the first
        assert (await call(core, "admission_status"))["queues"][0]["used"] == 0
        assert len(await claimed(core, 5)) == 1
        assert (await call(core, "admission_status"))["queues"][0]["used"] == 1


# -- REQ-4 -----------------------------------------------------------------------------


async def test_concurrent_claimers_cannot_exceed_the_limit(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=10, window=DAY_LA)
        await enqueue(core, 50)
        got: list[int] = []

        async def claimer() -> None:
            got.append(len(await claimed(core)))

        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(claimer)
        assert sum(got) == 10
        assert usage_rows(core)[0][2] == 10


async def test_in_flight_cap(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_in_flight=2)
        await enqueue(core, 3)
        first = await claimed(core)
        await claimed(core)
        third = await claim(core)
        assert third["jobs"] == [] and third["deferred"][0]["reason"] == "in_flight_full"
        assert third["deferred"][0]["next_eligible_at"] == first[0]["lease_expires_at"]
        await call(core, "complete", job_id=first[0]["id"], lease=first[0]["lease"])
        assert len(await claimed(core)) == 1


async def test_takeover_at_the_in_flight_cap(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core:
        await policy(core, max_in_flight=1)
        [job_id] = await enqueue(core, 1)
        await claim(core, lease_ms=1000)
        await trio.sleep(1.5)  # virtual time: lapsed, not reaped (no timers)
        got = await call(core, "claim", job_id=job_id)
        assert got["job"]["attempts"] == 2
        assert got["admission"]["in_flight"] == 1


async def test_one_deferred_queue_does_not_starve_the_others(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, "lane-s", max_claims_per_window=1, window=DAY_LA)
        await enqueue(core, 1, "lane-s")
        await claimed(core, 1, ("lane-s",))
        [oldest] = await enqueue(core, 1, "lane-s")
        [triage] = await enqueue(core, 1, "triage")
        got = await claimed(core, 1, ("lane-s", "triage"))
        assert [j["id"] for j in got] == [triage] and oldest != triage


# -- REQ-5 -----------------------------------------------------------------------------


async def test_a_pacific_day(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await at(core, ms(datetime(2023, 11, 15, 17, 0, tzinfo=LA)))
        await policy(core, max_claims_per_window=1, window=DAY_LA)
        await enqueue(core, 2)
        await claimed(core)
        midnight = ms(datetime(2023, 11, 16, 0, 0, tzinfo=LA))
        held = (await claim(core))["deferred"][0]
        assert (held["reason"], held["next_eligible_at"], held["exact"]) == (
            "window_exhausted", midnight, True)  # fmt: skip
        await at(core, midnight - 1)
        assert await claimed(core) == []
        await at(core, midnight)
        assert len(await claimed(core)) == 1


async def test_the_fall_back_day(tmp_path, autojump_clock):
    start = ms(datetime(2024, 11, 3, 0, 0, tzinfo=LA))
    end = ms(datetime(2024, 11, 4, 0, 0, tzinfo=LA))
    assert end - start == 25 * 3_600_000
    async with running_core(tmp_path, wall_start_ms=start + 1000) as core:
        await policy(core, max_claims_per_window=2, window=DAY_LA)
        await enqueue(core, 5)
        await claimed(core)
        await at(core, start + 24 * 3_600_000 + 60_000)  # 23:01 local: the same day
        await claimed(core)
        assert await claimed(core) == []  # one budget for the 25 hours
        status = (await call(core, "admission_status"))["queues"][0]
        assert (status["window_start_at"], status["window_resets_at"]) == (start, end)
        await at(core, end)
        assert len(await claimed(core)) == 1


async def test_hourly_window(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        window = {"period": "hour", "tz": "UTC", "start": "00:30"}
        await policy(core, max_claims_per_window=1, window=window)
        await enqueue(core, 3)
        await claimed(core)
        held = (await claim(core))["deferred"][0]
        # WALL0 is 22:13:20 UTC: the window began at 21:30 and ends at 22:30.
        assert held["next_eligible_at"] == WALL0 - 13 * 60_000 - 20_000 + 30 * 60_000
        assert (held["next_eligible_at"] // 60_000) % 60 == 30


# -- REQ-6 and REQ-7 -----------------------------------------------------------------------


async def test_an_exhausted_day_keeps_its_work(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=1, window=DAY_LA)
        await enqueue(core, 1)
        await claimed(core)
        ids = await enqueue(core, 40)
        await at(core, ms(datetime(2023, 11, 14, 23, 59, tzinfo=LA)))
        midnight = ms(datetime(2023, 11, 15, 0, 0, tzinfo=LA))
        jobs = (await call(core, "list", queue="q", status="pending", limit=100))["jobs"]
        assert sorted(j["id"] for j in jobs) == sorted(ids)
        for job in jobs:
            assert job["attempts"] == 0
            assert job["admission"] == {"state": "deferred", "reason": "window_exhausted",
                                        "next_eligible_at": midnight, "exact": True}  # fmt: skip


async def test_deferral_outlives_the_retry_backoff(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await at(core, ms(datetime(2023, 11, 15, 16, 0, tzinfo=LA)))
        await policy(core, max_claims_per_window=1, window=DAY_LA)
        [job_id] = await enqueue(core, 1)
        [job] = await claimed(core)
        await call(core, "fail", job_id=job_id, lease=job["lease"], error="x", retry_in_ms=60_000)
        await at(core, ms(datetime(2023, 11, 15, 16, 1, 1, tzinfo=LA)))
        back = (await call(core, "get", job_id=job_id))["job"]
        assert (back["status"], back["attempts"]) == ("pending", 1)
        assert back["admission"]["reason"] == "window_exhausted"
        assert await claimed(core) == []
        await at(core, ms(datetime(2023, 11, 16, 0, 0, tzinfo=LA)))
        assert [j["attempts"] for j in await claimed(core)] == [2]


async def test_a_worker_is_told_to_wait_not_to_poll(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=1, window=DAY_LA)
        await enqueue(core, 13)
        await claimed(core)
        got = await claim(core)
        assert got == {"jobs": [], "empty": True, "deferred": [{
            "queue": "q", "reason": "window_exhausted", "pending": 12,
            "next_eligible_at": ms(datetime(2023, 11, 15, 0, 0, tzinfo=LA)), "exact": True,
        }]}  # fmt: skip


async def test_headroom_on_a_successful_claim(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=100, window=DAY_LA)
        await enqueue(core, 73)
        await claimed(core, 72)
        got = (await claim(core))["jobs"][0]["admission"]
        assert got == {
            "max_in_flight": None, "in_flight": 73, "max_claims_per_window": 100, "used": 73,
            "remaining": 27, "window_resets_at": ms(datetime(2023, 11, 15, 0, 0, tzinfo=LA)),
        }  # fmt: skip


async def test_a_specific_claim_in_a_deferred_queue(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_in_flight=0)
        [job_id] = await enqueue(core, 1)
        with pytest.raises(Refused) as info:
            await call(core, "claim", job_id=job_id)
        assert info.value.code == "deferred"
        assert info.value.details == {"queue": "q", "reason": "paused",
                                      "next_eligible_at": None, "exact": False}  # fmt: skip
        job = (await call(core, "get", job_id=job_id))["job"]
        assert (job["status"], job["attempts"]) == ("pending", 0)
        assert usage_rows(core) == []


async def exhausted_and_watched(core: Core, waiting_jobs: int = 0) -> tuple[list, list, Any]:
    """A daily budget of 1, spent; ``waiting_jobs`` more enqueued; a subscriber's
    events, and a waiting claim (to start) with its answers."""
    await policy(core, max_claims_per_window=1, window=DAY_LA)
    await enqueue(core, 1)
    await claimed(core)
    if waiting_jobs:
        await enqueue(core, waiting_jobs)
    events: list[dict] = []
    core.router.subscribe(object(), [("default", "q")], events.append)
    got: list[Any] = []

    async def wait() -> None:
        got.append(await claim(core, wait_ms=3_600_000))

    return events, got, wait


# -- REQ-8 -----------------------------------------------------------------------------


async def test_no_wake_up_for_work_that_cannot_be_claimed(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        events, got, wait = await exhausted_and_watched(core)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(1)  # virtual time: autojump_clock
            await enqueue(core, 1)
            await trio.sleep(1)  # virtual time: autojump_clock
            assert events == [] and got == []
            nursery.cancel_scope.cancel()


async def test_one_ring_at_midnight(tmp_path, autojump_clock):
    midnight = ms(datetime(2023, 11, 15, 0, 0, tzinfo=LA))
    async with running_core(tmp_path, wall_start_ms=midnight - 1_800_000) as core:
        events, got, wait = await exhausted_and_watched(core, waiting_jobs=40)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
        assert core.clock.now_ms() - midnight < 50  # served at the boundary
        assert len(got[0]["jobs"]) == 1
        assert events == [{"event": "doorbell", "queue": "q", "pending": 40}]


async def test_a_freed_slot_and_a_raised_policy_reopen(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_in_flight=1)
        await enqueue(core, 3)
        [job] = await claimed(core)
        events: list[dict] = []
        core.router.subscribe(object(), [("default", "q")], events.append)
        await call(core, "complete", job_id=job["id"], lease=job["lease"])
        assert len(events) == 1  # a freed slot
        await claimed(core)
        await policy(core, max_in_flight=5)
        assert len(events) == 2  # a raised limit
        assert len(await claimed(core, 5)) == 1


# -- REQ-9 -----------------------------------------------------------------------------


async def test_a_policy_that_cannot_be_evaluated(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, "bad", max_claims_per_window=5, window=DAY_LA)
        await enqueue(core, 1, "bad")
        await enqueue(core, 1, "good")
    # The stored zone is unknown to the embedded database (an older daemon's, say).
    import sqlite3

    conn = sqlite3.connect(tmp_path / "db.sqlite")
    conn.execute("UPDATE policies SET policy = replace(policy, 'America/Los_Angeles', 'Mars/X')")
    conn.commit()
    conn.close()
    async with running_core(tmp_path) as core:
        got = await claim(core, 5, ("bad", "good"))
        assert [j["job"]["queue"] for j in got["jobs"]] == ["good"]
        empty = await claim(core, 5, ("bad",))
        assert empty["deferred"][0]["reason"] == "admission_unavailable"
        status = (await call(core, "admission_status", queue="bad"))["queues"][0]
        assert status["status"]["reason"] == "admission_unavailable"
        sample = core.metrics.registry.get_sample_value
        assert sample("sluicegate_admission_refusals_total",
                      {"queue": "bad", "reason": "admission_unavailable"}) >= 1  # fmt: skip


# -- REQ-10 ----------------------------------------------------------------------------


async def test_lowering_mid_window(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=100, window=DAY_LA)
        await enqueue(core, 70)
        assert len(await claimed(core, 60)) == 60
        await policy(core, max_claims_per_window=50, window=DAY_LA)
        assert await claimed(core, 10) == []
        running = core.conn.execute("SELECT count(*) FROM jobs WHERE state = 'running'")
        assert running.fetchone()[0] == 60  # the 60 claims stand
        audit = core.conn.execute(
            "SELECT action, before, after FROM audit WHERE target_kind = 'queue' ORDER BY id"
        ).fetchall()
        assert [a[0] for a in audit] == ["set_policy", "set_policy"]
        assert '"max_claims_per_window":100' in audit[1][1]
        assert '"max_claims_per_window":50' in audit[1][2]


async def test_a_window_change_counts_in_the_new_window(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=2, window=DAY_LA)
        await enqueue(core, 5)
        await claimed(core, 2)
        await policy(core, max_claims_per_window=2, window={**DAY_LA, "tz": "Europe/Berlin"})
        assert len(await claimed(core, 5)) == 2


async def test_policy_writes_are_limited_per_token(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        for i in range(10):
            await policy(core, max_in_flight=i + 1)
        with pytest.raises(Refused) as info:
            await policy(core, max_in_flight=20)
        assert (info.value.code, info.value.details["retry_after"]) == ("rate_limited", 1)
        await trio.sleep(1)  # virtual time: autojump_clock
        await policy(core, max_in_flight=20)


# -- REQ-11 (the data the board shows; the board itself is issue 7) ---------------


async def test_the_owner_sees_why_work_waits(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, "investigations", max_claims_per_window=100, window=DAY_LA)
        await enqueue(core, 112, "investigations")
        assert len(await claimed(core, 100, ("investigations",))) == 100
        midnight = ms(datetime(2023, 11, 15, 0, 0, tzinfo=LA))
        [header] = (await call(core, "admission_status", queue="investigations"))["queues"]
        assert (header["used"], header["policy"]["max_claims_per_window"]) == (100, 100)
        assert header["window_resets_at"] == midnight and header["pending"] == 12
        assert header["status"]["reason"] == "window_exhausted"
        cards = (await call(core, "list", queue="investigations", status="pending"))["jobs"]
        assert len(cards) == 12
        assert all(c["admission"]["reason"] == "window_exhausted"
                   and c["admission"]["next_eligible_at"] == midnight for c in cards)  # fmt: skip


# -- REQ-12 and REQ-13 ------------------------------------------------------------------------


async def test_charges_match_claims(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=100, window=DAY_LA)
        await enqueue(core, 40)
        for _ in range(8):
            await claimed(core, 5)
        sample = core.metrics.registry.get_sample_value
        assert sample("sluicegate_admission_charged_total", {"queue": "q"}) == 40
        assert sample("sluicegate_jobs_claimed_total", {"queue": "q"}) == 40
        statuses = {s: sample("sluicegate_admission_policies", {"queue": "q", "status": s})
                    for s in ("admitted", "window_exhausted", "in_flight_full", "paused",
                              "admission_unavailable")}  # fmt: skip
        assert statuses == {"admitted": 1, "window_exhausted": 0, "in_flight_full": 0,
                            "paused": 0, "admission_unavailable": 0}  # fmt: skip


async def test_a_budget_shows_up_in_grafana(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=1, window=DAY_LA)
        await enqueue(core, 31)
        await claimed(core)
        sample = core.metrics.registry.get_sample_value
        assert sample("sluicegate_admission_policies",
                      {"queue": "q", "status": "window_exhausted"}) == 1  # fmt: skip
        assert sample("sluicegate_admission_deferred_jobs",
                      {"queue": "q", "reason": "window_exhausted"}) == 30  # fmt: skip


async def test_a_cancelled_claim_charges_nothing(tmp_path, autojump_clock):
    """REQ-13. A claim is one synchronous write: cancelled before it runs, it is
    withdrawn (nothing charged, nothing claimed); once it ran, it committed whole.
    Either way the charges equal the claims, in memory and in the store."""
    async with running_core(tmp_path) as core:
        await policy(core, max_claims_per_window=100, window=DAY_LA)
        await enqueue(core, 30)
        for _ in range(30):
            with trio.CancelScope() as scope:
                scope.cancel()
                await claim(core)
        running = core.conn.execute("SELECT count(*) FROM jobs WHERE state = 'running'")
        claimed_jobs = running.fetchone()[0]
        stored = sum(row[2] for row in usage_rows(core))
        assert stored == claimed_jobs == core.policies.get("default", "q").meters[0].used  # type: ignore[union-attr]
        assert claimed_jobs < 30  # some were withdrawn before their transaction ran
