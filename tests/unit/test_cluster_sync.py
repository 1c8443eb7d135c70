"""daemon/admission/cluster.py: the epoch lock's bookkeeping and the reload of
limit state when another daemon committed (issue 15).

The core runs on SQLite here (``UPDATE ... RETURNING`` works there too), with
a :class:`ClusterSync` attached as the composition root attaches it on
PostgreSQL. "Another daemon" is simulated the way it shows in the database:
rows changed and the epoch advanced by someone else. The race itself, with
real daemons on PostgreSQL, is tests/e2e/test_cluster_exactness.py.
"""

from __future__ import annotations

import orjson
import pytest
import trio.testing

from actors import lifecycle as lc
from actors.counts import QueueCounts
from actors.errors import Refused
from daemon.admission.cluster import ClusterSync
from daemon.dispatch import prepare
from tests.unit.harness import call, claim_jobs, db_counts, enqueue_job, mem_counts, running_core


def attach(core) -> ClusterSync:
    sync = ClusterSync(
        counts=core.counts, budgets=core.budgets, gate=core.budget_gate,
        policies=core.policies, quotas=core.quotas, committer=core.writer,
    )  # fmt: skip
    core.writer.begun.append(sync.begin)
    core.writer.pending.append(sync)
    core.budget_gate.shared = True
    core.quotas.save_rates = True
    return sync


def another_daemon(core, *statements: str) -> None:
    """Statements committed by another daemon: its rows, and its epoch bump."""
    with core.conn:
        for statement in statements:
            core.conn.execute(statement)
        core.conn.execute("UPDATE cluster_epoch SET epoch = epoch + 1 WHERE id = 1")


def epoch(core) -> int:
    return core.conn.execute("SELECT epoch FROM cluster_epoch").fetchone()[0]


async def test_every_transaction_bumps_the_epoch_and_reloads_only_after_a_gap(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, timers=False) as core:
        sync = attach(core)
        await enqueue_job(core)
        assert sync.reloads == 1  # the first transaction knows nothing yet
        await enqueue_job(core)
        await enqueue_job(core)
        assert sync.reloads == 1 and sync.epoch == epoch(core) == 3
        another_daemon(core)
        await enqueue_job(core)
        assert sync.reloads == 2 and sync.epoch == 5


async def test_a_pool_debited_elsewhere_holds_the_claim_back(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        sync = attach(core)
        await call(core, "budget_create", key="slots", allocation=2,
                   strategy={"type": "while_in_flight"})  # fmt: skip
        for _ in range(3):
            await enqueue_job(core, budgets=[{"key": "slots", "cost": 1}])
        # Another daemon claimed two jobs of the pool (its in_flight is the store's).
        another_daemon(core, "UPDATE budgets SET in_flight = 2 WHERE key = 'slots'")
        assert await claim_jobs(core) == []  # memory alone would have said 2 free
        assert core.budgets[("default", "slots")].pool.in_flight == 2
        # It completed one of them: one claim fits, the next does not.
        another_daemon(core, "UPDATE budgets SET in_flight = 1 WHERE key = 'slots'")
        await call(core, "status")  # a read: no transaction, memory unchanged
        assert core.budgets[("default", "slots")].pool.in_flight == 2
        sync.refresh()  # what the cross-daemon doorbell does every few seconds
        # The reload saw a slot free: the parked jobs' waker releases one.
        assert len(await claim_jobs(core, wait_ms=5_000)) == 1
        assert await claim_jobs(core) == []
        (in_flight,) = core.conn.execute("SELECT in_flight FROM budgets").fetchone()
        assert in_flight == 2  # the debit was written with the pool


async def test_credits_are_written_with_the_pool(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "budget_create", key="slots", allocation=2,
                   strategy={"type": "while_in_flight"})  # fmt: skip
        await enqueue_job(core, budgets=[{"key": "slots", "cost": 2}])
        (job,) = await claim_jobs(core)
        await call(core, "complete", job_id=job["id"], lease=job["lease"])
        (in_flight,) = core.conn.execute("SELECT in_flight FROM budgets").fetchone()
        assert in_flight == 0  # another daemon reading the pool back sees the credit


async def test_jobs_running_elsewhere_fill_a_queue_policy(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "policy_set", queue="q", max_in_flight=2)
        ids = [(await enqueue_job(core))["id"] for _ in range(3)]
        # Another daemon claimed two of them.
        taken = f"('{ids[0]}', '{ids[1]}')"
        another_daemon(core, "UPDATE jobs SET state = 'running', lease = 'x', "
                             f"lease_expires_at = 9e15 WHERE id IN {taken}")  # fmt: skip
        assert await claim_jobs(core) == []
        assert core.counts.get(("default", "q"), lc.RUNNING) == 2


async def test_a_policy_window_charged_elsewhere_counts_here(tmp_path, autojump_clock):
    window = {"period": "hour", "tz": "UTC", "start": "00:00"}
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "policy_set", queue="q", max_claims_per_window=3, window=window)
        for _ in range(3):
            await enqueue_job(core)
        state = core.policies.states[("default", "q")]
        another_daemon(core, "INSERT INTO policy_usage (namespace, queue, window_key, "
                             f"window_start, used) VALUES ('default', 'q', 'hour', "
                             f"{state.meters[0].start}, 2)")  # fmt: skip
        assert len(await claim_jobs(core, max=3)) == 1  # 2 of 3 were used elsewhere


