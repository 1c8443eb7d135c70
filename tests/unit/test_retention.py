"""The retention leader on MockClock: TTL sweeps, row ceilings, fail closed, the lease.

Rows are written straight into the store (creation and finish instants chosen
by the test, counts reloaded from the table), except where a test shows the
verbs' path. Ticks run at the leader's start and every ``interval`` after it;
every instant is virtual and exact.
"""

from __future__ import annotations

import logging

import trio
import trio.testing

from actors.ids import IdMint
from actors.quota import Quota
from daemon import retention
from daemon.config import Config, DaemonConfig, RetentionConfig
from daemon.store import jobs as sql
from daemon.store import queues as queue_sql
from daemon.store import retention as store
from tests.unit.harness import WALL0, call, db_counts, mem_counts, running_core, sleep_to

MIN = 60_000
HOUR = 60 * MIN


def _config(*, batch: int = 1000, maintenance: bool = True, **ttls: int) -> Config:
    return Config(
        daemon=DaemonConfig(maintenance=maintenance),
        retention=RetentionConfig(batch=batch, interval=MIN, **ttls),
    )


def _insert(core, namespace: str, queue: str, state: str, created: int,
            finished: int | None = None) -> str:  # fmt: skip
    """One job row, created at ``created`` (its id too) and finished at ``finished``."""
    job_id = IdMint().mint(created)  # a fresh mint: ids of ``created``, however early
    far = WALL0 + 1000 * HOUR  # live jobs: due or lapsing long after the test
    running = state == "running"
    row = (
        job_id, namespace, queue, "t", "{}", 32768, state, int(running), 25, 60_000,
        far if state == "scheduled" else created, created, created, finished,
        "lease" if running else None, far if running else None, None, None, None, None,
        '{"reason":"test"}' if state == "dead" else None, None, None,
    )  # fmt: skip

    def write(tx):
        queue_sql.ensure(tx.conn, namespace, queue, created)
        sql.insert(tx.conn, [row])

    core.writer.run_now(write)
    core.counts.load(sql.state_counts(core.conn))
    return job_id


def _ids(core, namespace: str, state: str) -> list[str]:
    rows = core.conn.execute(
        "SELECT id FROM jobs WHERE namespace = ? AND state = ? ORDER BY id", (namespace, state)
    )
    return [r[0] for r in rows]


def _deleted(core, namespace: str, reason: str) -> float:
    value = core.metrics.registry.get_sample_value(
        "sluicegate_retention_deleted_total", {"namespace": namespace, "reason": reason}
    )
    return value or 0.0


async def _set_quota(core, namespace: str, quota: Quota | None, raw=None) -> None:
    await core.writer.write(lambda tx: core.quotas.write(tx, "test", namespace, quota, raw))


def _leader(core, holder: str | None = None):
    """The retention leader of ``core``'s store, counts and (live) config."""
    return retention.Retention(
        committer=core.writer, store=core.store, counts=core.counts,
        namespaces=core.namespaces, metrics=core.metrics, config=lambda: core.config,
        holder=holder,
    ).leader()  # fmt: skip


def _assert_counts_match(core) -> None:
    assert mem_counts(core) == db_counts(core)


# -- TTL sweeps ------------------------------------------------------------------------


async def test_ttl_sweeps_by_finished_at_with_queue_ttls_overriding_defaults(
    tmp_path, autojump_clock
):
    config = _config(batch=2, completed_ttl=HOUR, dead_ttl=2 * HOUR)
    with trio.fail_after(1000):
        async with running_core(tmp_path, config=config, timers=False) as core:
            await call(core, "queue_configure", queue="short",
                       completed_ttl_ms=10 * MIN, dead_ttl_ms=20 * MIN)  # fmt: skip
            old = WALL0 - 10 * HOUR
            ins = lambda q, state, fin: _insert(core, "default", q, state, old, fin)  # noqa: E731
            # Live jobs older than every TTL, one even carrying an old finished_at.
            live = [ins("long", s, None) for s in ("scheduled", "pending", "running")]
            live.append(ins("long", "pending", old))
            gone_now = [
                ins("long", "completed", WALL0 - HOUR),  # at the horizon: expired
                ins("long", "dead", WALL0 - 2 * HOUR),
                ins("short", "completed", WALL0 - 10 * MIN),
                ins("short", "dead", WALL0 - 20 * MIN),
                ins("long", "completed", WALL0 - 3 * HOUR),
                ins("long", "completed", WALL0 - 2 * HOUR),
            ]
            at_1m = ins("long", "completed", WALL0 - HOUR + 1)  # one ms short of it
            at_5m = [
                ins("short", "completed", WALL0 - 5 * MIN),
                ins("short", "dead", WALL0 - 15 * MIN),
            ]
            kept = [
                ins("long", "dead", WALL0 - HOUR - 5 * MIN),  # the default dead TTL is 2h
                ins("long", "completed", WALL0 - 30 * MIN),
            ]
            # A job finished through the verbs, now: kept for an hour.
            await call(core, "enqueue", queue="verbs", type="t")
            (claimed,) = (await call(core, "claim_next", queues=["verbs"]))["jobs"]
            job = claimed["job"]
            await call(core, "complete", job_id=job["id"], lease=job["lease"])
            kept.append(job["id"])
            everything = set(live + gone_now + [at_1m] + at_5m + kept)
            remaining = lambda: {r[0] for r in core.conn.execute("SELECT id FROM jobs")}  # noqa: E731

            leader = _leader(core, holder="a")
            async with trio.open_nursery() as nursery:
                await nursery.start(leader.run)
                await sleep_to(core, 0)
                assert leader.leading and leader.ticks == 1
                assert remaining() == everything - set(gone_now)
                _assert_counts_match(core)
                assert _deleted(core, "default", "ttl_completed") == 4
                assert _deleted(core, "default", "ttl_dead") == 2
                await sleep_to(core, 59.999)
                assert at_1m in remaining()
                await sleep_to(core, 60)
                assert remaining() == set(live + at_5m + kept)
                await sleep_to(core, 300)
                assert remaining() == set(live + kept)
                _assert_counts_match(core)
                assert leader.ticks == 6
                nursery.cancel_scope.cancel()


