"""The daemon: open the store, start the actors and listeners, serve, stop cleanly.

Nurseries nest in dependency order: the store's committer and timers, then the
socket and HTTP listeners. ``READY=1`` goes to systemd only once the socket
serves. Signals are a task of the run loop: SIGTERM/SIGINT drain (stop
accepting, answer waiting claims empty, finish requests in flight within
``daemon.shutdown_grace``, commit, close the database, exit 0); SIGHUP reloads
the config file, as does an edit of it that the settings watcher sees (what a
reload may change: :mod:`daemon.reload`).

Before the store is opened, everything that could stop the daemon from serving
is claimed (:mod:`daemon.startup`): the open-file limit is raised, the locks
of the state directory and of the socket path are taken, the HTTP port and the
unix socket are bound. Any failure there, or a database that
cannot be opened, is one :class:`~daemon.startup.StartupError` line and exit 2.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import sys
import zoneinfo
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from actors.clock import Clock
from actors.errors import Refused
from daemon import systemd
from daemon.admission.membership import Membership
from daemon.config import Config, ConfigError, DaemonConfig, PeriodicConfig, load_config
from daemon.config_watch import ConfigFileWatch
from daemon.core import Core
from daemon.launch import claim_resources, serve_on_store, store_shown
from daemon.logs import configure_logging
from daemon.periodic import PeriodicScheduler
from daemon.reload import decide
from daemon.startup import StartupError
from daemon.store.checkpointer import Checkpointer
from daemon.store.pg_leader import AdvisoryRole
from daemon.store.pg_notify import CrossDaemonDoorbell
from daemon.store.pg_stats import JobStatistics
from daemon.store.sqlite_mode import use_multithread_mode
from daemon.transport.http_server import serve_http
from daemon.transport.socket_server import SocketServer
from daemon.verbs.budgets import provision
from daemon.verbs.periodic import fire_enqueue

log = logging.getLogger("sluicegate")


class Daemon:
    """One running daemon."""

    def __init__(
        self, config: Config, *, overrides: dict[str, Any] | None = None,
        sqlite_multithread: bool = False,
    ) -> None:  # fmt: skip
        self.config = config
        #: ``[daemon]`` keys set on the command line (``--http``): a reload keeps them.
        self.overrides = dict(overrides or {})
        #: What the config file looked like when last read (the watcher's check).
        self.config_file = ConfigFileWatch(None if config.source == "<defaults>" else config.source)
        self._reloading = trio.Lock()  # one reload and its provisioning at a time
        self.core: Core | None = None
        self.periodic: PeriodicScheduler | None = None
        self.socket_server: SocketServer | None = None
        self.crossing: CrossDaemonDoorbell | None = None  # PostgreSQL only
        self.http_addresses: list[str] = []
        self._stop = trio.Event()
        self.stopped_cleanly = False
        self.started = False
        #: Whether ``serve`` put SQLite in multi-thread mode
        #: (daemon.store.sqlite_mode); only logged.
        self.sqlite_multithread = sqlite_multithread

    def stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does)."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop` (or a signal), then drain and return.

        Raises :class:`StartupError` (before anything is served) when the daemon
        cannot start.
        """
        cfg = self.config.daemon
        # Zones come from the pinned tzdata package, never from the host.
        zoneinfo.reset_tzpath(to=[])
        clock = Clock()
        fds = systemd.listen_fds()
        try:
            with contextlib.ExitStack() as claimed:  # released last: locks, listeners
                listener, http_sockets, max_connections = claim_resources(cfg, fds, claimed)

                async def serve(db: Any) -> None:
                    await self._serve(cfg, db, clock, listener, http_sockets, max_connections,
                                      socket_passed=bool(fds), task_status=task_status)  # fmt: skip

                if await serve_on_store(cfg, listener, http_sockets, max_connections, serve):
                    self.stopped_cleanly = True  # a signal before the database answered
        finally:
            if self.started:  # a daemon that never served never "stopped"
                log.info("stopped")

    async def _serve(
        self,
        cfg: DaemonConfig,
        db: Any,
        clock: Clock,
        listener: trio.SocketListener,
        http_sockets: Any,
        max_connections: int,
        *,
        socket_passed: bool,
        task_status: trio.TaskStatus[Any],
    ) -> None:
        core = self.core = Core(self.config, db, clock)
        if cfg.postgres_dsn() is not None:
            # Roles held by one daemon at a time, from their first tick (at start).
            core.retention_work.leadership = AdvisoryRole(db.connect, "retention").hold
            core.usage.leadership = AdvisoryRole(db.connect, "rollup").hold
        periodic = self.periodic = periodic_scheduler(core, self.config.periodic)
        async with trio.open_nursery() as root:
            # Handlers first: a SIGHUP right after READY=1 must reload, not kill.
            await root.start(self._signals)
            await root.start(core.run)
            await root.start(periodic.run)
            if cfg.postgres_dsn() is not None:  # doorbells across the daemons sharing it
                crossing = self.crossing = CrossDaemonDoorbell(
                    db.pool,
                    db.connect,
                    ring=lambda key, n: core.router.ring(key, n, pending=n, edge=True),
                    waiting_keys=core.router.waiting_keys,
                    some_waiting=lambda: core.router.some_waiting,
                    timers={
                        "lease": core.timers.reaper,
                        "delay": core.timers.delay_timer,
                        **({"limits": core.cluster} if core.cluster is not None else {}),
                    },
                    lag=core.metrics.notify_lag,
                )
                core.doorbell.remote = crossing.publish
                core.doorbell.remote_limits = lambda: crossing.publish_timer("limits", 0)
                core.metrics.per_daemon.notices = crossing.statistics
                await root.start(crossing.run)
                membership = Membership(committer=core.writer, now_ms=core.clock.now_ms,
                                        set_share=core.door.set_share)  # fmt: skip
                await root.start(membership.run)
                core.on_drain.append(membership.leave)
                statistics = JobStatistics(db.pool)
                core.writer.after_commit.append(lambda: statistics.committed(core.writer.writes))
                await root.start(statistics.run)
            if cfg.postgres_dsn() is None:  # SQLite's WAL (PostgreSQL checkpoints itself)
                checkpointer = Checkpointer(
                    cfg.database_path(), health=core.writer.health, hold_writes=core.writer.held
                )
                core.writer.after_commit.append(checkpointer.committed)
                await root.start(checkpointer.run)
            await self._provision()
            async with trio.open_nursery() as listeners:
                server = self.socket_server = SocketServer(core, max_connections)
                await listeners.start(server.serve, listener)
                http_stop = trio.Event()
                if http_sockets is not None:
                    self.http_addresses = await listeners.start(
                        serve_http, core, http_sockets, http_stop.wait
                    )
                if (interval := systemd.watchdog_interval()) is not None:
                    root.start_soon(systemd.watchdog, interval)
                if cfg.loop_probe > 0:
                    root.start_soon(_loop_probe, core, cfg.loop_probe / 1000)
                log.info(
                    "serving socket=%s http=%s store=%s max_connections=%d sqlite=%s",
                    "LISTEN_FDS" if socket_passed else cfg.socket_path(),
                    ",".join(self.http_addresses) or "off",
                    store_shown(cfg),
                    max_connections,
                    "multi-thread" if self.sqlite_multithread else "serialized",
                )
                _settle_heap()
                self.started = True
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

    async def _signals(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The reload entry points: SIGHUP, and the settings watcher's look at the
        config file every 2 s; SIGTERM/SIGINT stop."""
        if self.core is not None:
            self._warn_if_open()
            self.core.watcher.add_check(self._check_config_file)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    async with self._reloading:
                        if self.reload():
                            await self._provision()
                elif self._stop.is_set():
                    # Keep the handler: a second SIGTERM must not abort the drain.
                    log.info("already stopping")
                else:
                    self.stop()

    async def _check_config_file(self) -> None:
        """The settings watcher's check: reload as SIGHUP does if the file changed."""
        async with self._reloading:
            if self.config_file.changed() and self.reload():
                await self._provision()

    def _warn_if_open(self) -> None:
        """At start, in open mode: say so, and name the namespaces the store already
        holds (from a run with tokens), which any client of the socket now reaches."""
        if not self.config.open_mode or self.core is None:
            return
        where = self.config.source
        if where == "<defaults>":
            where = "the built-in defaults (no config file)"
        held = sorted(
            ({ns for ns, _q in self.core.known_queues} | {ns for ns, _k in self.core.budgets})
            - {"default"}
        )
        note = ""
        if held:
            shown = ", ".join(repr(ns) for ns in held[:10])
            more = f" and {len(held) - 10} more" if len(held) > 10 else ""
            note = f"; the store already holds namespaces {shown}{more}, now open to them too"
        log.warning(
            "open mode: no [[tokens]] in %s: every client of the socket is namespace "
            "'default' with every grant, operator included; the socket's file permissions "
            "are the only access control%s",
            where,
            note,
        )

    async def _provision(self) -> None:
        """Make the config file's provisioned budgets, quotas and queue policies true
        in the store."""
        from daemon.admission import policy_provision

        core = self.core
        if core is None:
            return
        for what, write in (
            ("budgets", provision(core, self.config.budget_specs)),
            ("quotas", core.quotas.provision()),
            ("policies", policy_provision.provision(core.policies, core.config.policy_tables)),
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
        """Re-read the config file (SIGHUP, or the watcher saw it change) and take
        what :func:`daemon.reload.decide` allows.

        A file that does not load, or that would lower security, is refused
        whole: the last good config stays and ``/healthz`` names the reason.
        Keys that need a restart keep their running values ("needs a restart:
        <key>" in the log); the rest applies. True when the fresh config was taken.
        """
        self.config_file.changed()  # what is read now is not a change at the next check
        try:
            fresh = load_config(self.config.source if self.config.source != "<defaults>" else None)
        except ConfigError as exc:
            self._refuse([f"{exc.source}: {p}" for p in exc.problems], "config reload failed")
            return False
        if self.overrides:
            fresh = attrs.evolve(fresh, daemon=attrs.evolve(fresh.daemon, **self.overrides))
        decision = decide(self.config, fresh)
        if decision.config is None:
            self._refuse([f"{fresh.source}: {why}" for why in decision.refusals],
                         "config reload refused")  # fmt: skip
            return False
        for key in decision.needs_restart:
            log.warning("%s: needs a restart: %s (the running value stays)", fresh.source, key)
        log.info("config reloaded from %s", fresh.source)
        self.config = decision.config
        if self.core is not None:
            self.core.reload(decision.config)
        if self.periodic is not None:
            self.periodic.replace(decision.config.periodic)
        return True

    def _refuse(self, reasons: list[str], what: str) -> None:
        """A reload not taken: log it, and degrade ``/healthz`` until a good one."""
        for why in reasons:
            log.error("reload refused, keeping the last good config: %s", why)
        if self.core is not None:
            self.core.problems = [f"{what}, last good config in force: {why}" for why in reasons]


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


def periodic_scheduler(core: Core, entries: Iterable[PeriodicConfig]) -> PeriodicScheduler:
    """The config's periodic entries, fired through the verb layer's enqueue."""
    return PeriodicScheduler(
        entries,
        clock=core.clock,
        writer=core.writer,
        enqueue=fire_enqueue(core),
        fired=core.metrics.periodic_fired,
    )


def serve(config_path: str | None = None, *, http: str | None = None, debug: bool = False) -> int:
    """``sluice serve``: run the daemon in the foreground; the exit status.

    ``http`` (``--http``) overrides ``[daemon] http``; ``debug`` (``--debug``)
    adds the traceback to a start-up failure's one line.
    """
    configure_logging(debug)
    # First thing, before this process opens any SQLite connection (the module's docstring).
    multithread = use_multithread_mode()
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 2
    overrides: dict[str, Any] = {} if http is None else {"http": http}
    if overrides:
        config = attrs.evolve(config, daemon=attrs.evolve(config.daemon, **overrides))
    for warning in config.warnings:
        log.warning("%s: %s", config.source, warning)
    # A reload keeps the overrides.
    daemon = Daemon(config, overrides=overrides, sqlite_multithread=multithread)
    try:
        trio.run(daemon.run)
    except StartupError as exc:
        if debug:
            log.exception("start-up failed")
        print(f"sluice: {exc.message}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except RuntimeError as exc:
        if debug:
            log.exception("stopped by an error")
        print(f"sluice: {exc}", file=sys.stderr)
        return 1
    return 0 if daemon.stopped_cleanly else 1