async def test_stacked_windows_charged_elsewhere_count_here_each_its_own(tmp_path, autojump_clock):
    """Another daemon's claims, read back per window: the minute and the hour
    windows start at the same instant, and each keeps its own count."""
    windows = [{"max_claims": 4, "period": "minute", "tz": "UTC"},
               {"max_claims": 6, "period": "hour", "tz": "UTC"}]  # fmt: skip
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "policy_set", queue="q", windows=windows)
        for _ in range(6):
            await enqueue_job(core)
        minute, hour = core.policies.states[("default", "q")].meters
        charged = "INSERT INTO policy_usage (namespace, queue, window_key, window_start, used) "
        another_daemon(core, f"{charged} VALUES ('default', 'q', 'minute', {minute.start}, 3)",
                       f"{charged} VALUES ('default', 'q', 'hour', {hour.start}, 5)")  # fmt: skip
        assert len(await claim_jobs(core, max=6)) == 1  # the hour's last; the minute had 1
        reloaded = core.policies.states[("default", "q")].meters  # the reload made new ones
        assert [m.used for m in reloaded] == [4, 6]
        rows = core.conn.execute("SELECT window_key, used FROM policy_usage ORDER BY window_key")
        assert rows.fetchall() == [("hour", 6), ("minute", 4)]


async def test_a_daemon_a_moment_behind_reads_its_window_though_another_charged_the_next(
    tmp_path, autojump_clock
):
    """Each daemon reads its own clock: another one a few ms ahead may already
    charge the next window while this one is still in the current. The reload
    reads each window's two latest rows, so the current window's usage is seen
    (reading only the latest, it was taken for 0 and a second's window
    over-admitted across three daemons: tests/e2e/test_cluster_exactness.py)."""
    windows = [{"max_claims": 3, "period": "minute", "tz": "UTC"}]
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "policy_set", queue="q", windows=windows)
        for _ in range(3):
            await enqueue_job(core)
        (minute,) = core.policies.states[("default", "q")].meters
        charged = "INSERT INTO policy_usage (namespace, queue, window_key, window_start, used) "
        another_daemon(core, f"{charged} VALUES ('default', 'q', 'minute', {minute.start}, 3)",
                       f"{charged} VALUES ('default', 'q', 'minute', {minute.end}, 1)")  # fmt: skip
        assert await claim_jobs(core, max=3) == []  # this minute's 3 were used elsewhere
        (reloaded,) = core.policies.states[("default", "q")].meters
        assert (reloaded.used, reloaded.ahead) == (3, {minute.end: 1})


async def test_a_budget_made_elsewhere_is_known_after_the_reload(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "budget_create", key="a", allocation=1,
                   strategy={"type": "while_in_flight"})  # fmt: skip
        row = core.conn.execute("SELECT * FROM budgets WHERE key = 'a'").fetchone()
        marks = ", ".join("?" * len(row))
        with core.conn:  # another daemon makes "b" and removes "a"
            core.conn.execute(f"INSERT INTO budgets VALUES ({marks})", ("default", "b", *row[2:]))
            core.conn.execute("DELETE FROM budgets WHERE key = 'a'")
            core.conn.execute("UPDATE cluster_epoch SET epoch = epoch + 1")
        await enqueue_job(core)
        assert set(core.budgets) == {("default", "b")}


async def test_jobs_bound_elsewhere_keep_their_budget_from_deletion_and_lowering(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "budget_create", key="gpu", allocation=4,
                   strategy={"type": "while_in_flight"})  # fmt: skip
        await enqueue_job(core, budgets=[{"key": "gpu", "cost": 3}])
        await enqueue_job(core, budgets=[{"key": "gpu", "cost": 1}])
        # As another daemon's jobs are to this one: in the store, not in memory.
        core.budgets[("default", "gpu")].bound.clear()
        with pytest.raises(Refused) as refused:
            await call(core, "budget_delete", key="gpu")
        assert refused.value.code == "conflict"
        assert "referenced by 2 unfinished jobs" in refused.value.message
        with pytest.raises(Refused) as refused:
            await call(core, "budget_patch", key="gpu", allocation=2)
        assert refused.value.code == "invalid_argument"
        assert "draw up to 3 from it" in refused.value.message
        await call(core, "budget_patch", key="gpu", allocation=3)  # every bound cost fits


