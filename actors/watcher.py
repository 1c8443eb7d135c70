"""The settings watcher: reloads shared settings every two seconds, or at once.

Several daemons may share one database; a quota written by one reaches the
others when their watcher next reads the settings store (seed 000: "every
process caches a namespace's quota for two seconds"). A write made by this
daemon applies at its own commit; SIGHUP asks for a reload at once.

Checks added with :meth:`SettingsWatcher.add_check` run at every wake, before
the reload: the daemon's look at its config file (stat, then hash, then
parse, each only when the one before saw a change). This is the only timer
that looks at the file; nothing else polls.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("sluicegate.settings")
RELOAD_S = 2.0


class SettingsWatcher:
    """Calls ``reload`` every :data:`RELOAD_S` seconds and whenever nudged."""

    def __init__(self, reload: Callable[[], None], period_s: float = RELOAD_S) -> None:
        self._reload = reload
        self._period = period_s
        self._nudge = trio.Event()
        self._checks: list[Callable[[], Awaitable[object]]] = []
        self.reloads = 0
        #: Reloads failed in a row (the settings in force are the last good ones).
        self.failures = 0

    def add_check(self, check: Callable[[], Awaitable[object]]) -> None:
        """Also await ``check()`` at every wake, before the reload."""
        self._checks.append(check)

    def nudge(self) -> None:
        """Reload now (SIGHUP)."""
        self._nudge.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The watcher's task: runs until cancelled."""
        task_status.started()
        while True:
            with trio.move_on_after(self._period):
                await self._nudge.wait()
            self._nudge = trio.Event()
            try:
                for check in self._checks:
                    await check()
                self._reload()
            except Exception as exc:  # the store away (a database restarting): next time
                self.failures += 1
                if self.failures == 1:  # once per episode
                    log.error("settings reload failed, keeping the last ones: %r", exc)
                continue
            if self.failures:
                log.info("settings reload works again after %d failures", self.failures)
                self.failures = 0
            self.reloads += 1
