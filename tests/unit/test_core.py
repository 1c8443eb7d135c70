"""daemon/core.py on MockClock: the delay timer, the lease reaper, catch-up, counts.

Every instant is virtual and exact: a job is claimable at ``ready_at`` and not a
millisecond before; a lease lapses at its expiry and not a millisecond before.
"""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

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

# -- the delay timer -----------------------------------------------------------


async def test_delayed_job_is_claimable_at_exactly_its_ready_at(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path, timers=False) as core:
            job = await enqueue_job(core, delay_ms=5_000)
            assert job["status"] == "scheduled" and job["ready_at"] == WALL0 + 5_000
            await sleep_to(core, 4.999)
            assert await claim_jobs(core) == []
            await sleep_to(core, 5.0)
            (claimed,) = await claim_jobs(core)
            assert claimed["id"] == job["id"] and claimed["attempts"] == 1
            assert trio.current_time() - t0(core) == 5.0


async def test_delay_timer_promotes_at_ready_at_without_a_claim(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core, delay_ms=5_000)
            key = ("default", "q")
            await sleep_to(core, 4.999)
            assert (await call(core, "get", job_id=job["id"]))["job"]["status"] == "scheduled"
            assert core.counts.get(key, "scheduled") == 1
            await sleep_to(core, 5.0)
            got = (await call(core, "get", job_id=job["id"]))["job"]
            assert got["status"] == "pending"
            assert got["updated_at"] == WALL0 + 5_000
            assert core.counts.get(key, "pending") == 1 and core.counts.get(key, "scheduled") == 0


async def test_a_waiting_claim_is_answered_when_the_delay_ends(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core, delay_ms=5_000)
            start = trio.current_time()
            (claimed,) = await claim_jobs(core, wait_ms=60_000)
            assert claimed["id"] == job["id"]
            assert trio.current_time() - start == 5.0


