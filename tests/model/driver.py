"""A real Core on its own Trio run, driven step by step from synchronous code.

Hypothesis state machines are synchronous, a Core lives inside one ``trio.run``
(its group committer, reaper, delay timer and budget waker are tasks, and its
events and cancel scopes belong to that run). So :class:`CoreDriver` keeps one
``trio.run`` alive in a thread for a whole example and each rule hands it one
coroutine (through a memory channel that the run's main task serves, one call
at a time), waiting for the answer.

Time is :class:`trio.testing.MockClock` with ``rate=0`` and no autojump: it
moves only when a rule says so (:meth:`CoreDriver.advance`), never while the
run idles between steps. After every call and every jump the driver waits for
:func:`trio.testing.wait_all_tasks_blocked`, so the step ends quiescent: the
reaper has reaped what lapsed, the delay timer promoted what came due, and the
budget waker released what the budgets can pay. A step's outcome therefore
depends only on the steps before it, which is what makes the run reproducible
(derandomized hypothesis) and shrinkable.

On PostgreSQL a step is settled only when, besides, no statement is on the
wire (:mod:`tests.model.stores` says how that is seen): while one is, every
Trio task is blocked too. The driver waits for it, then for the tasks it
wakes, until both hold at once. The calls run in the main task, not in the
system task :func:`trio.from_thread.run` would make: trio-asyncio's loop is
found in the context of the task that opened it, and the Core's tasks, started
from a call, inherit it.

A restart (:meth:`CoreDriver.restart`) cancels the Core's tasks, closes the
store (the SQLite connection, or the PostgreSQL pool) and builds a new Core
on a newly opened one, its wall clock continuing where the old one stopped.
"""

from __future__ import annotations

import faulthandler
import math
import queue
import random
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import outcome
import trio
import trio.testing

from actors import entropy
from actors.clock import Clock
from daemon.config import Config
from daemon.core import Core
from daemon.dispatch import dispatch

T = TypeVar("T")

#: Real seconds one step may take before the watchdog dumps every thread and exits.
STEP_WATCHDOG_S = 120

#: The wall instant every model run starts at (2023-11-14T22:13:20Z).
WALL0 = 1_700_000_000_000


class ModelStore(Protocol):
    """What the driver needs of an example's store (:mod:`tests.model.stores`)."""

    name: str

    def config(self) -> Config: ...

    def around_run(self) -> Any: ...

    async def open(self) -> Any: ...

    async def close(self, db: Any) -> None: ...

    async def read(self, db: Any, fn: Callable[[], T]) -> T: ...

    def in_flight(self) -> list[Any]: ...


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

    def __init__(self, store: ModelStore, config: Config | None = None) -> None:
        self.store = store
        # Ids and leases from a seeded source: the ids' random part breaks ties in
        # claim order, and an example must replay the same way to shrink.
        self._entropy = entropy._pool
        entropy._pool = SeededEntropy()
        self.config = config or store.config()
        self.clock = trio.testing.MockClock()
        self.core: Core | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._requests: trio.MemorySendChannel[Any] | None = None
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
        self._requests, requests = trio.open_memory_channel[Any](1)
        async with self.store.around_run(), trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            # Each call runs here, in this task: inside the store's context.
            async for afn, reply in requests:
                reply.put(await outcome.acapture(self._settled, afn))
            if self.core is not None:
                await self._close()
            nursery.cancel_scope.cancel()

    async def _open(self, wall_ms: int) -> None:
        assert self._nursery is not None
        store = self.store
        db = await store.open()
        try:
            core = Core(self.config, db, Clock(wall_start_ms=wall_ms))
        except BaseException:
            await store.close(db)
            raise
        scope, done = trio.CancelScope(), trio.Event()

        async def run_core(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await core.run(task_status=task_status)
            finally:
                await store.close(db)
                done.set()

        await self._nursery.start(run_core)
        self.core, self._core_scope, self._core_done = core, scope, done

    async def _close(self) -> int:
        assert self.core is not None and self._core_scope is not None
        assert self._core_done is not None
        wall = self.core.clock.now_ms()
        self._core_scope.cancel()
        await self._core_done.wait()
        self.core = None
        return wall

    async def _settle(self) -> None:
        """Until every task is blocked and no statement is on the wire, both at once."""
        while True:
            await trio.testing.wait_all_tasks_blocked()
            flying = self.store.in_flight()
            if not flying:
                return
            await _first_landing(flying)

    async def _settled(self, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        finally:
            await self._settle()

    async def _advance(self, ms: int) -> None:
        # Land exactly on the instant the Core's clock maps the new wall time to,
        # the one its timers sleep until: a float sum of jumps may stop an ulp
        # short of it, a timer due "now" would then not fire on a frozen clock.
        assert self.core is not None
        # Never while a statement is on the wire: its timeouts would fire in virtual time.
        assert not self.store.in_flight(), "advance called before the last step settled"
        clock = self.core.clock
        target = clock.now_ms() + ms
        deadline = clock.deadline_for(target)
        self.clock.jump(deadline - trio.current_time())
        while trio.current_time() < deadline:
            self.clock.jump(math.ulp(deadline))
        assert clock.now_ms() == target, (clock.now_ms(), target)

    # -- the caller's side ----------------------------------------------------

    def call(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``afn(*args)`` on the Trio run, then let every task settle.

        Virtual time never fires a ``fail_after`` here, so a real-time watchdog
        turns a step that hangs into a traceback and a failed run.
        """
        faulthandler.dump_traceback_later(STEP_WATCHDOG_S, exit=True, file=sys.stderr)
        try:
            reply: queue.Queue[outcome.Outcome[T]] = queue.Queue()
            assert self._requests is not None
            request = (lambda: afn(*args), reply)
            trio.from_thread.run(self._requests.send, request, trio_token=self._token)
            result = reply.get()
            if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
                # The run is ending on an error of the Core's: that error, not this.
                self._thread.join(timeout=30)
                if self._failure is not None:
                    raise self._failure
            return result.unwrap()
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
        """Stop the Core, close its store, and open a new Core on a reopened store."""

        async def go() -> None:
            await self._open(await self._close())

        self.call(go)

    def close(self) -> None:
        """Stop the Core, close its store and the Trio run; wait for the thread;
        give back the entropy."""
        entropy._pool = self._entropy
        if self._token is None or not self._thread.is_alive():
            return
        assert self._requests is not None
        try:
            trio.from_thread.run(self._requests.aclose, trio_token=self._token)
        except trio.RunFinishedError:
            pass
        self._thread.join(timeout=30)


async def _first_landing(tasks: list[Any]) -> None:
    """Until one of ``tasks`` (asyncio's, on trio-asyncio's loop) is done."""
    landed = trio.Event()
    for task in tasks:
        task.add_done_callback(lambda _task: landed.set())
    await landed.wait()
