"""A real Core on its own Trio run, driven step by step from synchronous code.

Hypothesis state machines are synchronous, a Core lives inside one ``trio.run``
(its group committer, reaper, delay timer and budget waker are tasks, and its
events and cancel scopes belong to that run). So :class:`CoreDriver` keeps one
``trio.run`` alive in a thread for a whole example and each rule hands it one
coroutine with :func:`trio.from_thread.run`, waiting for the answer.

Time is :class:`trio.testing.MockClock` with ``rate=0`` and no autojump: it
moves only when a rule says so (:meth:`CoreDriver.advance`), never while the
run idles between steps. After every call and every jump the driver waits for
:func:`trio.testing.wait_all_tasks_blocked`, so the step ends quiescent: the
reaper has reaped what lapsed, the delay timer promoted what came due, and the
budget waker released what the budgets can pay. A step's outcome therefore
depends only on the steps before it, which is what makes the run reproducible
(derandomized hypothesis) and shrinkable.

A restart (:meth:`CoreDriver.restart`) cancels the Core's tasks, closes the
SQLite connection and builds a new Core on the same files, its wall clock
continuing where the old one stopped.
"""

from __future__ import annotations

import faulthandler
import math
import random
import shutil
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import trio
import trio.testing

from actors import entropy
from actors.clock import Clock
from daemon.config import Config, parse_config
from daemon.core import Core
from daemon.dispatch import dispatch
from daemon.store.opening import open_database

T = TypeVar("T")

#: Real seconds one step may take before the watchdog dumps every thread and exits.
STEP_WATCHDOG_S = 120

#: The wall instant every model run starts at (2023-11-14T22:13:20Z).
WALL0 = 1_700_000_000_000


def model_config() -> Config:
    """Open mode, with no admin write limit (the model changes limits often)."""
    return parse_config({"daemon": {"admin_write_rate": "unlimited"}}, "model.toml")


#: A freshly migrated, empty store, made once per process: creating the schema
#: costs more than a whole example's steps, so each example copies this file.
_template: Path | None = None


def _copy_template(path: Path) -> None:
    """Put an empty, migrated store at ``path`` (a copy of the process's template)."""
    global _template
    if _template is None:
        made = Path(tempfile.mkdtemp(prefix="sluicegate-model-template-")) / "db.sqlite"
        db = open_database(made)
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.conn.close()
        _template = made
    shutil.copyfile(_template, path)


class SeededEntropy:
    """:mod:`actors.entropy`'s pool, from a seeded generator (each example starts at 0)."""

    def __init__(self) -> None:
        self._random = random.Random(0)

    def reset(self) -> None:
        pass

    def take(self, n: int) -> bytes:
        return self._random.randbytes(n)


class CoreDriver:
    """One Core on one Trio run in a thread; every method is called from outside it."""

    def __init__(self, directory: Path, config: Config | None = None) -> None:
        self.path = directory / "db.sqlite"
        _copy_template(self.path)
        # Ids and leases from a seeded source: the ids' random part breaks ties in
        # claim order, and an example must replay the same way to shrink.
        self._entropy = entropy._pool
        entropy._pool = SeededEntropy()
        self.config = config or model_config()
        self.clock = trio.testing.MockClock()
        self.core: Core | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._core_scope: trio.CancelScope | None = None
        self._core_done: trio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._thread_main, name="model-trio", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure
        self.call(self._open, WALL0)

    # -- the Trio side --------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            trio.run(self._main, clock=self.clock)
        except BaseException as exc:  # reported to the caller
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    async def _open(self, wall_ms: int) -> None:
        assert self._nursery is not None
        db = open_database(self.path)
        core = Core(self.config, db, Clock(wall_start_ms=wall_ms))
        scope, done = trio.CancelScope(), trio.Event()

        async def run_core(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await core.run(task_status=task_status)
            finally:
                db.conn.close()
                done.set()

        await self._nursery.start(run_core)
        self.core, self._core_scope, self._core_done = core, scope, done
        await trio.testing.wait_all_tasks_blocked()

    async def _close(self) -> int:
        assert self.core is not None and self._core_scope is not None
        assert self._core_done is not None
        wall = self.core.clock.now_ms()
        self._core_scope.cancel()
        await self._core_done.wait()
        self.core = None
        return wall

    async def _settled(self, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        finally:
            await trio.testing.wait_all_tasks_blocked()

    async def _advance(self, ms: int) -> None:
        # Land exactly on the instant the Core's clock maps the new wall time to,
        # the one its timers sleep until: a float sum of jumps may stop an ulp
        # short of it, a timer due "now" would then not fire on a frozen clock.
        assert self.core is not None
        clock = self.core.clock
        target = clock.now_ms() + ms
        deadline = clock.deadline_for(target)
        self.clock.jump(deadline - trio.current_time())
        while trio.current_time() < deadline:
            self.clock.jump(math.ulp(deadline))
        assert clock.now_ms() == target, (clock.now_ms(), target)
        await trio.testing.wait_all_tasks_blocked()

    # -- the caller's side ----------------------------------------------------

    def call(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``afn(*args)`` on the Trio run, then let every task settle.

        Virtual time never fires a ``fail_after`` here, so a real-time watchdog
        turns a step that hangs into a traceback and a failed run.
        """
        faulthandler.dump_traceback_later(STEP_WATCHDOG_S, exit=True, file=sys.stderr)
        try:
            return trio.from_thread.run(self._settled, lambda: afn(*args), trio_token=self._token)
        finally:
            faulthandler.cancel_dump_traceback_later()

    def verb(self, op: str, **args: Any) -> dict[str, Any]:
        """Call verb ``op`` in open mode, as a fresh connection would."""

        async def go() -> dict[str, Any]:
            assert self.core is not None
            return await dispatch(self.core, self.core.auth.new_session(), op, args)

        return self.call(go)

    def now_ms(self) -> int:
        """The Core's wall clock, in ms."""
        assert self.core is not None
        return self.call(self._now)

    async def _now(self) -> int:
        assert self.core is not None
        return self.core.clock.now_ms()

    def advance(self, ms: int) -> None:
        """Move virtual time by ``ms`` and let every timer fire."""
        self.call(self._advance, ms)

    def restart(self) -> None:
        """Stop the Core, close its store, and open a new Core on the same files."""

        async def go() -> None:
            await self._open(await self._close())

        self.call(go)

    def close(self) -> None:
        """Stop the Core and the Trio run; wait for the thread; give back the entropy."""
        entropy._pool = self._entropy
        if self._token is None or not self._thread.is_alive():
            return

        async def go() -> None:
            if self.core is not None:
                await self._close()
            assert self._stop is not None
            self._stop.set()

        try:
            trio.from_thread.run(go, trio_token=self._token)
        except trio.RunFinishedError:
            pass
        self._thread.join(timeout=30)