async def test_an_earlier_delay_wakes_the_timer_early(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            late = await enqueue_job(core, delay_ms=60_000)
            await sleep_to(core, 1.0)
            early = await enqueue_job(core, delay_ms=2_000)
            await sleep_to(core, 2.999)
            assert job_row(core, early["id"])["state"] == "scheduled"
            await sleep_to(core, 3.0)
            assert job_row(core, early["id"])["state"] == "pending"
            assert job_row(core, late["id"])["state"] == "scheduled"
            await sleep_to(core, 60.0)
            assert job_row(core, late["id"])["state"] == "pending"


async def test_ready_at_in_the_past_is_pending_at_once(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core, ready_at=WALL0 - 1)
            assert job["status"] == "pending"
            job = await enqueue_job(core, ready_at=WALL0)
            assert job["status"] == "pending"
            job = await enqueue_job(core, ready_at=WALL0 + 1_000)
            assert job["status"] == "scheduled"


# -- the lease reaper ----------------------------------------------------------


async def test_lapsed_lease_returns_the_job_to_pending_at_its_expiry(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core, lease_ms=2_000)
            assert claimed["lease_expires_at"] == WALL0 + 2_000
            await sleep_to(core, 1.999)
            assert job_row(core, job["id"])["state"] == "running"
            await sleep_to(core, 2.0)
            row = job_row(core, job["id"])
            assert row == {"state": "pending", "attempts": 1, "ready_at": WALL0, "lease": None}
            got = (await call(core, "get", job_id=job["id"]))["job"]
            assert got["error"] == "lease expired" and got["lease_expires_at"] is None


async def test_lapsed_lease_at_max_attempts_goes_dead(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core, max_attempts=2, lease_ms=2_000)
            await claim_jobs(core)
            await sleep_to(core, 2.0)
            assert job_row(core, job["id"])["state"] == "pending"
            await claim_jobs(core)
            await sleep_to(core, 3.999)
            assert job_row(core, job["id"])["state"] == "running"
            await sleep_to(core, 4.0)
            got = (await call(core, "get", job_id=job["id"]))["job"]
            assert got["status"] == "dead" and got["attempts"] == 2
            assert got["dead"] == {"at": WALL0 + 4_000, "reason": "attempts_exhausted"}
            assert got["finished_at"] == WALL0 + 4_000
            assert core.counts.get(("default", "q"), "dead") == 1


async def test_a_waiting_claim_is_answered_when_a_lease_lapses(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core, lease_ms=2_000)
            await claim_jobs(core)
            (again,) = await claim_jobs(core, wait_ms=60_000)
            assert again["id"] == job["id"] and again["attempts"] == 2
            assert trio.current_time() - t0(core) == 2.0


async def test_a_claim_takes_over_a_lapsed_lease_before_the_reaper(tmp_path, autojump_clock):
    with trio.fail_after(100):
        # Timers off: the reaper never runs; the claim itself must notice the lapse.
        async with running_core(tmp_path, timers=False) as core:
            job = await enqueue_job(core)
            (first,) = await claim_jobs(core, lease_ms=2_000)
            await sleep_to(core, 1.999)
            assert await claim_jobs(core) == []
            await sleep_to(core, 2.0)
            (second,) = await claim_jobs(core, lease_ms=2_000)
            assert second["id"] == job["id"]
            assert second["attempts"] == 2
            assert second["lease"] != first["lease"]
            with pytest.raises(Refused) as info:
                await call(core, "complete", job_id=job["id"], lease=first["lease"])
            assert info.value.code == "lease_lost"
            with pytest.raises(Refused) as info:
                await call(core, "heartbeat", job_id=job["id"], lease=first["lease"])
            assert info.value.code == "lease_lost"
            done = await call(core, "complete", job_id=job["id"], lease=second["lease"])
            assert done["job"]["status"] == "completed"
            assert mem_counts(core) == db_counts(core)


async def test_claim_by_id_takes_over_a_lapsed_lease(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path, timers=False) as core:
            job = await enqueue_job(core)
            await claim_jobs(core, lease_ms=2_000)
            with pytest.raises(Refused) as info:
                await call(core, "claim", job_id=job["id"])
            assert info.value.code == "conflict"
            assert info.value.details["job_status"] == "running"
            await sleep_to(core, 2.0)
            claimed = (await call(core, "claim", job_id=job["id"]))["job"]
            assert claimed["attempts"] == 2 and claimed["status"] == "running"


async def test_stale_complete_after_reaping_is_lease_lost(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core, lease_ms=2_000)
            await sleep_to(core, 2.0)
            with pytest.raises(Refused) as info:
                await call(core, "complete", job_id=job["id"], lease=claimed["lease"])
            assert info.value.code == "lease_lost"
            assert info.value.details == {"job_status": "pending"}
            assert job_row(core, job["id"])["state"] == "pending"


async def test_heartbeat_extends_the_lease_past_the_old_expiry(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            (claimed,) = await claim_jobs(core, lease_ms=2_000)
            await sleep_to(core, 1.5)
            answer = await call(core, "heartbeat", job_id=job["id"], lease=claimed["lease"],
                                lease_ms=2_000)  # fmt: skip
            assert answer == {"lease_expires_at": WALL0 + 3_500}
            await sleep_to(core, 2.0)
            assert job_row(core, job["id"])["state"] == "running"
            await sleep_to(core, 3.499)
            assert job_row(core, job["id"])["state"] == "running"
            await sleep_to(core, 3.5)
            assert job_row(core, job["id"])["state"] == "pending"


async def test_heartbeat_without_lease_ms_uses_the_jobs_lease(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core, lease_ms=4_000)
            (claimed,) = await claim_jobs(core)
            assert claimed["lease_expires_at"] == WALL0 + 4_000
            await sleep_to(core, 3.0)
            answer = await call(core, "heartbeat", job_id=job["id"], lease=claimed["lease"])
            assert answer == {"lease_expires_at": WALL0 + 7_000}


async def test_default_lease_comes_from_the_config(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            job = await enqueue_job(core)
            assert job["lease_ms"] == 60_000
            (claimed,) = await claim_jobs(core)
            assert claimed["lease_expires_at"] == WALL0 + 60_000
            await sleep_to(core, 60.0)
            assert job_row(core, job["id"])["state"] == "pending"


# -- counts --------------------------------------------------------------------


async def test_counts_are_recovered_from_the_store(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            for delay in (0, 0, 5_000):
                await enqueue_job(core, delay_ms=delay)
            await claim_jobs(core)
            expected = db_counts(core)
        async with running_core(tmp_path) as again:
            assert (
                mem_counts(again)
                == expected
                == {("default", "q"): {"pending": 1, "running": 1, "scheduled": 1}}
            )


async def _random_walk(core, rng: random.Random, steps: int) -> None:
    queues = ["a", "b", "c"]
    held: dict[str, str] = {}  # job id -> lease
    dead: list[str] = []
    for _ in range(steps):
        job_id = None
        op = rng.choice(["enqueue", "enqueue", "many", "claim", "claim", "complete", "fail",
                         "release", "heartbeat", "replay", "sleep", "unique"])  # fmt: skip
        try:
            if op == "enqueue":
                await call(core, "enqueue", queue=rng.choice(queues), type="t",
                           delay_ms=rng.choice([0, 0, 1_000, 3_000]),
                           lease_ms=rng.choice([2_000, 5_000]),
                           max_attempts=rng.choice([1, 2, 3]))  # fmt: skip
            elif op == "many":
                jobs = [{"queue": rng.choice(queues), "type": "t",
                         "delay_ms": rng.choice([0, 2_000])}
                        for _ in range(rng.randint(1, 4))]  # fmt: skip
                await call(core, "enqueue_many", jobs=jobs)
            elif op == "unique":
                await call(core, "enqueue", queue="a", type="t",
                           unique_key=rng.choice(["u1", "u2"]),
                           debounce_ms=rng.choice([None, 1_000]),
                           payload={"n": rng.random()})  # fmt: skip
            elif op == "claim":
                answer = await call(core, "claim_next", queues=rng.sample(queues, 2),
                                    max=rng.randint(1, 3))  # fmt: skip
                for item in answer["jobs"]:
                    held[item["job"]["id"]] = item["job"]["lease"]
            elif op in ("complete", "fail", "release", "heartbeat") and held:
                job_id = rng.choice(sorted(held))
                lease = held[job_id]
                if op == "complete":
                    await call(core, "complete", job_id=job_id, lease=lease)
                elif op == "fail":
                    await call(core, "fail", job_id=job_id, lease=lease, error="e",
                               retry_in_ms=rng.choice([0, 1_000, 2_000]),
                               dead=rng.random() < 0.2)  # fmt: skip
                elif op == "release":
                    await call(core, "release", job_id=job_id, lease=lease,
                               delay_ms=rng.choice([0, 1_000]))  # fmt: skip
                else:
                    await call(core, "heartbeat", job_id=job_id, lease=lease)
                if op != "heartbeat":
                    del held[job_id]
            elif op == "replay":
                dead = [j["id"] for j in (await call(core, "dead_list"))["jobs"]]
                if dead:
                    await call(core, "dead_replay", job_ids=rng.sample(dead, 1))
            elif op == "sleep":
                await trio.sleep(rng.choice([1, 2, 5]))
        except Refused as exc:
            assert exc.code == "lease_lost", exc
            if job_id is not None:
                held.pop(job_id, None)
        await trio.testing.wait_all_tasks_blocked()
        assert mem_counts(core) == db_counts(core), op


@pytest.mark.parametrize("seed", range(6))
async def test_counts_equal_a_fresh_group_by_after_a_random_walk(tmp_path, autojump_clock, seed):
    with trio.fail_after(10_000):
        async with running_core(tmp_path) as core:
            await _random_walk(core, random.Random(seed), 120)
            await trio.sleep(30)  # let every timer fire (virtual time: autojump_clock)
            await trio.testing.wait_all_tasks_blocked()
            final = db_counts(core)
            assert mem_counts(core) == final
            seen = {state for counts in final.values() for state in counts}
            assert {"pending", "completed"} <= seen, final


@pytest.mark.parametrize("seed", range(4))
async def test_counts_stay_exact_when_claims_do_the_timers_work(tmp_path, autojump_clock, seed):
    # Timers off: every promotion and every reaping happens inside a claim's catch-up.
    with trio.fail_after(10_000):
        async with running_core(tmp_path, timers=False) as core:
            await _random_walk(core, random.Random(100 + seed), 120)
            await trio.sleep(120)  # virtual time: autojump_clock
            await call(core, "claim_next", queues=["a", "b", "c"], max=1000)
            final = db_counts(core)
            assert mem_counts(core) == final
            assert not any(c.get("scheduled") or c.get("pending") for c in final.values()), final
