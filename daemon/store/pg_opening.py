"""Opening the PostgreSQL store: the pool, with retries, and the migrations.

``[daemon] database = "postgresql://..."`` selects it. The daemon runs asyncpg
under trio-asyncio (:mod:`daemon.store.bridge`); this module makes the pool
once the asyncio loop is open. A database that does not answer at start is
retried with backoff (one log line per attempt, the DSN shown without its
password) until it does; the schema is then migrated under the advisory lock
of :mod:`daemon.store.pg_schema`, so daemons starting together migrate once.

The password comes from ``database_password_file``, else from the DSN,
``PGPASSWORD`` or the passfile (asyncpg reads those two itself). It never
appears in a log line or an error: :func:`redacted` is what is shown, and
``/healthz`` shows only the host and the database (:func:`dsn_target`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import asyncpg
import attrs
import trio
import trio_asyncio

from daemon.store.postgres import PgConnection

log = logging.getLogger("sluicegate.store")

#: First and longest wait between connection attempts at start (seconds).
RETRY_S = (0.5, 10.0)


def redacted(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (for logs and errors)."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def dsn_target(dsn: str) -> tuple[str | None, str | None]:
    """``(host, database)`` that ``dsn`` names, without user or password (for
    ``/healthz``); None where the DSN leaves it to libpq's defaults.

    The host is the DSN's ``host[:port]`` list as written, or its ``host`` (and
    ``port``) query parameters (a unix socket directory); the database is the
    path, or the ``dbname`` parameter. No other parameter is read: a
    ``password`` there is never shown.
    """
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = unquote(parts.netloc.rpartition("@")[2]) or None
    if host is None and "host" in query:
        host = query["host"][-1]
        if "port" in query:
            host = f"{host}:{query['port'][-1]}"
    name = unquote(parts.path.lstrip("/")) or query.get("dbname", [None])[-1]
    return host, name


@attrs.frozen
class PoolStatistics:
    """A snapshot of the pool: connections open, in use, and the most it opens."""

    size: int
    in_use: int
    max_size: int


class PgDatabase:
    """The open PostgreSQL store: its pool, and the connection facade the
    store's statements run on (``conn``, as SQLite's database has one)."""

    def __init__(self, pool: Any, dsn: str, connect_args: dict[str, Any] | None = None) -> None:
        self.pool = pool
        self.conn = PgConnection(pool)
        #: What logs show of the DSN.
        self.shown = redacted(dsn)
        self._dsn = dsn
        self._connect_args = connect_args or {}

    async def connect(self) -> Any:
        """A connection of its own, outside the pool (asyncio side): the
        doorbell's listener holds one."""
        return await asyncpg.connect(self._dsn, **self._connect_args)

    async def ping(self) -> None:
        """One ``SELECT 1`` on a pooled connection (``/healthz``'s probe); raises
        what the pool or the server raised."""
        await trio_asyncio.aio_as_trio(self.pool.fetchval)("SELECT 1")

    def statistics(self) -> PoolStatistics:
        """The pool now (no I/O: the pool's own counts)."""
        size = self.pool.get_size()
        return PoolStatistics(size, size - self.pool.get_idle_size(), self.pool.get_max_size())

    async def aclose(self) -> None:
        """Close the pool (connections in use are waited for)."""
        await trio_asyncio.aio_as_trio(self.pool.close)()


async def _keep_session(_conn: Any) -> None:
    """The pool's reset of a released connection, beyond the ROLLBACK of an open
    transaction that asyncpg always does: nothing. asyncpg's default sends
    ``CLOSE ALL; UNLISTEN *; RESET ALL; SELECT pg_advisory_unlock_all()`` on every
    release, a round trip after each transaction and each read outside one.
    The daemon leaves no session state on a pooled connection: its locks are
    transaction-scoped (``pg_advisory_xact_lock``, ``SET LOCAL``), and the
    roles' session locks and LISTEN live on connections of their own
    (:mod:`daemon.store.pg_leader`, :mod:`daemon.store.pg_notify`)."""


def _password(password_file: str) -> str | None:
    if not password_file:
        return None
    return Path(password_file).read_text().strip()


async def open_postgres(
    dsn: str,
    *,
    password_file: str = "",
    pool_size: int = 10,
    statement_timeout_ms: int = 30_000,
    connect_timeout_ms: int = 5_000,
    idle_in_transaction_ms: int = 5_000,
    on_failure: Callable[[str, float], None] | None = None,
) -> PgDatabase:
    """The pool on ``dsn`` (retried with backoff until the server answers),
    migrated. Runs inside ``trio_asyncio.open_loop()``. ``on_failure(cause,
    retry_in_s)`` hears of each failed attempt (:mod:`daemon.transport.starting`).

    ``idle_in_transaction_ms`` sets the sessions' ``idle_in_transaction_session_timeout``.
    Every write transaction holds the cluster's epoch lock
    (:mod:`daemon.admission.cluster`), so a daemon frozen between two of its
    statements (SIGSTOP, a paused VM, swap) would stall every other daemon's
    writes for as long as it stays frozen. The server ends such a session after
    this long; the frozen daemon, once it runs again, finds the connection gone
    and answers that transaction's writes ``unavailable`` (nothing of it was
    committed). A live daemon's gaps between statements are its event loop's
    turns, far shorter.
    """
    # Imported here: the schema module is the migrations' (daemon.store.pg_schema).
    from daemon.store.pg_schema import migrate_postgres

    password = _password(password_file)
    connect_args = {"password": password, "timeout": connect_timeout_ms / 1000,
                    # No JIT: its compilation (tens of ms) would be paid by short
                    # statements whose plans merely look costly, like the limits'
                    # reload (daemon.store.epoch), inside the epoch lock.
                    "server_settings": {"application_name": "sluicegate", "jit": "off",
                                        "idle_in_transaction_session_timeout":
                                            str(idle_in_transaction_ms)}}  # fmt: skip
    delay = RETRY_S[0]
    attempt = 0
    while True:
        attempt += 1
        try:
            pool = await trio_asyncio.aio_as_trio(asyncpg.create_pool)(
                dsn,
                min_size=1,
                max_size=pool_size,
                command_timeout=statement_timeout_ms / 1000,
                reset=_keep_session,
                **connect_args,
            )
            break
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            cause = str(exc).replace(password, "***") if password else str(exc)
            log.warning(
                "database %s unavailable (attempt %d: %s); retrying in %.1f s",
                redacted(dsn), attempt, cause, delay,
            )  # fmt: skip
            if on_failure is not None:
                on_failure(f"{type(exc).__name__}: {cause}", delay)
            await trio.sleep(delay)
            delay = min(delay * 2, RETRY_S[1])

    async def migrate() -> int:  # on the asyncio side, one pooled connection
        async with pool.acquire() as conn:
            return await migrate_postgres(conn)  # type: ignore[no-any-return]

    try:
        version = await trio_asyncio.aio_as_trio(migrate)()
    except BaseException:
        await trio_asyncio.aio_as_trio(pool.close)()
        raise
    log.info("database %s at schema version %d", redacted(dsn), version)
    return PgDatabase(pool, dsn, connect_args)
