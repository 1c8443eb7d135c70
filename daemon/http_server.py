"""Serving :class:`daemon.http_app.HttpApp` with hypercorn's Trio worker."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from daemon.http_app import HttpApp

if TYPE_CHECKING:
    from daemon.core import Core

log = logging.getLogger("sluicegate.http")


async def serve_http(
    core: Core,
    bind: str,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP on ``bind`` (``host:port`` or ``unix:/path``) until triggered."""
    config = HypercornConfig()
    config.bind = [bind]
    config.accesslog = None
    config.errorlog = log
    config.graceful_timeout = core.config.daemon.shutdown_grace / 1000
    config.keep_alive_timeout = 30
    config.h11_max_incomplete_size = 64 * 1024
    await serve(HttpApp(core), config, shutdown_trigger=shutdown_trigger, task_status=task_status)
