"""Serving :class:`daemon.transport.http_app.HttpApp` with hypercorn's Trio worker.

The app is wrapped in :class:`daemon.transport.http_guard.HttpGuard` (security headers,
cross-site refusal, lingering close), so everything mounted inside it, the
board included, is served the same way.

The header deadline (``daemon.http_header_timeout``) is hypercorn's
``keep_alive_timeout``: its timer starts when a connection opens (and again
when a response ends) and is stopped only when a request's headers are
complete, not by each byte received. So a client that trickles its request
line and headers is cut off at the deadline however it paces them, and an
idle kept-alive connection lasts as long. ``read_timeout`` stays off: it
counts the time between two reads, which a trickler resets at will, and it
would cut a long poll (``claim_next`` with ``wait_ms``), whose client sends
nothing while it waits.

The listening sockets are bound by :func:`bind_http` before the store is
opened, so a port in use is one :class:`~daemon.startup.StartupError` line
(``cannot listen on 127.0.0.1:7890: address already in use ...``), not a
traceback after the database was created.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from daemon.startup import StartupError, reason
from daemon.transport.http_app import HttpApp
from daemon.transport.http_guard import HttpGuard

if TYPE_CHECKING:
    from daemon.config import DaemonConfig
    from daemon.services import Services

log = logging.getLogger("sluicegate.http")

#: Bytes of request line and headers h11 buffers at most (431/400 past it).
MAX_HEADER_BYTES = 64 * 1024


def asgi_app(core: Services) -> HttpGuard:
    """The daemon's whole ASGI application: the API (and board) inside the guard."""
    return HttpGuard(HttpApp(core))


def hypercorn_config(daemon: DaemonConfig, bind: str) -> HypercornConfig:
    """Hypercorn's settings for ``bind`` from the daemon's config."""
    config = HypercornConfig()
    config.bind = [bind]
    config.accesslog = None
    config.errorlog = log
    config.graceful_timeout = daemon.shutdown_grace / 1000
    config.keep_alive_timeout = daemon.http_header_timeout / 1000
    config.read_timeout = None
    config.h11_max_incomplete_size = MAX_HEADER_BYTES
    config.include_server_header = False  # no version banner for scanners
    return config


def bind_http(daemon: DaemonConfig) -> Sockets:
    """Bind and listen on ``daemon.http`` (``host:port`` or ``unix:/path``).

    A bind that fails (port in use, no such address, permission) is a
    :class:`StartupError` naming the address and the options that set it.
    """
    config = hypercorn_config(daemon, daemon.http)
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        raise StartupError(
            f"cannot listen on {daemon.http}: {reason(exc)} (set [daemon] http or --http)"
        ) from exc
    except ValueError as exc:  # e.g. a port that is not a number
        raise StartupError(f"cannot listen on {daemon.http}: {exc}") from exc
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
    return sockets


def close_sockets(sockets: Sockets) -> None:
    """Close sockets from :func:`bind_http` (after a start that failed later)."""
    for sock in (*sockets.secure_sockets, *sockets.insecure_sockets, *sockets.quic_sockets):
        sock.close()


async def serve_http(
    core: Services,
    sockets: Sockets,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP on ``sockets`` (from :func:`bind_http`) until triggered."""
    config = hypercorn_config(core.config.daemon, core.config.daemon.http)
    await worker_serve(
        wrap_app(asgi_app(core), config.wsgi_max_body_size, None),
        config,
        sockets=sockets,
        shutdown_trigger=shutdown_trigger,
        task_status=task_status,
    )
