"""Share-mode transactions (daemon/admission/cluster.py, limit_free.py): two
daemons on one PostgreSQL database, each a Core in this process with its own
pool, driven step by step.

Writes that decide no limit run beside each other under the epoch row held
``FOR SHARE``. A limit made on one daemon must hold from its first instant on
both: the daemon that made it counts the work done in share mode elsewhere
(the share counter), and the other stops working in share mode at once (the
epoch read under the share lock). Each test also runs with its check swapped
out, and must then over-admit: the checks are what keeps the limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from actors.clock import Clock
from daemon.admission.cluster import CHECKS
from daemon.admission.usage import Meter
from daemon.core import Core
from daemon.store.interface import MINUTE_MS
from tests.model.stores import ModelDatabase, PostgresExample
from tests.unit.harness import WALL0, call, claim_jobs

pytestmark = pytest.mark.postgres

JOBS = [{"queue": "q", "type": "t"}] * 10


@asynccontextmanager
async def two_daemons(
    dsn: str, unchecked: tuple[int, str | None] = (0, None)
) -> AsyncIterator[tuple[Core, Core]]:
    """Daemons A and B on the fresh database at ``dsn``, their committers running;
    ``unchecked``: (0 for A, 1 for B) and the share-mode check it skips, if any."""
    example = PostgresExample(ModelDatabase.prepare(dsn))
    config = example.config()
    async with example.around_run():
        opened = []
        try:
            async with trio.open_nursery() as nursery:
                cores = []
                for _ in range(2):
                    db = await example.open()
                    opened.append(db)
                    core = Core(config, db, Clock(wall_start_ms=WALL0))
                    await nursery.start(core.writer.run)
                    cores.append(core)
                daemon, swapped = unchecked
                if swapped is not None:
                    cores[daemon].cluster.checks = CHECKS - {swapped}
                yield cores[0], cores[1]
                nursery.cancel_scope.cancel()
        finally:
            for db in opened:
                await example.close(db)


async def exclusive(core: Core) -> None:
    """A write that may decide a limit (no ``free``): the epoch row's lock, bumped."""
    await core.writer.write(lambda _tx: None)


@pytest.mark.parametrize("swapped", [None, "epoch"])
async def test_a_policy_made_on_one_daemon_stops_share_mode_claims_on_the_other(pg_dsn, swapped):
    async with two_daemons(pg_dsn, (1, swapped)) as (a, b):
        await call(a, "enqueue_many", jobs=JOBS)
        assert len(await claim_jobs(b, max=2)) == 2
        assert b.cluster.shared == 1  # B claimed in share mode: nothing limited q
        reloads = b.cluster.shared_reloads
        await call(a, "policy_set", queue="q", max_in_flight=3)
        # B's next claim finds the epoch moved under its share lock: it reads the
        # policy back, and claims exclusively, up to the cap.
        claimed = len(await claim_jobs(b, max=5))
        if swapped:
            assert claimed == 5  # 7 in flight against a cap of 3: the check has teeth
            return
        assert claimed == 1
        assert (b.cluster.shared, b.cluster.shared_reloads) == (1, reloads + 1)
        assert b.policies.running(("default", "q")) == 3


@pytest.mark.parametrize("swapped", [None, "seq"])
async def test_the_daemon_making_a_policy_counts_what_others_claimed_in_share_mode(pg_dsn, swapped):
    async with two_daemons(pg_dsn, (0, swapped)) as (a, b):
        await call(a, "enqueue_many", jobs=JOBS)
        await exclusive(a)  # A's memory is exact as of here, share holders counted
        assert len(await claim_jobs(b, max=4)) == 4  # in share mode: A's epoch unmoved
        await call(a, "policy_set", queue="q", max_in_flight=3)
        claimed = len(await claim_jobs(a, max=5))
        if swapped:
            assert claimed == 3  # A counted none of B's 4: 7 in flight, over the cap
            return
        assert claimed == 0  # B's 4 are in flight: the cap is full
        assert a.policies.running(("default", "q")) == 4


async def test_a_budget_made_elsewhere_turns_the_namespace_exclusive_until_deleted(pg_dsn):
    async with two_daemons(pg_dsn) as (a, b):
        await call(b, "enqueue", queue="q", type="t")
        assert b.cluster.shared == 0  # a queue new to B: recorded exclusively
        await call(b, "enqueue", queue="q", type="t")
        await call(b, "enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 2)
        assert b.cluster.shared == 2
        reloads = b.cluster.shared_reloads
        await call(a, "budget_create", key="slots", allocation=2,
                   strategy={"type": "while_in_flight"})  # fmt: skip
        await call(b, "enqueue", queue="q", type="t")
        # The epoch moved: read back under the share lock, the budget turned the
        # transaction exclusive.
        assert (b.cluster.shared, b.cluster.shared_reloads) == (2, reloads + 1)
        await call(a, "budget_delete", key="slots")
        await call(b, "enqueue", queue="q", type="t")
        assert b.cluster.shared == 2  # B still knew the budget: exclusive, and reloaded
        await call(b, "enqueue", queue="q", type="t")
        assert b.cluster.shared == 3  # nothing limits the namespace again
        await call(b, "enqueue", queue="q", type="t", unique_key="u")
        assert b.cluster.shared == 3  # a unique key reads, then inserts: exclusive


@pytest.fixture
def jumping_clock() -> trio.testing.MockClock:
    """Real time's pace (asyncpg's timers run on it too), moved on at will."""
    return trio.testing.MockClock(rate=1)


async def test_a_claim_with_timers_due_runs_exclusive_and_catches_up(pg_dsn, jumping_clock):
    async with two_daemons(pg_dsn) as (a, _b):
        await call(a, "enqueue", queue="q", type="t", delay_ms=1_000)
        jumping_clock.jump(1.0)  # the job is due: the claim promotes it (exclusively)
        shared = a.cluster.shared
        assert len(await claim_jobs(a)) == 1
        assert a.cluster.shared == shared


def test_usage_is_upserted_in_one_order_whatever_order_the_writes_came_in():
    """Share-mode transactions of two daemons upsert ``usage_minutes`` side by side:
    rows locked in one order (the key's) cannot deadlock."""

    class Tx:
        now_ms = 3 * MINUTE_MS

        def undo(self, _inverse):
            pass

    class Store:
        class usage:
            rows: list = []

            @classmethod
            def meter(cls, rows):
                cls.rows = rows

    meter = Meter()
    meter.note(Tx(), {"zeta": 1, "alpha": 2})
    meter.note(Tx(), {"mid": 3, "alpha": 1})
    meter.flush(Store)
    assert Store.usage.rows == [("alpha", 3, 3), ("mid", 3, 3), ("zeta", 3, 1)]