async def test_ttl_sweep_reads_bounded_windows_and_reaches_the_end(tmp_path, autojump_clock):
    """Each write reads at most ``batch`` index entries; the sweep still goes to the end."""
    config = _config(batch=3, completed_ttl=HOUR)
    with trio.fail_after(1000):
        async with running_core(tmp_path, config=config, timers=False) as core:
            old = WALL0 - 10 * HOUR
            expired, live = [], []
            for i in range(10):
                live.append(_insert(core, "default", "q", "pending", old + i))
                expired.append(_insert(core, "default", "q", "completed", old + i, old + i))
            commits = core.writer.commits
            async with trio.open_nursery() as nursery:
                await nursery.start(_leader(core).run)
                await sleep_to(core, 0)
                assert _ids(core, "default", "completed") == []
                assert _ids(core, "default", "pending") == live
                # lease + 20 entries read 3 per write (7 writes, the last one short)
                assert core.writer.commits - commits == 1 + 7
                _assert_counts_match(core)
                nursery.cancel_scope.cancel()


# -- row ceilings ----------------------------------------------------------------------


async def test_ceilings_trim_oldest_first_in_bounded_batches_over_several_ticks(
    tmp_path, autojump_clock, caplog
):
    caplog.set_level(logging.INFO, logger="sluicegate.retention")
    with trio.fail_after(1000):
        async with running_core(tmp_path, config=_config(batch=4), timers=False) as core:
            base = WALL0 - HOUR
            completed, dead, live = [], [], []
            for i in range(17):  # interleaved over two queues, with live jobs among them
                queue = ("a", "b")[i % 2]
                completed.append(_insert(core, "ns", queue, "completed", base + i, base + i))
                if i < 8:
                    dead.append(_insert(core, "ns", queue, "dead", base + i, base + i))
                if i % 5 == 0:
                    live.append(_insert(core, "ns", queue, "pending", base + i))
            other = [_insert(core, "other", "a", "completed", base, base) for _ in range(9)]
            await _set_quota(core, "ns", Quota(max_archived_rows=5, max_dead_rows=3))
            await _set_quota(core, "other", Quota(max_dead_rows=0))
            async with trio.open_nursery() as nursery:
                await nursery.start(_leader(core).run)
                await sleep_to(core, 0)  # 17 -> 13 completed; 8 -> 4 dead
                assert _ids(core, "ns", "completed") == completed[4:]
                assert _ids(core, "ns", "dead") == dead[4:]
                assert core.counts.total("ns", "completed") == 13
                _assert_counts_match(core)
                await sleep_to(core, 60)  # 13 -> 9; 4 -> 3
                assert _ids(core, "ns", "completed") == completed[8:]
                assert _ids(core, "ns", "dead") == dead[5:]
                await sleep_to(core, 120)  # 9 -> 5: converged
                assert _ids(core, "ns", "completed") == completed[12:]
                await sleep_to(core, 180)  # nothing left to trim
                assert _ids(core, "ns", "completed") == completed[12:]
                assert _ids(core, "ns", "dead") == dead[5:]
                assert _ids(core, "ns", "pending") == live
                assert _ids(core, "other", "completed") == sorted(other)  # no archived ceiling
                _assert_counts_match(core)
                assert _deleted(core, "ns", "max_archived_rows") == 12
                assert _deleted(core, "ns", "max_dead_rows") == 5
                nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if "retention deleted" in r.getMessage()]
    assert lines == [
        "retention deleted 8 rows: ns max_archived_rows 4, ns max_dead_rows 4",
        "retention deleted 5 rows: ns max_archived_rows 4, ns max_dead_rows 1",
        "retention deleted 4 rows: ns max_archived_rows 4",
    ]


