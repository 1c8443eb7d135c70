"""PostgreSQL for the tests (issue 15): one server per session, a fresh database per test.

Where the server comes from, found once per session (once per xdist worker):

1. ``SLUICEGATE_TEST_POSTGRES``, a DSN, when set. It alone: a server the user named
   is never swapped for another, so when it does not connect the tests say so.
2. :data:`DEFAULT_DSN`, the local server (``.ci/run`` starts one), when it connects.
3. A throwaway cluster (:mod:`tests.postgres_cluster`) when ``initdb`` is found,
   stopped and removed at the session's end.

Without one, a test marked ``postgres`` skips, the reason naming what was tried, or
fails under ``CI=true``: :func:`unavailable` is the one place of that rule. Each test
gets its own database (:func:`fresh_database`): ``CREATE DATABASE`` with a unique name
from an admin connection, dropped ``WITH (FORCE)`` (PostgreSQL 13+) afterwards,
whatever the test did.

The admin work is asyncpg under ``asyncio.run``: fixtures call these synchronous
helpers outside any event loop. Connecting times out after :data:`CONNECT_TIMEOUT`
seconds, so a missing server is found fast.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import attrs
import pytest

from tests.postgres_cluster import ClusterFailed, ThrowawayCluster, find_bindir

ENV_VAR = "SLUICEGATE_TEST_POSTGRES"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
CONNECT_TIMEOUT = 2.0
T = TypeVar("T")
#: Every test database's name starts so: leftovers of a killed run are easy to find.
DATABASE_PREFIX = "sluicegate_test_"


@attrs.frozen
class Server:
    """A server the tests may use: a DSN that may create databases, and where it came from."""

    admin_dsn: str
    origin: str


@attrs.frozen
class NoServer:
    """No server: why, naming each place tried."""

    reason: str


def run_asyncio(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a thread of its own: the calling thread may hold
    a running loop (Playwright's sync API keeps one for the session) or be
    inside Trio."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def under_ci(environ: Mapping[str, str]) -> bool:
    """Whether this is a CI run: ``CI`` set to anything but empty, ``0``, ``false``, ``no``."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str, environ: Mapping[str, str]) -> NoReturn:
    """The rule for a test that needs PostgreSQL and has none: skip, saying why; under CI
    (which installs and starts PostgreSQL, ``.ci/run``) fail instead.
    """
    if under_ci(environ):
        pytest.fail(f"PostgreSQL is required under CI (.ci/run starts it): {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL for the tests: {reason}")


def probe(dsn: str) -> str | None:
    """None when ``dsn`` connects and may create databases; else why not."""
    return run_asyncio(_probe(dsn))


async def _probe(dsn: str) -> str | None:
    try:
        conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
    except Exception as exc:  # refused, timed out, bad DSN, auth: each a reason to report
        return f"{redact(dsn)} did not connect ({type(exc).__name__}: {exc})"
    try:
        may_create = await conn.fetchval(
            "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
        )
    finally:
        await conn.close()
    return None if may_create else f"{redact(dsn)} connects but may not CREATE DATABASE"


def find_server(
    environ: Mapping[str, str],
    *,
    default_dsn: str = DEFAULT_DSN,
    probe: Callable[[str], str | None] = probe,
) -> Server | NoServer:
    """The first two places of the order: :data:`ENV_VAR` if set, else ``default_dsn``."""
    if dsn := environ.get(ENV_VAR):
        failure = probe(dsn)
        if failure is None:
            return Server(dsn, ENV_VAR)
        return NoServer(f"{ENV_VAR}={failure} (only it is tried while it is set)")
    failure = probe(default_dsn)
    if failure is None:
        return Server(default_dsn, "the default DSN")
    return NoServer(f"{ENV_VAR} is not set; {failure}")


@contextmanager
def session_server(
    environ: Mapping[str, str],
    *,
    default_dsn: str = DEFAULT_DSN,
    probe: Callable[[str], str | None] = probe,
    bindir: Callable[[], Path | None] = find_bindir,
) -> Iterator[Server | NoServer]:
    """The session's server, in the module's order; a throwaway cluster started for the
    block if needed (stopped and removed after it).
    """
    found = find_server(environ, default_dsn=default_dsn, probe=probe)
    if isinstance(found, Server) or environ.get(ENV_VAR):
        yield found
        return
    programs = bindir()
    if programs is None:
        yield NoServer(f"{found.reason}; initdb not found (PATH, /usr/lib/postgresql/*/bin)")
        return
    cluster = ThrowawayCluster(programs)
    try:
        cluster.start()
    except ClusterFailed as exc:
        yield NoServer(f"{found.reason}; the throwaway cluster did not start: {exc}")
        return
    try:
        yield Server(cluster.admin_dsn, f"a throwaway cluster in {cluster.dir}")
    finally:
        cluster.stop()


@contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """A new, empty database (unique name, from ``template0``), dropped when the block
    ends however it ends: its DSN, the admin DSN with the database swapped.
    """
    name = f"{DATABASE_PREFIX}{uuid.uuid4().hex}"
    run_asyncio(_execute(admin_dsn, f'CREATE DATABASE "{name}" TEMPLATE template0'))
    try:
        yield database_dsn(admin_dsn, name)
    finally:
        run_asyncio(drop_database(admin_dsn, name))


async def drop_database(admin_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, ending its sessions (``WITH (FORCE)``)."""
    await _execute(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _execute(admin_dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(admin_dsn, timeout=CONNECT_TIMEOUT)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def database_dsn(dsn: str, name: str) -> str:
    """``dsn`` naming database ``name`` instead (host, user, options kept)."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


def redact(dsn: str) -> str:
    """``dsn`` with its password, if any, replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
