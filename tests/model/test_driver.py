"""The model's driver: a step ends settled, on each store (tests/model/driver.py).

A step whose work is still on the wire when it returns would let the next
step, or the invariants' reads, race it: the model's verdicts would then
depend on timing, and a failure could not be replayed or shrunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests import postgres
from tests.model.driver import CoreDriver
from tests.model.stores import ModelDatabase, PostgresExample


@pytest.fixture
def pg_driver(postgres_server: postgres.Server) -> Iterator[CoreDriver]:
    """A driver with its Core on a fresh PostgreSQL database."""
    with postgres.fresh_database(postgres_server.admin_dsn) as dsn:
        driver = CoreDriver(PostgresExample(ModelDatabase.prepare(dsn)))
        try:
            yield driver
        finally:
            driver.close()


def test_a_step_on_postgres_ends_only_once_the_commit_it_started_is_answered(pg_driver):
    """The step returns at once, leaving a write queued; the committer sends it,
    and while the statement is on the wire every Trio task is blocked, which is
    all :func:`trio.testing.wait_all_tasks_blocked` can see. The step must end
    only after the commit answered."""
    answered: list[Any] = []

    async def leave_a_write_behind() -> None:
        assert pg_driver.core is not None
        pg_driver.core.writer.submit(
            lambda tx: tx.conn.execute("SELECT pg_sleep(0.05)").fetchall(),
            lambda result, error: answered.append(error),
        )

    pg_driver.call(leave_a_write_behind)
    assert answered == [None]


def test_a_step_on_postgres_ends_only_once_a_read_outside_a_transaction_is_back(pg_driver):
    """The same for a read that a timer makes outside any transaction (through
    greenback, on any pooled connection)."""
    seen: list[Any] = []

    async def start_a_read() -> None:
        core = pg_driver.core
        assert core is not None and pg_driver._nursery is not None

        async def read() -> None:
            seen.append(core.conn.execute("SELECT 7 FROM pg_sleep(0.05)").fetchone()[0])

        pg_driver._nursery.start_soon(read)

    pg_driver.call(start_a_read)
    assert seen == [7]


def test_a_restart_on_postgres_opens_a_new_pool_on_the_same_database(pg_driver):
    job = pg_driver.verb("enqueue", queue="a", type="t")["job"]
    assert pg_driver.core is not None
    before, pool = pg_driver.core, pg_driver.core.db.pool
    pg_driver.restart()
    assert pg_driver.core is not before and pg_driver.core.db.pool is not pool
    assert pool.is_closing() and pool.get_size() == 0  # the old pool closed
    assert pg_driver.verb("get", job_id=job["id"])["job"]["status"] == "pending"


def test_each_example_on_postgres_starts_from_an_empty_database(postgres_server):
    """The test's database, emptied when an example's driver first opens it:
    no job of the example before, the migrations' seeded rows back."""
    with postgres.fresh_database(postgres_server.admin_dsn) as dsn:
        database = ModelDatabase.prepare(dsn)
        assert [table for table, _columns, _rows in database.seeds] == ["cluster_epoch"]
        ids = []
        for _example in range(2):
            driver = CoreDriver(PostgresExample(database))
            try:
                assert driver.verb("list", queue="a")["jobs"] == []
                ids.append(driver.verb("enqueue", queue="a", type="t")["job"]["id"])
            finally:
                driver.close()
        assert ids[0] == ids[1]  # the same seeded ids: nothing of the first is left