async def test_a_refresh_counts_the_queues_again_with_every_daemons_moves(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core:
        sync = attach(core)
        for _ in range(3):
            await enqueue_job(core)
        await claim_jobs(core)
        # As another daemon's moves are to this one: in the store, not in memory.
        core.counts.remove(("default", "q"), lc.PENDING, 2)
        assert (await call(core, "status"))["queues"][0]["pending"] == 0
        sync.refresh()
        await trio.testing.wait_all_tasks_blocked()
        queue = (await call(core, "status"))["queues"][0]
        assert (queue["pending"], queue["running"]) == (2, 1)


async def test_a_committed_limit_write_tells_the_other_daemons_and_a_refused_one_not(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path, timers=False) as core:
        told: list[None] = []
        core.doorbell.remote_limits = lambda: told.append(None)
        spec = {"allocation": 2, "strategy": {"type": "while_in_flight"}}
        await call(core, "budget_create", key="a", **spec)
        assert len(told) == 1
        with pytest.raises(Refused):
            await call(core, "budget_create", key="a", **spec)  # exists: nothing written
        await enqueue_job(core)  # not a limit's setting
        await call(core, "quota_set", quota={"max_pending": 5})
        assert len(told) == 2


async def test_a_recount_beside_writes_of_its_transaction_counts_each_move_once(
    tmp_path, autojump_clock
):
    """A refresh whose transaction also holds completions and a claim (queued
    before it): memory must still equal the store after the commit. Counted
    after those writes, a completion would be counted twice, and one running
    job too few lets a claim past a cap (found by the 10,000-claim race)."""
    async with running_core(tmp_path, timers=False) as core:
        sync = attach(core)
        for _ in range(4):
            await enqueue_job(core)
        a, b = await claim_jobs(core, max=2)
        session = core.auth.new_session()
        calls = [("complete", {"job_id": j["id"], "lease": j["lease"]}) for j in (a, b)]
        calls.append(("claim_next", {"queues": ["q"]}))
        settled = trio.Semaphore(0)
        for op, args in calls:  # queued in one step: one transaction, in this order
            core.writer.submit(prepare(core, session, op, args).write,
                               lambda _r, _e: settled.release())  # fmt: skip
        sync.refresh()  # the recount joins the same transaction, after them
        for _ in calls:
            await settled.acquire()
        await trio.testing.wait_all_tasks_blocked()
        assert mem_counts(core) == db_counts(core)
        assert mem_counts(core)[("default", "q")]["running"] == 1


def test_set_state_replaces_one_state_and_keeps_the_totals():
    counts = QueueCounts()
    counts.load([("n", "a", lc.RUNNING, 3), ("n", "a", lc.PENDING, 5), ("n", "b", lc.RUNNING, 1)])
    counts.set_state(lc.RUNNING, {("n", "a"): 1, ("m", "c"): 2})
    assert counts.get(("n", "a"), lc.RUNNING) == 1 and counts.get(("n", "b"), lc.RUNNING) == 0
    assert counts.total("n", lc.RUNNING) == 1 and counts.total("m", lc.RUNNING) == 2
    assert counts.get(("n", "a"), lc.PENDING) == 5


async def test_jobs_waiting_elsewhere_count_against_max_pending(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "quota_set", quota={"max_pending": 3})
        first = await enqueue_job(core)
        # Another daemon enqueued two more (rows copied from ours, new ids).
        cols = [r[1] for r in core.conn.execute("PRAGMA table_info(jobs)")]
        for n in (1, 2):
            values = ", ".join(f"'{first['id'][:-1]}{n}'" if c == "id" else c for c in cols)
            another_daemon(core, f"INSERT INTO jobs SELECT {values} FROM jobs "
                                 f"WHERE id = '{first['id']}'")  # fmt: skip
        with pytest.raises(Refused) as info:  # 3 of 3 are waiting, 2 of them elsewhere
            await call(core, "enqueue", queue="q", type="t")
        assert info.value.code == "queue_full"


async def test_an_enqueue_rate_spent_elsewhere_is_spent_here(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core:
        attach(core)
        await call(core, "quota_set", quota={"enqueue_rate": "3/s"})
        await enqueue_job(core)  # the pool is written with its debit
        (state,) = core.conn.execute(
            "SELECT value FROM settings WHERE key = 'quota:rate:default'").fetchone()  # fmt: skip
        units, as_of, in_flight = orjson.loads(state)
        # Another daemon spent the other two tokens at the same instant.
        spent = orjson.dumps([units - 2 * (units // 2), as_of, in_flight]).decode()
        another_daemon(core, f"UPDATE settings SET value = '{spent}' "
                             "WHERE key = 'quota:rate:default'")  # fmt: skip
        with pytest.raises(Refused) as info:
            await call(core, "enqueue", queue="q", type="t")
        assert info.value.code == "rate_limited"
