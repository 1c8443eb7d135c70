"""The daemon: open the store, start the actors and listeners, serve, stop cleanly.

Nurseries nest in dependency order: the store's committer and timers, then the
socket and HTTP listeners. ``READY=1`` goes to systemd only once the socket
serves. Signals are a task of the run loop: SIGTERM/SIGINT drain (stop
accepting, answer waiting claims empty, finish requests in flight within
``daemon.shutdown_grace``, commit, close the database, exit 0); SIGHUP reloads
the config file.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import zoneinfo
from typing import Any

import trio

from actors.clock import Clock
from actors.errors import Refused
from daemon import quotas, systemd
from daemon.config import Config, ConfigError, load_config
from daemon.core import Core
from daemon.http_server import serve_http
from daemon.socket_server import SocketServer, bind_unix_socket, listener_from_fd
from daemon.store.checkpointer import Checkpointer
from daemon.store.database import open_database
from daemon.verbs.budgets import provision

log = logging.getLogger("sluicegate")


class Daemon:
    """One running daemon."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.core: Core | None = None
        self.socket_server: SocketServer | None = None
        self.http_addresses: list[str] = []
        self._stop = trio.Event()
        self.stopped_cleanly = False

    def stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does)."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop` (or a signal), then drain and return."""
        cfg = self.config.daemon
        # Zones come from the pinned tzdata package, never from the host.
        zoneinfo.reset_tzpath(to=[])
        clock = Clock()
        db = open_database(cfg.database_path(), cfg.synchronous, autocheckpoint=False)
        fds: list[int] = []
        try:
            core = self.core = Core(self.config, db, clock)
            fds = systemd.listen_fds()
            listener = listener_from_fd(fds[0]) if fds else bind_unix_socket(cfg.socket_path())
            async with trio.open_nursery() as root:
                # Handlers first: a SIGHUP right after READY=1 must reload, not kill.
                await root.start(self._signals)
                await root.start(core.run)
                checkpointer = Checkpointer(cfg.database_path())
                core.writer.after_commit.append(checkpointer.committed)
                await root.start(checkpointer.run)
                await self._provision()
                async with trio.open_nursery() as listeners:
                    server = self.socket_server = SocketServer(core)
                    await listeners.start(server.serve, listener)
                    http_stop = trio.Event()
                    if cfg.http:
                        self.http_addresses = await listeners.start(
                            serve_http, core, cfg.http, http_stop.wait
                        )
                    if (interval := systemd.watchdog_interval()) is not None:
                        root.start_soon(systemd.watchdog, interval)
                    if cfg.loop_probe > 0:
                        root.start_soon(_loop_probe, core, cfg.loop_probe / 1000)
                    log.info(
                        "serving socket=%s http=%s store=%s",
                        "LISTEN_FDS" if fds else cfg.socket_path(),
                        ",".join(self.http_addresses) or "off",
                        cfg.database_path(),
                    )
                    _settle_heap()
                    systemd.notify("READY=1")
                    task_status.started(self)
                    await self._stop.wait()
                    systemd.notify("STOPPING=1")
                    log.info("stopping: draining requests in flight")
                    core.drain()
                    http_stop.set()
                    await server.drain(cfg.shutdown_grace / 1000)
                # Listeners are closed; let the committer finish and stop the actors.
                root.cancel_scope.cancel()
            self.stopped_cleanly = True
        finally:
            db.conn.close()
            # A socket systemd passed us is systemd's to keep; only remove our own.
            if not fds and cfg.socket_path().exists():
                try:
                    cfg.socket_path().unlink()
                except OSError:
                    pass
            log.info("stopped")

    async def _signals(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    if self.reload():
                        await self._provision()
                elif self._stop.is_set():
                    # Keep the handler: a second SIGTERM must not abort the drain.
                    log.info("already stopping")
                else:
                    self.stop()

    async def _provision(self) -> None:
        """Make the config file's provisioned budgets, quotas and queue policies true
        in the store."""
        from daemon import policy_provision

        core = self.core
        if core is None:
            return
        for what, write in (
            ("budgets", provision(core, self.config.budget_specs)),
            ("quotas", quotas.provision(core)),
            ("policies", policy_provision.provision(core)),
        ):
            try:
                await core.writer.write(write)
            except Refused as exc:
                log.error("provisioning %s from %s failed: %s", what, self.config.source,
                          exc.message)  # fmt: skip
                core.problems.append(f"provisioning {what} failed: {exc.message}")
        for problem in self.config.quota_problems:
            log.error("%s: %s", self.config.source, problem)
        for problem in self.config.policy_problems:  # those queues fail closed (healthz)
            log.error("%s: %s", self.config.source, problem)
        core.watcher.nudge()

    def reload(self) -> bool:
        """SIGHUP: re-read the config file; a broken file keeps the last good one.

        True when the fresh config was taken.
        """
        try:
            fresh = load_config(self.config.source if self.config.source != "<defaults>" else None)
        except ConfigError as exc:
            log.error("reload refused, keeping the last good config: %s", exc)
            if self.core is not None:
                self.core.problems = [f"config reload failed, last good config in force: {exc}"]
            return False
        log.info("config reloaded from %s", fresh.source)
        # Settings that need a restart (paths, listeners) keep their running values;
        # later features read quotas, budgets and policies from the fresh config.
        self.config = fresh
        if self.core is not None:
            self.core.reload(fresh)
        return True


def _settle_heap() -> None:
    """Keep the garbage collector's full passes short.

    Everything alive at start (modules, classes, config) lives as long as the
    daemon; a full collection walking it all took 20-40 ms here, stalling the
    event loop. Frozen, it is never walked again; and a larger first
    generation makes collections rarer under the allocation churn of jobs.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


async def _loop_probe(core: Core, interval: float) -> None:
    """Measure event-loop lag: how late a timer wakes. Opt-in (daemon.loop_probe)."""
    while True:
        due = trio.current_time() + interval
        await trio.sleep_until(due)
        core.metrics.observe_lag(max(0.0, trio.current_time() - due))


def configure_logging() -> None:
    """journald-friendly logs: no timestamps when systemd adds its own."""
    import os

    fmt = "%(levelname)s %(name)s: %(message)s"
    if not os.environ.get("JOURNAL_STREAM"):
        fmt = "%(asctime)s " + fmt
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr)


def serve(config_path: str | None = None) -> int:
    """``sluice serve``: run the daemon in the foreground; the exit status."""
    configure_logging()
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 2
    for warning in config.warnings:
        log.warning("%s: %s", config.source, warning)
    daemon = Daemon(config)
    try:
        trio.run(daemon.run)
    except KeyboardInterrupt:
        return 130
    except RuntimeError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 1
    return 0 if daemon.stopped_cleanly else 1
