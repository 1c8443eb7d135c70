"""Serving :class:`daemon.http_app.HttpApp` with hypercorn's Trio worker.

The app is wrapped in :class:`daemon.http_guard.HttpGuard` (security headers,
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
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from daemon.http_app import HttpApp
from daemon.http_guard import HttpGuard

if TYPE_CHECKING:
    from daemon.core import Core

log = logging.getLogger("sluicegate.http")

#: Bytes of request line and headers h11 buffers at most (431/400 past it).
MAX_HEADER_BYTES = 64 * 1024


def asgi_app(core: Core) -> HttpGuard:
    """The daemon's whole ASGI application: the API (and board) inside the guard."""
    return HttpGuard(HttpApp(core))


def hypercorn_config(core: Core, bind: str) -> HypercornConfig:
    """Hypercorn's settings for ``bind`` from the daemon's config."""
    config = HypercornConfig()
    config.bind = [bind]
    config.accesslog = None
    config.errorlog = log
    config.graceful_timeout = core.config.daemon.shutdown_grace / 1000
    config.keep_alive_timeout = core.config.daemon.http_header_timeout / 1000
    config.read_timeout = None
    config.h11_max_incomplete_size = MAX_HEADER_BYTES
    config.include_server_header = False  # no version banner for scanners
    return config


async def serve_http(
    core: Core,
    bind: str,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP on ``bind`` (``host:port`` or ``unix:/path``) until triggered."""
    config = hypercorn_config(core, bind)
    await serve(asgi_app(core), config, shutdown_trigger=shutdown_trigger, task_status=task_status)
