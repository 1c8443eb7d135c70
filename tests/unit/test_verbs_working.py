"""daemon/verbs/working.py on a Core: claims, waiting claims, fail, release."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors import lifecycle as lc
from actors.errors import Refused
from tests.unit.harness import (
    WALL0,
    call,
    claim_jobs,
    db_counts,
    enqueue_job,
    job_row,
    mem_counts,
    running_core,
    sleep_to,
    t0,
)

# -- waiting claims --------------------------------------------------------------


async def test_one_waiter_per_enqueued_job_never_a_herd(tmp_path, autojump_clock):
    with trio.fail_after(1_000):
        async with running_core(tmp_path) as core:
            answers: dict[int, tuple[float, dict]] = {}

            async def waiter(i):
                answer = await call(core, "claim_next", queues=["q"], wait_ms=60_000)
                answers[i] = (trio.current_time() - t0(core), answer)

            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(waiter, i)
                await trio.testing.wait_all_tasks_blocked()
                assert core.router.statistics().waiters == 5
                await sleep_to(core, 1.0)
                await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 2)
                await trio.testing.wait_all_tasks_blocked()
                assert len(answers) == 2
                assert all(at == 1.0 and len(a["jobs"]) == 1 for at, a in answers.values())
                assert core.router.statistics().waiters == 3
                await sleep_to(core, 59.999)
                assert len(answers) == 2
            assert len(answers) == 5
            empty = [(at, a) for at, a in answers.values() if not a["jobs"]]
            assert empty == [(60.0, {"jobs": [], "empty": True})] * 3
            claimed = {a["jobs"][0]["job"]["id"] for _, a in answers.values() if a["jobs"]}
            assert len(claimed) == 2
            assert core.router.statistics().waiters == 0


async def test_a_waiting_claim_is_woken_by_an_enqueue_on_any_of_its_queues(
    tmp_path, autojump_clock
):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            got = []

            async def waiter():
                got.append(await claim_jobs(core, queues=["a", "b"], wait_ms=30_000))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await sleep_to(core, 2.0)
                job = await enqueue_job(core, queue="b")
                await trio.testing.wait_all_tasks_blocked()
                assert [[j["id"] for j in jobs] for jobs in got] == [[job["id"]]]
                assert trio.current_time() - t0(core) == 2.0


async def test_wait_ms_zero_answers_empty_at_once(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            answer = await call(core, "claim_next", queues=["q"])
            assert answer == {"jobs": [], "empty": True}
            assert trio.current_time() == t0(core)


async def test_a_waiting_claim_times_out_at_exactly_wait_ms(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await sleep_to(core, 1.0)
            answer = await call(core, "claim_next", queues=["q"], wait_ms=2_500)
            assert answer == {"jobs": [], "empty": True}
            assert trio.current_time() - t0(core) == 3.5


async def test_drain_answers_waiting_claims_empty(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            answers = []

            async def waiter():
                answers.append(await call(core, "claim_next", queues=["q"], wait_ms=60_000))

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(waiter)
                await sleep_to(core, 1.0)
                core.drain()
            assert answers == [{"jobs": [], "empty": True}] * 3
            assert trio.current_time() - t0(core) == 1.0


async def test_a_claim_cancelled_mid_commit_leaves_the_job_claimable(tmp_path, autojump_clock):
    with trio.fail_after(100):
        # Nothing runs yet: writes wait in the batch until the test starts the committer.
        async with running_core(tmp_path, timers=False, writer=False) as core:
            enqueued: list = []
            got: list = []
            async with trio.open_nursery() as nursery:
                caller = trio.CancelScope()

                async def claimer():
                    with caller:
                        got.extend(await claim_jobs(core))

                async def producer():
                    enqueued.append(await enqueue_job(core))

                nursery.start_soon(producer)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(claimer)
                await trio.testing.wait_all_tasks_blocked()
                # Both writes are submitted (enqueue first): cancel the claim's caller.
                assert len(core.writer._queue) == 2
                caller.cancel()
                await trio.testing.wait_all_tasks_blocked()
                await nursery.start(core.writer.run)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            (job,) = enqueued
            # Either the caller heard of its claim, or nothing was claimed.
            row = job_row(core, job["id"])
            assert [j["id"] for j in got] == [job["id"]] or (
                row["state"] == "pending" and row["attempts"] == 0
            ), row


# -- concurrency and group commits -----------------------------------------------


async def test_concurrent_claims_never_hand_out_a_job_twice(tmp_path, autojump_clock):
    with trio.fail_after(1_000):
        async with running_core(tmp_path) as core:
            for _ in range(4):
                await call(core, "enqueue_many",
                           jobs=[{"queue": q, "type": "t"} for q in ["a", "b"] * 25])  # fmt: skip
            claimed: list[str] = []

            async def worker(i):
                while True:
                    jobs = await claim_jobs(core, queues=["a", "b"], max=1 + i % 3)
                    if not jobs:
                        return
                    claimed.extend(j["id"] for j in jobs)
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(worker, i)
            assert len(claimed) == 200
            assert len(set(claimed)) == 200
            states = core.conn.execute("SELECT state, attempts, count(*) FROM jobs GROUP BY 1, 2")
            assert states.fetchall() == [("running", 1, 200)]
            assert mem_counts(core) == db_counts(core)


async def test_concurrent_enqueues_share_one_commit(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            # A transaction grows for 1 ms of wall time: on a busy machine a round
            # may need two. The round, not the machine's speed, is what is shown here.
            core.writer._budget = 3600.0
            await enqueue_job(core)  # the queue exists: nothing else is written
            before = core.writer.commits
            ids: list[str] = []

            async def producer(i):
                ids.append((await enqueue_job(core, payload={"i": i}))["id"])

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(producer, i)
            assert core.writer.commits == before + 1
            assert len(set(ids)) == 20
            assert core.counts.get(("default", "q"), "pending") == 21


async def test_a_refused_write_in_a_batch_rolls_back_alone(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            # A transaction grows for 1 ms of wall time: on a busy machine a round
            # may need two. The round, not the machine's speed, is what is shown here.
            core.writer._budget = 3600.0
            dead = await enqueue_job(core, max_attempts=1)
            (claimed,) = await claim_jobs(core)
            await call(core, "fail", job_id=dead["id"], lease=claimed["lease"], error="x")
            pending = await enqueue_job(core)
            before = core.writer.commits
            outcomes: dict[str, object] = {}

            async def replay():
                # Replays the dead job, then meets a pending one: refused as a whole.
                try:
                    await call(core, "dead_replay", job_ids=[dead["id"], pending["id"]])
                except Refused as exc:
                    outcomes["replay"] = exc.code

            async def producer(i):
                outcomes[i] = (await enqueue_job(core, queue="other"))["status"]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(producer, 0)
                nursery.start_soon(replay)
                nursery.start_soon(producer, 1)
                nursery.start_soon(producer, 2)
            assert core.writer.commits == before + 1
            assert outcomes == {0: "pending", 1: "pending", 2: "pending", "replay": "conflict"}
            assert job_row(core, dead["id"])["state"] == "dead"
            assert job_row(core, pending["id"])["state"] == "pending"
            assert core.counts.get(("default", "other"), "pending") == 3
            assert mem_counts(core) == db_counts(core)


# -- claim order -----------------------------------------------------------------


async def test_claims_follow_priority_then_ready_at_then_id(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            spec = [  # (name, priority, ready_at offset)
                ("p5-late", 5, -100), ("p1", 1, -50), ("p5-early", 5, -200),
                ("p5-late-2", 5, -100), ("default", None, -900), ("p0", 0, 0),
                ("p5-late-3", 5, -100),
            ]  # fmt: skip
            names = {}
            for name, priority, offset in spec:
                args = {"ready_at": WALL0 + offset, "payload": name}
                if priority is not None:
                    args["priority"] = priority
                names[(await enqueue_job(core, **args))["id"]] = name
            order = []
            while jobs := await claim_jobs(core):
                order.append(names[jobs[0]["id"]])
            assert order == ["p0", "p1", "p5-early", "p5-late", "p5-late-2", "p5-late-3",
                             "default"]  # fmt: skip


async def test_one_claim_of_many_returns_them_in_order_across_queues(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            c = await enqueue_job(core, queue="b", priority=3)
            a = await enqueue_job(core, queue="a", priority=1)
            d = await enqueue_job(core, queue="a", priority=3)
            b = await enqueue_job(core, queue="b", priority=2)
            await enqueue_job(core, queue="c", priority=0)  # not asked for
            jobs = await claim_jobs(core, queues=["a", "b"], max=10)
            assert [j["id"] for j in jobs] == [a["id"], b["id"], c["id"], d["id"]]
            assert all(j["status"] == "running" and j["attempts"] == 1 for j in jobs)
            assert len({j["lease"] for j in jobs}) == 1
            assert await claim_jobs(core, queues=["a", "b"]) == []


async def test_claim_next_max_limits_the_batch(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 5)
            assert len(await claim_jobs(core, max=3)) == 3
            assert len(await claim_jobs(core, max=3)) == 2


# -- fail and release ------------------------------------------------------------


async def test_fail_schedules_a_retry_with_backoff_pending_exactly_then(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core)
            failed = (await call(core, "fail", job_id=job["id"], lease=claimed["lease"],
                                 error="boom"))["job"]  # fmt: skip
            delay = failed["ready_at"] - WALL0
            assert lc.BACKOFF_BASE_MS // 2 <= delay <= lc.BACKOFF_BASE_MS
            assert failed["status"] == "scheduled"
            assert failed["error"] == "boom" and failed["attempts"] == 1
            assert failed["lease"] is None
            await sleep_to(core, (delay - 1) / 1000)
            assert job_row(core, job["id"])["state"] == "scheduled"
            await sleep_to(core, delay / 1000)
            assert job_row(core, job["id"])["state"] == "pending"
            (again,) = await claim_jobs(core)
            assert again["attempts"] == 2


async def test_fail_with_retry_in_ms(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core)
            failed = (await call(core, "fail", job_id=job["id"], lease=claimed["lease"],
                                 error="e", retry_in_ms=3_000))["job"]  # fmt: skip
            assert failed["ready_at"] == WALL0 + 3_000
            started = trio.current_time()
            (again,) = await claim_jobs(core, wait_ms=10_000)
            assert again["id"] == job["id"]
            assert trio.current_time() - started == 3.0


async def test_fail_with_retry_in_zero_is_pending_at_once(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core)
            failed = (await call(core, "fail", job_id=job["id"], lease=claimed["lease"],
                                 error="e", retry_in_ms=0))["job"]  # fmt: skip
            assert failed["status"] == "pending"


async def test_fail_at_max_attempts_is_dead(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core, max_attempts=1)
            (claimed,) = await claim_jobs(core)
            failed = (await call(core, "fail", job_id=job["id"], lease=claimed["lease"],
                                 error="e"))["job"]  # fmt: skip
            assert failed["status"] == "dead"
            assert failed["dead"] == {"at": WALL0, "reason": "attempts_exhausted"}


async def test_fail_dead_true_is_dead_failed(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core)
            failed = (await call(core, "fail", job_id=job["id"], lease=claimed["lease"],
                                 error="bad input", dead=True))["job"]  # fmt: skip
            assert failed["status"] == "dead" and failed["error"] == "bad input"
            assert failed["dead"] == {"at": WALL0, "reason": "failed"}
            assert mem_counts(core) == db_counts(core)


async def test_release_takes_the_attempt_back(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core)
            released = (await call(core, "release", job_id=job["id"],
                                   lease=claimed["lease"]))["job"]  # fmt: skip
            assert released["status"] == "pending"
            assert released["attempts"] == 0
            assert released["lease"] is None and released["ready_at"] == WALL0
            (again,) = await claim_jobs(core)
            assert again["attempts"] == 1
            with pytest.raises(Refused) as info:
                await call(core, "release", job_id=job["id"], lease=claimed["lease"])
            assert info.value.code == "lease_lost"


async def test_release_with_delay_is_scheduled_until_then(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core)
            released = (await call(core, "release", job_id=job["id"], lease=claimed["lease"],
                                   delay_ms=3_000))["job"]  # fmt: skip
            assert released["status"] == "scheduled" and released["attempts"] == 0
            await sleep_to(core, 2.999)
            assert job_row(core, job["id"])["state"] == "scheduled"
            await sleep_to(core, 3.0)
            assert job_row(core, job["id"])["state"] == "pending"


async def test_complete_stores_the_result(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core)
            await sleep_to(core, 1.0)
            done = (await call(core, "complete", job_id=job["id"], lease=claimed["lease"],
                               result={"ok": [1, 2]}))["job"]  # fmt: skip
            assert done["status"] == "completed" and done["result"] == {"ok": [1, 2]}
            assert done["finished_at"] == WALL0 + 1_000 and done["lease"] is None
            with pytest.raises(Refused) as info:
                await call(core, "complete", job_id=job["id"], lease=claimed["lease"])
            assert info.value.code == "lease_lost"


async def test_unknown_job_is_not_found(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            for op, args in [
                ("complete", {"lease": "x"}),
                ("heartbeat", {"lease": "x"}),
                ("fail", {"lease": "x", "error": "e"}),
                ("release", {"lease": "x"}),
                ("claim", {}),
                ("get", {}),
            ]:
                with pytest.raises(Refused) as info:
                    await call(core, op, job_id="nope", **args)
                assert info.value.code == "not_found"


async def test_complete_many_completes_each_job_alone(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 3)
        jobs = [j["job"] for j in (await call(core, "claim_next", queues=["q"], max=3))["jobs"]]
        done = [{"job_id": j["id"], "lease": j["lease"], "result": {"n": i}}
                for i, j in enumerate(jobs)]  # fmt: skip
        stale = {"job_id": jobs[1]["id"], "lease": "not-the-lease"}
        answer = await call(core, "complete_many", jobs=[done[0], stale, done[1], done[1]])
        results = answer["results"]
        assert [r.get("state") for r in results] == ["completed", None, "completed", None]
        assert [r["job_id"] for r in results] == [jobs[0]["id"], jobs[1]["id"], jobs[1]["id"],
                                                  jobs[1]["id"]]  # fmt: skip
        assert results[1]["error"]["code"] == results[3]["error"]["code"] == "lease_lost"
        got = (await call(core, "get", job_id=jobs[1]["id"]))["job"]
        assert (got["status"], got["result"]) == ("completed", {"n": 1})
        assert (await call(core, "get", job_id=jobs[2]["id"]))["job"]["status"] == "running"
        assert mem_counts(core)[("default", "q")]["completed"] == 2


@pytest.mark.parametrize(
    ("jobs", "field"),
    [
        ([], "jobs"),
        ([{"job_id": "x"}], "jobs[0].lease"),
        ("nope", "jobs"),
        ([{"job_id": "x", "lease": "y", "extra": 1}], "jobs[0].extra"),
        ([{"job_id": "x", "lease": "y"}] * 1001, "jobs"),
    ],
)
async def test_complete_many_bad_input_writes_nothing(tmp_path, autojump_clock, jobs, field):
    async with running_core(tmp_path) as core:
        with pytest.raises(Refused) as info:
            await call(core, "complete_many", jobs=jobs)
        assert info.value.code == "invalid_argument"
        assert info.value.details["field"] == field


async def test_complete_many_frees_policy_slots_and_budget_tokens(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_in_flight=2)
        await call(core, "budget_create", key="b", allocation=2,
                   strategy={"type": "while_in_flight"})  # fmt: skip
        bound = {"queue": "q", "type": "t", "budgets": [{"key": "b", "cost": 1}]}
        await call(core, "enqueue_many", jobs=[bound] * 4)
        jobs = [j["job"] for j in (await call(core, "claim_next", queues=["q"], max=4))["jobs"]]
        assert len(jobs) == 2  # two slots, two tokens
        assert (await call(core, "claim_next", queues=["q"], max=4))["jobs"] == []
        await call(core, "complete_many",
                   jobs=[{"job_id": j["id"], "lease": j["lease"]} for j in jobs])  # fmt: skip
        again = (await call(core, "claim_next", queues=["q"], max=4))["jobs"]
        assert len(again) == 2  # both slots and both tokens came back
        assert mem_counts(core) == db_counts(core)
