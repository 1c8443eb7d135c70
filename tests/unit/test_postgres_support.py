"""The tests' PostgreSQL (tests/postgres.py, issue 15): where the server comes from, the
skip-or-fail rule, and fresh databases: empty, writable, distinct, dropped afterwards.

Discovery and the rule are checked without a server (a fake probe, a refused port);
the rest uses the session's server, so it skips (or fails under CI) like any test
marked ``postgres``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
import trio
import trio_asyncio

from tests import postgres
from tests.postgres import ENV_VAR, NoServer, Server
from tests.postgres_cluster import ThrowawayCluster, find_bindir

#: Nothing listens on port 1: the connection is refused at once.
REFUSED = "postgresql://postgres@127.0.0.1:1/postgres"
NAMED = "postgresql://someone@db.example:6543/admin"


class Probe:
    """A fake :func:`postgres.probe`: records each DSN tried; connects to ``up`` only."""

    def __init__(self, *up: str) -> None:
        self.up = up
        self.tried: list[str] = []

    def __call__(self, dsn: str) -> str | None:
        self.tried.append(dsn)
        return None if dsn in self.up else f"{dsn} did not connect"


def no_cluster() -> Path | None:
    raise AssertionError("no throwaway cluster was to be tried")


def test_the_environment_variable_wins_over_the_default() -> None:
    probe = Probe(NAMED, postgres.DEFAULT_DSN)
    with postgres.session_server({ENV_VAR: NAMED}, probe=probe, bindir=no_cluster) as found:
        assert found == Server(NAMED, ENV_VAR)
    assert probe.tried == [NAMED]


def test_a_named_server_that_does_not_connect_is_not_swapped_for_another() -> None:
    probe = Probe(postgres.DEFAULT_DSN)
    with postgres.session_server({ENV_VAR: NAMED}, probe=probe, bindir=no_cluster) as found:
        assert found == NoServer(
            f"{ENV_VAR}={NAMED} did not connect (only it is tried while it is set)"
        )
    assert probe.tried == [NAMED]


def test_without_the_variable_the_default_dsn_is_used_when_it_connects() -> None:
    probe = Probe(postgres.DEFAULT_DSN)
    with postgres.session_server({ENV_VAR: ""}, probe=probe, bindir=no_cluster) as found:
        assert found == Server(postgres.DEFAULT_DSN, "the default DSN")


def test_without_a_server_the_reason_names_each_place_tried() -> None:
    """The real probe: port 1 refuses at once."""
    with postgres.session_server({}, default_dsn=REFUSED, bindir=lambda: None) as found:
        assert isinstance(found, NoServer)
    assert found.reason.startswith(f"{ENV_VAR} is not set; {REFUSED} did not connect (")
    assert "Connect call failed" in found.reason
    assert found.reason.endswith("; initdb not found (PATH, /usr/lib/postgresql/*/bin)")


def test_a_password_never_shows_in_a_reason() -> None:
    found = postgres.find_server({ENV_VAR: "postgresql://me:s3cret@127.0.0.1:1/postgres"})
    assert isinstance(found, NoServer)
    assert "s3cret" not in found.reason
    assert f"{ENV_VAR}=postgresql://me:***@127.0.0.1:1/postgres did not" in found.reason


@pytest.mark.parametrize("environ", [{}, {"CI": ""}, {"CI": "false"}, {"CI": "0"}])
def test_outside_ci_a_missing_server_skips_saying_why(environ: dict[str, str]) -> None:
    with pytest.raises(pytest.skip.Exception, match=r"^no PostgreSQL for the tests: nothing$"):
        postgres.unavailable("nothing", environ)


@pytest.mark.parametrize("environ", [{"CI": "true"}, {"CI": "1"}])
def test_under_ci_a_missing_server_fails_saying_why(environ: dict[str, str]) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"required under CI .*: nothing$"):
        postgres.unavailable("nothing", environ)


def test_a_database_dsn_keeps_everything_but_the_database() -> None:
    assert postgres.database_dsn(NAMED, "t1") == "postgresql://someone@db.example:6543/t1"
    socket_dsn = "postgresql://postgres@/postgres?host=/tmp/pg"
    assert postgres.database_dsn(socket_dsn, "t1") == "postgresql://postgres@/t1?host=/tmp/pg"


async def test_a_fresh_database_is_empty_and_writable(pg_dsn: str) -> None:
    """Through trio-asyncio, as the daemon's store will reach it."""
    with trio.fail_after(10):
        async with trio_asyncio.open_loop():
            conn = await trio_asyncio.aio_as_trio(asyncpg.connect)(pg_dsn, timeout=2)
            try:
                query = trio_asyncio.aio_as_trio(conn.fetch)
                value = trio_asyncio.aio_as_trio(conn.fetchval)
                assert await value("SELECT current_database()") == database_name(pg_dsn)
                assert (
                    await query(
                        "SELECT relname FROM pg_class JOIN pg_namespace n ON n.oid = relnamespace"
                        " WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
                    )
                    == []
                )
                await query("CREATE TABLE t (k int PRIMARY KEY, v text)")
                await query("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
                rows = await query("SELECT k, v FROM t ORDER BY k")
                assert [tuple(row) for row in rows] == [(1, "one"), (2, "two")]
            finally:
                await trio_asyncio.aio_as_trio(conn.close)()


def test_two_fresh_databases_are_distinct(postgres_server: Server) -> None:
    admin = postgres_server.admin_dsn
    with postgres.fresh_database(admin) as first, postgres.fresh_database(admin) as second:
        assert database_name(first) != database_name(second)
        assert database_name(first).startswith(postgres.DATABASE_PREFIX)
        asyncio.run(execute(first, "CREATE TABLE only_here (k int)"))
        assert asyncio.run(fetchval(first, "SELECT to_regclass('only_here') IS NOT NULL"))
        assert asyncio.run(fetchval(second, "SELECT to_regclass('only_here') IS NULL"))


def test_the_database_is_dropped_afterwards_even_when_the_test_failed(
    postgres_server: Server,
) -> None:
    admin = postgres_server.admin_dsn
    with postgres.fresh_database(admin) as kept:
        assert exists(admin, database_name(kept))
    assert not exists(admin, database_name(kept))
    with (
        pytest.raises(RuntimeError, match="the test failed"),
        postgres.fresh_database(admin) as failed,
    ):
        raise RuntimeError("the test failed")
    assert not exists(admin, database_name(failed))


def test_the_drop_ends_the_sessions_a_test_left_open(postgres_server: Server) -> None:
    """``WITH (FORCE)``: a connection still open does not keep its database alive."""
    admin = postgres_server.admin_dsn
    block = postgres.fresh_database(admin)
    dsn = block.__enter__()

    async def leave_a_session_open() -> None:
        conn = await asyncpg.connect(dsn, timeout=2)
        try:
            # The block's end runs asyncio.run of its own: in a thread, beside this loop.
            await asyncio.wait_for(asyncio.to_thread(block.__exit__, None, None, None), 10)
            # The server ended the session: asyncpg saw it close, or sees it now.
            ended = (asyncpg.InterfaceError, asyncpg.PostgresError)
            with pytest.raises(ended, match=r"closed|terminat"):
                await conn.fetchval("SELECT 1")
        finally:
            await conn.close()

    asyncio.run(leave_a_session_open())
    assert not exists(admin, database_name(dsn))


@pytest.mark.e2e
def test_a_throwaway_cluster_serves_fresh_databases_and_leaves_no_files() -> None:
    bindir = find_bindir()
    if bindir is None:
        postgres.unavailable("initdb not found (PATH, /usr/lib/postgresql/*/bin)", os.environ)
    with ThrowawayCluster(bindir) as cluster:
        assert cluster.dir is not None
        where = cluster.dir
        assert postgres.probe(cluster.admin_dsn) is None
        with postgres.fresh_database(cluster.admin_dsn) as dsn:
            asyncio.run(execute(dsn, "CREATE TABLE t (k int); INSERT INTO t VALUES (7)"))
            assert asyncio.run(fetchval(dsn, "SELECT k FROM t")) == 7
    assert not where.exists()
    assert cluster.dir is None


def database_name(dsn: str) -> str:
    return urlsplit(dsn).path.removeprefix("/")


def exists(admin_dsn: str, name: str) -> bool:
    return asyncio.run(
        fetchval(admin_dsn, "SELECT count(*) = 1 FROM pg_database WHERE datname = $1", name)
    )


async def execute(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=2)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def fetchval(dsn: str, query: str, *args: object) -> object:
    conn = await asyncpg.connect(dsn, timeout=2)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()