async def test_broken_quota_namespace_is_skipped_with_a_warning(tmp_path, autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="sluicegate.retention")
    config = _config(completed_ttl=HOUR)
    with trio.fail_after(1000):
        async with running_core(tmp_path, config=config, timers=False) as core:
            old = WALL0 - 10 * HOUR
            for ns in ("bad", "good"):
                for i in range(4):
                    _insert(core, ns, "q", "dead", old + i, old + i)  # under the 7d dead TTL
                _insert(core, ns, "q", "completed", old, old)  # past the 1h TTL
            await _set_quota(core, "good", Quota(max_dead_rows=1))
            await _set_quota(core, "bad", None, raw={"max_dead_rows": -1})
            assert core.namespaces.get("bad").broken is not None
            async with trio.open_nursery() as nursery:
                await nursery.start(_leader(core).run)
                await sleep_to(core, 0)
                assert len(_ids(core, "good", "dead")) == 1
                assert _ids(core, "good", "completed") == []
                assert len(_ids(core, "bad", "dead")) == 4  # neither ceiling nor TTL
                assert len(_ids(core, "bad", "completed")) == 1
                await sleep_to(core, 60)
                warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
                assert len(warnings) == 1  # warned once, not at every tick
                assert "retention skips namespace 'bad'" in warnings[0].getMessage()
                await _set_quota(core, "bad", Quota(max_dead_rows=2))  # fixed
                await sleep_to(core, 120)
                assert len(_ids(core, "bad", "dead")) == 2
                assert _ids(core, "bad", "completed") == []
                _assert_counts_match(core)
                nursery.cancel_scope.cancel()


# -- the lease -------------------------------------------------------------------------


async def test_one_of_two_daemons_leads_and_the_other_takes_over(tmp_path, autojump_clock):
    config = _config(completed_ttl=HOUR)
    with trio.fail_after(1000):
        async with (
            running_core(tmp_path, config=config, timers=False) as one,
            running_core(tmp_path, config=config, timers=False) as two,
        ):
            assert one.conn is not two.conn
            first, second = _leader(one, "one"), _leader(two, "two")
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def run_first(task_status=trio.TASK_STATUS_IGNORED):
                    with scope:
                        await first.run(task_status=task_status)

                await nursery.start(run_first)
                await nursery.start(second.run)
                await sleep_to(one, 60)
                assert first.led == 2 and second.led == 0 and second.ticks == 2
                assert store.lease_holder(two.conn, store.RETENTION) == ("one", WALL0 + 240_000)
                scope.cancel()  # the leader stops renewing: its lease lasts 3 ticks
                old = WALL0 - 10 * HOUR
                job = _insert(one, "default", "q", "completed", old, old)
                await sleep_to(one, 180)
                assert not second.leading and _ids(two, "default", "completed") == [job]
                await sleep_to(one, 240)  # the lease lapsed at 240 s: taken over then
                assert second.leading and second.led == 1
                assert _ids(two, "default", "completed") == []
                assert two.counts.get(("default", "q"), "completed") == 0  # never negative
                assert store.lease_holder(one.conn, store.RETENTION) == ("two", WALL0 + 420_000)
                nursery.cancel_scope.cancel()


async def test_maintenance_false_never_sweeps_nor_leads(tmp_path, autojump_clock):
    config = _config(maintenance=False, completed_ttl=HOUR)
    with trio.fail_after(1000):
        async with running_core(tmp_path, config=config, timers=False) as core:
            old = WALL0 - 10 * HOUR
            job = _insert(core, "default", "q", "completed", old, old)
            await _set_quota(core, "default", Quota(max_archived_rows=0))
            leader = _leader(core)
            async with trio.open_nursery() as nursery:
                await nursery.start(leader.run)
                await sleep_to(core, 300)
                assert leader.ticks == 6 and leader.led == 0
                assert _ids(core, "default", "completed") == [job]
                assert store.lease_holder(core.conn, store.RETENTION) is None
                nursery.cancel_scope.cancel()


async def test_turning_maintenance_off_releases_the_lease(tmp_path, autojump_clock):
    with trio.fail_after(1000):
        async with running_core(tmp_path, config=_config(), timers=False) as core:
            leader = _leader(core, "me")
            async with trio.open_nursery() as nursery:
                await nursery.start(leader.run)
                await sleep_to(core, 0)
                assert store.lease_holder(core.conn, store.RETENTION) == ("me", WALL0 + 180_000)
                core.reload(_config(maintenance=False))
                await sleep_to(core, 60)
                assert not leader.leading
                assert store.lease_holder(core.conn, store.RETENTION) is None
                nursery.cancel_scope.cancel()
