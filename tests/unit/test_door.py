"""The door (seed 001) through the real core on MockClock: request and message
buckets, the size cap, shadow mode."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from actors.errors import Refused
from daemon.config import parse_config
from daemon.core import Core
from tests.unit.harness import call, running_core


async def door(core: Core, **doc: Any) -> None:
    await call(core, "quota_set", quota=doc)


async def refused(coro: Any) -> Refused:
    with pytest.raises(Refused) as info:
        await coro
    return info.value


def decisions(core: Core, limit: str, outcome: str) -> float:
    sample = core.metrics.registry.get_sample_value
    return sample("sluicegate_door_decisions_total", {"limit": limit, "outcome": outcome}) or 0


async def test_the_request_bucket_charges_one_per_request_and_refills(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await door(core, request_rate={"capacity": 3, "refill_per_s": 1})
        for _ in range(3):
            await call(core, "status")
        limited = await refused(call(core, "list"))
        assert (limited.code, limited.status, limited.message) == (
            "rate_limited", 429, "request rate limit exceeded")  # fmt: skip
        assert limited.details == {"limit": "request_rate", "retry_after": 1}
        await refused(call(core, "status"))  # a denial does not debit...
        await trio.sleep(1)  # virtual time: autojump_clock
        await call(core, "status")  # ...so one second refills exactly one
        assert decisions(core, "request_rate", "blocked") == 2


async def test_an_unlimited_door_touches_no_state(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await door(core, max_pending=100)
        for _ in range(5):
            await call(core, "status")
        assert core.namespaces.get("default").buckets == {}


async def test_raising_the_capacity_keeps_the_count(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await door(core, request_rate={"capacity": 2, "refill_per_s": 0.001})
        await call(core, "status")  # the quota_set took one, this the other
        await door(core, request_rate={"capacity": 100, "refill_per_s": 0.001})
        assert (await refused(call(core, "status"))).code == "rate_limited"


async def test_messages_charge_enqueued_jobs_and_deliveries_after_the_fact(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        await door(core, message_rate={"capacity": 5, "refill_per_s": 1})
        jobs = [{"queue": "q", "type": "t"}] * 5
        await call(core, "enqueue_many", jobs=jobs)
        limited = await refused(call(core, "enqueue", queue="q", type="t"))
        assert limited.message == "message rate limit exceeded"
        await trio.sleep(3)  # virtual time: autojump_clock; 3 tokens back
        got = await call(core, "claim_next", queues=["q"], max=5)  # allowed, then debited
        assert len(got["jobs"]) == 5
        assert core.door.describe("default")["message_rate"] == -2
        limited = await refused(call(core, "enqueue", queue="q", type="t"))
        assert limited.details["retry_after"] == 3  # back above zero, then one more


async def test_the_size_cap_measures_compact_json_and_holds_in_shadow_mode(
    tmp_path, autojump_clock
):
    config = parse_config({"daemon": {"enforce": False}}, "t.toml")
    async with running_core(tmp_path, config=config) as core:
        await door(core, max_item_bytes=7)
        await call(core, "enqueue", queue="q", type="t", payload={"a": 1})  # 7 bytes: fits
        await door(core, max_item_bytes=6)
        over = await refused(call(core, "enqueue", queue="q", type="t", payload={"a": 1}))
        assert (over.code, over.status, over.message) == (
            "payload_too_large", 413, "max_item_bytes exceeded: 7 > 6")  # fmt: skip
        assert over.details == {"limit": "max_item_bytes", "value": 7, "max": 6}
        # Non-ASCII is counted as its UTF-8 bytes, unescaped: "é" is 2 bytes + 2 quotes.
        await door(core, max_item_bytes=4)
        job = (await call(core, "enqueue", queue="q", type="t", payload="é"))["job"]
        assert job["payload"] == "é"  # the measured text is the one stored
        assert core.conn.execute("SELECT payload FROM jobs WHERE id = ?",
                                 (job["id"],)).fetchone() == ('"é"',)  # fmt: skip
        await door(core, max_item_bytes=3)  # 3 characters, but 4 bytes
        over = await refused(call(core, "enqueue", queue="q", type="t", payload="é"))
        assert over.details == {"limit": "max_item_bytes", "value": 4, "max": 3}


async def test_shadow_mode_logs_and_counts_and_lets_it_through(tmp_path, autojump_clock, caplog):
    config = parse_config({"daemon": {"enforce": False}}, "t.toml")
    async with running_core(tmp_path, config=config) as core:
        await door(core, request_rate={"capacity": 1, "refill_per_s": 0.01})
        with caplog.at_level(logging.INFO, logger="sluicegate.limits"):
            for _ in range(3):
                await call(core, "status")
        # The first took the one token; the other two would have been refused.
        lines = [r.getMessage() for r in caplog.records if r.name == "sluicegate.limits"]
        assert lines == ["limits namespace=default limit=request_rate would_block=true"] * 2
        assert decisions(core, "request_rate", "would_block") == 2
        assert decisions(core, "request_rate", "allowed") == 1


async def test_the_queue_cap_counts_the_namespaces_queues(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await door(core, max_queues=2)
        await call(core, "enqueue", queue="a", type="t")
        await call(core, "queue_configure", queue="b")
        await call(core, "enqueue", queue="a", type="t")  # a known queue: a set lookup
        over = await refused(call(core, "enqueue", queue="c", type="t"))
        assert (over.code, over.status, over.message) == (
            "quota_exceeded", 403, "max_queues exceeded: 3 > 2")  # fmt: skip
        assert over.details == {"limit": "max_queues", "value": 3, "max": 2}
        assert (await refused(call(core, "queue_configure", queue="d"))).code == "quota_exceeded"
        assert core.conn.execute("SELECT count(*) FROM queues").fetchone()[0] == 2


async def test_the_retention_ceiling_refuses_never_clamps(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await door(core, max_retention_ms=3_600_000)
        over = await refused(call(core, "queue_configure", queue="q", completed_ttl_ms=7_200_000))
        assert over.message == "max_retention_ms exceeded: completed_ttl_ms 7200000 > 3600000"
        assert over.details == {"limit": "max_retention_ms", "value": 7_200_000, "max": 3_600_000}
        for ttl in (None, 0, -5, 3_600_000):  # absent, default, or within: allowed
            await call(core, "queue_configure", queue="q", dead_ttl_ms=ttl)


async def test_waiting_claim_slots_are_held_across_the_wait_and_released(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await door(core, max_waiting_claims=1)
        actor = core.namespaces.get("default")
        got: list[Any] = []

        async def wait() -> None:
            got.append(await call(core, "claim_next", queues=["q"], wait_ms=60_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(1)  # virtual time: autojump_clock
            assert actor.waiting == 1
            over = await refused(call(core, "claim_next", queues=["q"], wait_ms=1000))
            assert (over.code, over.status, over.details["retry_after"]) == (
                "too_many_waiters", 429, 5)  # fmt: skip
            assert core.router.statistics().waiters == 1  # the refused one left no waiter
            await call(core, "enqueue", queue="q", type="t")  # answers the wait
        assert len(got[0]["jobs"]) == 1 and actor.waiting == 0
        with trio.CancelScope() as scope:  # a cancelled wait gives its slot back too
            scope.deadline = trio.current_time() + 1
            await call(core, "claim_next", queues=["q"], wait_ms=60_000)
        assert actor.waiting == 0
        await call(core, "claim_next", queues=["q"], wait_ms=10)  # a timed-out one as well
        assert actor.waiting == 0


async def test_shadow_mode_grants_a_slot_over_the_cap_and_counts_it(tmp_path, autojump_clock):
    config = parse_config({"daemon": {"enforce": False}}, "t.toml")
    async with running_core(tmp_path, config=config) as core:
        await door(core, max_waiting_claims=0, max_queues=0)
        await call(core, "enqueue", queue="q", type="t")  # over max_queues: let through
        await call(core, "claim_next", queues=["q"])
        await call(core, "claim_next", queues=["q"], wait_ms=10)
        assert decisions(core, "max_waiting_claims", "would_block") == 1
        assert decisions(core, "max_queues", "would_block") == 1


async def test_idle_buckets_are_pruned_lazily_but_not_while_claims_wait(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await door(core, request_rate={"capacity": 1000, "refill_per_s": 1})
        await call(core, "status")  # makes default's bucket
        await call(core, "status", namespace="idle")  # no quota there: no bucket
        assert core.namespaces.get("idle").buckets == {}
        actor = core.namespaces.get("default")
        assert set(actor.buckets) == {"request_rate"}
        await trio.sleep(599)  # virtual time: autojump_clock
        await call(core, "status", namespace="other")  # a sweep, but not idle long enough
        assert set(actor.buckets) == {"request_rate"}
        actor.waiting = 1  # a waiting claim keeps its namespace's buckets
        await trio.sleep(200)  # virtual time: autojump_clock
        await call(core, "status", namespace="other")
        assert set(actor.buckets) == {"request_rate"}
        actor.waiting = 0
        await trio.sleep(121)  # virtual time: autojump_clock
        await call(core, "status", namespace="other")
        assert actor.buckets == {} and actor.bucket_specs == {}


async def test_a_share_of_the_limit_scales_rate_burst_and_waiting_slots(tmp_path, autojump_clock):
    """One of n daemons sharing a database takes 1/n (daemon.admission.membership):
    a smaller share clamps the bucket at once and never adds tokens."""
    async with running_core(tmp_path) as core:
        await door(core, request_rate={"capacity": 8, "refill_per_s": 2}, max_waiting_claims=5)
        core.door.set_share(0.5)
        for _ in range(4):  # a burst of 8 / 2
            await call(core, "status")
        await refused(call(core, "status"))
        await trio.sleep(1)  # virtual time: autojump_clock; refills 2 / 2 = 1
        await call(core, "status")
        await refused(call(core, "status"))
        core.door.set_share(1.0)  # the other daemon lapsed: its share is this one's now
        await trio.sleep(1)  # virtual time: autojump_clock
        await call(core, "status")  # the second before the bucket's update: at 1 a second
        await refused(call(core, "status"))
        await trio.sleep(1)  # virtual time: autojump_clock; 2 a second from the update
        await call(core, "status")
        await call(core, "status")
        await refused(call(core, "status"))
        core.door.set_share(1 / 3)  # a third daemon: 5 slots / 3, rounded down
        release = core.door.wait_slot("default")
        with pytest.raises(Refused) as info:
            core.door.wait_slot("default")
        assert info.value.code == "too_many_waiters"
        release()
