"""daemon/store/reachability.py: what ``/healthz`` says of the database, on
virtual time, with a scripted probe: no query while the committer knows, at
most one probe per FRESH_S, one probe for concurrent requests, and a failed or
silent probe starts the store's failing episode."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from daemon.store.database import PROBE_FIRST, GroupCommit
from daemon.store.health import StoreHealth
from daemon.store.opening import open_database
from daemon.store.reachability import FRESH_S, DatabaseTarget, Reachability

PG = DatabaseTarget("postgresql", "db.internal:5432", "sluicegate")


class Database:
    """A scripted database: counts probes; ``away`` makes them fail, ``hang`` stall."""

    def __init__(self) -> None:
        self.away = False
        self.hang = False
        self.probes = 0
        self.commits = 0
        self.entered = trio.Event()
        self.release = trio.Event()

    async def probe(self) -> None:
        self.probes += 1
        self.entered.set()
        if self.hang:
            await trio.sleep_forever()
        await self.release.wait()
        if self.away:
            raise ConnectionRefusedError(111, "Connection refused")


@pytest.fixture
def db() -> Database:
    database = Database()
    database.release.set()
    return database


def _reach(db: Database, health: StoreHealth, timeout_s: float = 5.0) -> Reachability:
    return Reachability(PG, health=health, commits=lambda: db.commits, probe=db.probe,
                        timeout_s=timeout_s)  # fmt: skip


async def test_sqlite_asks_nothing_and_follows_the_store_health():
    with trio.fail_after(5):
        health = StoreHealth()
        reach = Reachability(DatabaseTarget("sqlite", None, "/x.db"), health=health,
                             commits=lambda: 0)  # fmt: skip
        assert await reach.wire() == {"store": "sqlite", "reachable": True, "host": None,
                                      "name": "/x.db"}  # fmt: skip
        health.failed(OSError(28, "No space left on device"))
        assert await reach.check() is False
        assert reach.probes == 0


async def test_one_probe_per_fresh_interval_when_idle(db, autojump_clock):
    with trio.fail_after(60):
        reach = _reach(db, StoreHealth())
        t0 = trio.current_time()
        assert await reach.check() is True
        assert await reach.check() is True
        await trio.sleep(FRESH_S / 2)
        assert await reach.check() is True
        assert db.probes == 1  # still fresh: no query
        await trio.sleep(FRESH_S / 2)
        assert await reach.check() is True
        assert db.probes == 2
        assert trio.current_time() - t0 == FRESH_S


async def test_commits_between_close_looks_prove_it_without_a_query(db, autojump_clock):
    with trio.fail_after(60):
        reach = _reach(db, StoreHealth())
        assert await reach.check() is True  # the first look probes: nothing known yet
        for _ in range(10):  # a load balancer every second, writes in between
            await trio.sleep(1)
            db.commits += 3
            assert await reach.check() is True
        assert db.probes == 1
        # A commit seen only after a long gap proves nothing recent: a probe.
        await trio.sleep(FRESH_S * 5)
        db.commits += 1
        assert await reach.check() is True
        assert db.probes == 2


async def test_concurrent_requests_share_one_probe(db, autojump_clock):
    with trio.fail_after(60):
        reach = _reach(db, StoreHealth())
        db.release = trio.Event()
        answers: list[bool] = []

        async def ask() -> None:
            answers.append(await reach.check())

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(ask)
            await db.entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            db.release.set()
        assert answers == [True] * 5
        assert db.probes == 1


async def test_a_failed_probe_starts_a_failing_episode_and_asks_no_more(db, autojump_clock):
    with trio.fail_after(60):
        health = StoreHealth()
        reach = _reach(db, health)
        assert await reach.check() is True
        db.away = True
        await trio.sleep(FRESH_S)
        assert await reach.check() is False
        assert health.failing is not None and "database is unavailable" in health.failing
        assert "ConnectionRefusedError" in health.unusable()[0]
        await trio.sleep(FRESH_S * 10)
        assert await reach.check() is False
        assert db.probes == 2  # failing: the committer probes, not /healthz
        # The committer's probe found it back (StoreHealth.wrote): probed again, fresh.
        db.away = False
        assert health.wrote()
        assert await reach.check() is True
        assert db.probes == 3


async def test_a_probe_without_an_answer_times_out_as_unreachable(db, autojump_clock):
    with trio.fail_after(60):
        health = StoreHealth()
        failures: list[BaseException] = []

        def failed(exc: BaseException) -> None:  # as GroupCommit.failed_elsewhere does
            failures.append(exc)
            health.failed(exc)

        reach = Reachability(PG, health=health, commits=lambda: 0, probe=db.probe,
                             on_failure=failed, timeout_s=3)  # fmt: skip
        db.hang = True
        t0 = trio.current_time()
        assert await reach.check() is False
        assert trio.current_time() - t0 == 3
        (failure,) = failures
        assert isinstance(failure, TimeoutError) and "within 3 s" in str(failure)


async def test_any_error_of_the_probe_counts_as_away(autojump_clock):
    with trio.fail_after(60):
        health = StoreHealth()

        async def dropped() -> None:
            raise LookupError('database "sluicegate" does not exist')

        reach = Reachability(PG, health=health, commits=lambda: 0, probe=dropped)
        assert await reach.check() is False
        assert health.failing is not None and "does not exist" in health.failing


async def test_a_failure_found_outside_a_write_wakes_the_idle_committer(tmp_path, autojump_clock):
    """GroupCommit.failed_elsewhere: the committer probes for the return even
    when no write comes (else an idle daemon's /healthz stayed 503)."""
    database = open_database(tmp_path / "r.db")
    health = StoreHealth(tmp_path / "r.db")
    writer = GroupCommit(database.conn, lambda: 1000, health=health)
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                writer.failed_elsewhere(ConnectionRefusedError(111, "Connection refused"))
                assert health.unusable()
                await trio.sleep(PROBE_FIRST - 0.001)  # virtual time (autojump_clock)
                assert health.failing is not None
                await trio.sleep(0.002)  # the first probe, at PROBE_FIRST, wrote
                assert health.failing is None and health.unusable() == []
                nursery.cancel_scope.cancel()
    finally:
        database.conn.close()
