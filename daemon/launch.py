"""What a start claims before it opens the store, and the store's opening.

The open-file limit and the connection cap, the state directory and its lock,
the socket path's lock, the HTTP sockets and the unix socket (or the one
systemd passed): each is released by the caller's exit stack, and any failure
is one :class:`~daemon.startup.StartupError` line. A state directory this
start created is removed again when the start fails.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import greenback
import trio
import trio_asyncio

from daemon.config import DaemonConfig
from daemon.pid_lock import PidLock
from daemon.startup import StartupError, connection_cap, raise_file_limit, reason
from daemon.store.health import StoreUnavailable
from daemon.store.opening import open_database
from daemon.store.pg_opening import dsn_target, open_postgres, redacted
from daemon.store.postgres import Portals
from daemon.transport.http_server import bind_http, close_sockets
from daemon.transport.socket_server import bind_unix_socket, listener_from_fd
from daemon.transport.starting import Starting

log = logging.getLogger("sluicegate")


def _remove_if_failed(state: Path, exc_type: type[BaseException] | None, *_: Any) -> None:
    """A state directory this start created, removed when the start failed.

    Only our lock files may be in it then (the store is opened after every
    check): anything else means it is no longer ours to remove.
    """
    if exc_type is None or not issubclass(exc_type, StartupError):
        return
    for name in ("sluicegate.lock", "sluicegate.sock.lock"):
        with contextlib.suppress(OSError):
            (state / name).unlink()
    with contextlib.suppress(OSError):
        state.rmdir()  # refused unless empty


def claim_resources(
    cfg: DaemonConfig, fds: list[int], claimed: contextlib.ExitStack
) -> tuple[trio.SocketListener, Any, int]:
    """Everything the daemon needs before its store: the file limit and the
    connection cap, the locks, the HTTP sockets, the unix socket. Each is
    released by ``claimed``; a failure is a :class:`StartupError`."""
    nofile = raise_file_limit()
    max_connections, warning = connection_cap(cfg.max_connections, nofile)
    if warning:
        log.warning("%s", warning)
    state = cfg.state_path()
    fresh = not state.exists()
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create state directory {state}: {reason(exc)}") from exc
    if fresh:
        # A start that fails leaves nothing behind: unwound last, after the locks.
        claimed.push(partial(_remove_if_failed, state))
    if not os.access(state, os.W_OK | os.X_OK):
        raise StartupError(f"state directory {state} is not writable")
    lock = PidLock(state / "sluicegate.lock", f"state directory {state}")
    lock.acquire()
    claimed.callback(lock.release)
    sock_path = cfg.socket_path()
    if not fds:
        # One daemon per socket path too, whatever its state directory, even
        # after the socket file was deleted: a lock beside the socket.
        try:
            sock_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StartupError(
                f"cannot create socket directory {sock_path.parent}: {reason(exc)}"
            ) from exc
        sock_lock = PidLock(sock_path.with_name(sock_path.name + ".lock"), f"socket {sock_path}")
        sock_lock.acquire()
        claimed.callback(sock_lock.release)
    http_sockets = None
    if cfg.http:
        http_sockets = bind_http(cfg)
        claimed.callback(close_sockets, http_sockets)
    if fds:
        # A socket systemd passed us is systemd's to keep: never unlinked.
        listener = listener_from_fd(fds[0])
    else:
        listener, socket_file = bind_unix_socket(sock_path)
        # Unlinked at exit only if the path is still the file we bound.
        claimed.callback(socket_file.remove)
    claimed.callback(listener.socket.close)
    return listener, http_sockets, max_connections


@contextlib.asynccontextmanager
async def opened_store(
    cfg: DaemonConfig, on_failure: Callable[[str, float], None] | None = None
) -> AsyncIterator[Any]:
    """The store for the daemon's life: the SQLite file, or (``database`` a
    ``postgresql://`` DSN) the PostgreSQL pool, with trio-asyncio's loop open
    around it and a greenback portal in every task (daemon.store.postgres).
    ``on_failure`` hears of each failed attempt to reach the database."""
    dsn = cfg.postgres_dsn()
    if dsn is None:
        db = open_store(cfg)
        try:
            yield db
        finally:
            db.close()
        return
    portals = Portals()
    trio.lowlevel.add_instrument(portals)
    try:
        await greenback.ensure_portal()  # this task began before the instrument
        async with trio_asyncio.open_loop():
            pg = await open_postgres(
                dsn,
                password_file=cfg.database_password_file,
                pool_size=cfg.database_pool_size,
                statement_timeout_ms=cfg.database_statement_timeout,
                connect_timeout_ms=cfg.database_connect_timeout,
                idle_in_transaction_ms=cfg.database_idle_in_transaction_timeout,
                on_failure=on_failure,
            )
            try:
                yield pg
            finally:
                with trio.CancelScope(shield=True):
                    await pg.aclose()
    finally:
        trio.lowlevel.remove_instrument(portals)


async def serve_on_store(
    cfg: DaemonConfig,
    listener: trio.SocketListener,
    http_sockets: Any,
    max_connections: int,
    serve: Callable[[Any], Awaitable[None]],
) -> str | None:
    """Open the store and ``serve(db)`` on it. A PostgreSQL database that does
    not answer yet is retried, and meanwhile the socket and HTTP answer
    ``unavailable`` (:mod:`daemon.transport.starting`); a SIGTERM or SIGINT then
    stops the start, and its name is returned (else None)."""
    if cfg.postgres_dsn() is None:
        async with opened_store(cfg) as db:
            await serve(db)
        return None
    host, name = dsn_target(cfg.database)
    starting = Starting(cfg, max_connections, {"store": "postgresql", "host": host,
                                               "name": name})  # fmt: skip
    failed: StartupError | None = None
    async with trio.open_nursery() as opening:
        await opening.start(starting.run, listener, http_sockets, opening.cancel_scope)
        try:
            async with opened_store(cfg, starting.failed) as db:
                await starting.stop()
                await serve(db)
        except StartupError as exc:  # one line, not inside the nursery's group
            failed = exc
            opening.cancel_scope.cancel()
    if failed is not None:
        raise failed
    if starting.signalled is not None:
        log.info("stopped by %s before the database answered", starting.signalled)
    return starting.signalled


def store_shown(cfg: DaemonConfig) -> str:
    """The store as logs show it: the file, or the DSN without its password."""
    dsn = cfg.postgres_dsn()
    return str(cfg.database_path()) if dsn is None else redacted(dsn)


def open_store(cfg: DaemonConfig) -> Any:
    """The database, or a :class:`StartupError` naming its path and the cause."""
    path = cfg.database_path()
    try:
        return open_database(path, cfg.synchronous, autocheckpoint=False,
                             journal_size_limit=cfg.wal_max_bytes)  # fmt: skip
    except StoreUnavailable as exc:  # its message names the path and the cause
        raise StartupError(str(exc)) from exc
    except OSError as exc:
        cause = reason(exc) if isinstance(exc, OSError) else str(exc)
        raise StartupError(f"cannot open the database {path}: {cause}") from exc
