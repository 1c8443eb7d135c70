"""daemon/verbs/producing.py on a Core: enqueue, enqueue_many, unique_key, debounce."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.errors import Refused
from daemon.verbs.producing import ensure_queue
from tests.unit.harness import (
    WALL0,
    call,
    db_counts,
    enqueue_answer,
    job_row,
    mem_counts,
    running_core,
    sleep_to,
)


def _job_count(core) -> int:
    return core.conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


async def test_enqueue_answers_the_job_object(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            answer = await enqueue_answer(core, payload={"n": 1}, priority=7, max_attempts=3)
            assert (answer["duplicate"], answer["folded"], answer["shed"]) == (False, False, False)
            job = answer["job"]
            assert {k: job[k] for k in ("namespace", "queue", "type", "payload", "priority",
                                        "status", "attempts", "max_attempts", "ready_at",
                                        "created_at", "lease", "unique_key", "dead")} == {
                "namespace": "default", "queue": "q", "type": "t", "payload": {"n": 1},
                "priority": 7, "status": "pending", "attempts": 0, "max_attempts": 3,
                "ready_at": WALL0, "created_at": WALL0, "lease": None, "unique_key": None,
                "dead": None,
            }  # fmt: skip
            assert (await call(core, "get", job_id=job["id"]))["job"] == job
            assert ("default", "q") in core.known_queues


async def test_unique_key_returns_the_live_job_as_duplicate(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            first = await enqueue_answer(core, unique_key="u", payload={"v": 1})
            again = await enqueue_answer(core, unique_key="u", payload={"v": 2})
            assert again["duplicate"] and not again["folded"]
            assert again["job"]["id"] == first["job"]["id"]
            assert _job_count(core) == 1
            # Another queue is another key space.
            other = await enqueue_answer(core, queue="r", unique_key="u")
            assert not other["duplicate"]
            # Still a duplicate while running; a new job once it completed.
            claimed = (await call(core, "claim_next", queues=["q"]))["jobs"][0]["job"]
            assert (await enqueue_answer(core, unique_key="u"))["duplicate"]
            await call(core, "complete", job_id=claimed["id"], lease=claimed["lease"])
            fresh = await enqueue_answer(core, unique_key="u")
            assert not fresh["duplicate"] and fresh["job"]["id"] != first["job"]["id"]


async def test_unique_key_within_one_batch(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            answer = await call(core, "enqueue_many", jobs=[
                {"queue": "q", "type": "t", "unique_key": "u"},
                {"queue": "q", "type": "t"},
                {"queue": "q", "type": "t", "unique_key": "u"},
            ])  # fmt: skip
            results = answer["results"]
            assert [r["duplicate"] for r in results] == [False, False, True]
            assert results[2]["job"]["id"] == results[0]["job"]["id"]
            assert _job_count(core) == 2
            assert mem_counts(core) == db_counts(core)


async def test_concurrent_unique_enqueues_land_once(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            answers = []

            async def producer():
                answers.append(await enqueue_answer(core, unique_key="u"))

            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(producer)
            assert sorted(a["duplicate"] for a in answers) == [False] + [True] * 9
            assert len({a["job"]["id"] for a in answers}) == 1
            assert _job_count(core) == 1


async def test_debounce_folds_a_waiting_duplicate(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            first = await enqueue_answer(core, unique_key="u", debounce_ms=1_000, payload={"v": 1})
            assert first["job"]["status"] == "scheduled"
            assert first["job"]["ready_at"] == WALL0 + 1_000
            await sleep_to(core, 0.5)
            folded = await enqueue_answer(core, unique_key="u", debounce_ms=1_000, payload={"v": 2})
            assert folded["folded"] and not folded["duplicate"]
            assert folded["job"]["id"] == first["job"]["id"]
            assert folded["job"]["payload"] == {"v": 2}
            assert folded["job"]["ready_at"] == WALL0 + 1_500
            await sleep_to(core, 1.0)
            assert job_row(core, first["job"]["id"])["state"] == "scheduled"
            await sleep_to(core, 1.499)
            assert job_row(core, first["job"]["id"])["state"] == "scheduled"
            await sleep_to(core, 1.5)
            assert job_row(core, first["job"]["id"])["state"] == "pending"
            got = (await call(core, "get", job_id=first["job"]["id"]))["job"]
            assert got["payload"] == {"v": 2}
            assert _job_count(core) == 1
            assert mem_counts(core) == db_counts(core)


async def test_debounce_folds_a_pending_job_back_to_scheduled(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            first = await enqueue_answer(core, unique_key="u")
            assert first["job"]["status"] == "pending"
            folded = await enqueue_answer(core, unique_key="u", debounce_ms=2_000, payload={"v": 3})
            assert folded["folded"] and folded["job"]["status"] == "scheduled"
            assert core.counts.queue(("default", "q"))["scheduled"] == 1
            assert core.counts.queue(("default", "q"))["pending"] == 0
            await sleep_to(core, 2.0)
            assert job_row(core, first["job"]["id"])["state"] == "pending"


async def test_debounce_does_not_fold_a_running_job(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            first = await enqueue_answer(core, unique_key="u")
            await call(core, "claim_next", queues=["q"])
            again = await enqueue_answer(core, unique_key="u", debounce_ms=1_000, payload={"v": 9})
            assert again["duplicate"] and not again["folded"]
            assert again["job"]["id"] == first["job"]["id"]
            assert again["job"]["status"] == "running"
            got = (await call(core, "get", job_id=first["job"]["id"]))["job"]
            assert got["payload"] == {}


async def test_a_duplicate_answers_the_stored_job_object(tmp_path, autojump_clock):
    # The stored job, not this call's payload (a duplicate writes nothing).
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            first = await enqueue_answer(core, unique_key="u", payload={"v": 1})
            again = await enqueue_answer(core, unique_key="u", payload={"v": 2})
            assert again["duplicate"]
            assert again["job"] == (await call(core, "get", job_id=first["job"]["id"]))["job"]
            assert again["job"]["payload"] == {"v": 1}


async def test_enqueue_many_lands_as_a_unit(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            answer = await call(core, "enqueue_many", jobs=[
                {"queue": "a", "type": "t"}, {"queue": "b", "type": "t", "delay_ms": 1_000},
            ])  # fmt: skip
            assert [r["job"]["status"] for r in answer["results"]] == ["pending", "scheduled"]
            ids = [r["job"]["id"] for r in answer["results"]]
            assert ids == sorted(ids)
            with pytest.raises(Refused) as info:
                await call(core, "enqueue_many", jobs=[
                    {"queue": "a", "type": "t"}, {"queue": "a", "type": "t", "priority": -1},
                ])  # fmt: skip
            assert info.value.code == "invalid_argument"
            assert _job_count(core) == 2


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"queue": "q", "type": "t", "delay_ms": 1, "ready_at": 1}, "delay_ms"),
        ({"queue": "q", "type": "t", "debounce_ms": 1}, "debounce_ms"),
        ({"queue": "bad q", "type": "t"}, "queue"),
        ({"queue": "q", "type": "t", "priority": 65536}, "priority"),
        ({"queue": "q", "type": "t", "budgets": [{"key": "b", "cost": 0}]}, "budgets[0].cost"),
        ({"queue": "q", "type": "t", "budgets": [{"key": "b"}, {"key": "b"}]}, "budgets"),
        ({"queue": "q"}, "type"),
        ({"queue": "q", "type": "t", "extra": 1}, "extra"),
    ],
)
async def test_bad_arguments_are_refused_and_write_nothing(tmp_path, autojump_clock, args, field):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            commits = core.writer.commits
            with pytest.raises(Refused) as info:
                await call(core, "enqueue", **args)
            assert info.value.code == "invalid_argument"
            assert info.value.details["field"] == field
            assert _job_count(core) == 0
            assert core.writer.commits == commits


async def test_enqueue_while_draining_is_refused(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            core.drain()
            with pytest.raises(Refused) as info:
                await enqueue_answer(core)
            assert info.value.code == "shutting_down"
            assert _job_count(core) == 0


async def test_ids_sort_by_creation(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            ids = []
            for _ in range(5):
                ids.append((await enqueue_answer(core))["job"]["id"])
                ids.append((await enqueue_answer(core))["job"]["id"])
                await trio.sleep(0.001)
            assert ids == sorted(ids) and len(set(ids)) == 10


@pytest.mark.parametrize(
    ("op", "args", "field"),
    [
        ("enqueue", {"delay_ms": 2**64}, "delay_ms"),
        ("enqueue", {"delay_ms": 2**63 - 1}, "delay_ms"),  # now + it would overflow the store
        ("enqueue", {"ready_at": 253_402_300_800_000}, "ready_at"),  # after year 9999
        ("enqueue", {"debounce_ms": 2**64, "unique_key": "k"}, "debounce_ms"),
        ("queue_configure", {"completed_ttl_ms": 2**64}, "completed_ttl_ms"),
        ("queue_configure", {"dead_ttl_ms": -(2**64)}, "dead_ttl_ms"),
        ("audit_list", {"after": 2**63}, "after"),
    ],
)
async def test_integers_past_the_stores_range_are_invalid_not_internal(
    tmp_path, autojump_clock, op, args, field
):
    # Found by schemathesis: these once reached SQLite and came back "internal".
    base = {"queue": "q", "type": "t"} if op == "enqueue" else {"queue": "q"}
    async with running_core(tmp_path) as core:
        with pytest.raises(Refused) as info:
            await call(core, op, **({} if op == "audit_list" else base), **args)
        assert (info.value.code, info.value.details.get("field")) == ("invalid_argument", field)


async def test_a_new_queue_is_recorded_once_per_batch_and_forgotten_with_its_write(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, timers=False) as core:
        statements: list[str] = []
        core.conn.set_trace_callback(statements.append)
        await call(core, "enqueue_many", jobs=[{"queue": "fresh", "type": "t"}] * 50)
        core.conn.set_trace_callback(None)
        assert sum("INSERT INTO queues" in s for s in statements) == 1
        assert ("default", "fresh") in core.known_queues

        def refused_after_recording(tx):
            ensure_queue(core.known_queues, tx, "default", "gone")
            raise Refused("conflict", "refused after the queue was recorded")

        with pytest.raises(Refused):
            await core.writer.write(refused_after_recording)
        assert ("default", "gone") not in core.known_queues
        assert (
            core.conn.execute("SELECT count(*) FROM queues WHERE queue = 'gone'").fetchone()[0] == 0
        )
