"""An in-process Core on the test's clock, short ways to call verbs, and virtual instants."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from actors.clock import Clock
from daemon.config import Config
from daemon.core import Core
from daemon.dispatch import dispatch
from daemon.store.opening import open_database

#: The wall instant every test core starts at (2023-11-14T22:13:20Z).
WALL0 = 1_700_000_000_000


@asynccontextmanager
async def running_core(
    tmp_path: Path,
    *,
    config: Config | None = None,
    timers: bool = True,
    writer: bool = True,
    wall_start_ms: int = WALL0,
    clock: Clock | None = None,
) -> AsyncIterator[Core]:
    """A Core on a fresh database whose wall clock starts at ``wall_start_ms``
    (:data:`WALL0` unless a test needs a particular day: virtual time is cheap,
    but the daemon's 2-second timers still tick through a long jump).

    ``timers=False`` runs only the group committer: the delay timer and the
    lease reaper never wake on their own, so a test can show what a claim does
    before they would. ``writer=False`` (with ``timers=False``) starts nothing:
    the test starts ``core.writer.run`` itself when it wants writes committed.
    ``clock`` replaces the clock (``wall_start_ms`` is then ignored).
    """
    db = open_database(tmp_path / "db.sqlite")
    try:
        core = Core(config or Config(), db, clock or Clock(wall_start_ms=wall_start_ms))
        async with trio.open_nursery() as nursery:
            if timers:
                await nursery.start(core.run)
            elif writer:
                await nursery.start(core.writer.run)
            try:
                yield core
            finally:
                nursery.cancel_scope.cancel()
    finally:
        db.conn.close()


def t0(core: Core) -> float:
    """The virtual instant at which ``core``'s wall clock read :data:`WALL0`."""
    return core.clock.deadline_for(WALL0)


async def call(core: Core, op: str, **args: Any) -> dict[str, Any]:
    """Call verb ``op`` in open mode, as a fresh connection would."""
    return await dispatch(core, core.auth.new_session(), op, args)


async def enqueue_answer(core: Core, queue: str = "q", **args: Any) -> dict[str, Any]:
    """``enqueue`` of one job of type ``t`` (on queue ``q`` unless named): the answer."""
    return await call(core, "enqueue", queue=queue, type="t", **args)


async def enqueue_job(core: Core, queue: str = "q", **args: Any) -> dict[str, Any]:
    """``enqueue`` of one job of type ``t`` (on queue ``q`` unless named): the job."""
    return (await enqueue_answer(core, queue, **args))["job"]


async def claim_jobs(core: Core, queues: Sequence[str] = ("q",), **args: Any) -> list[dict]:
    """``claim_next`` on ``queues`` (``q`` unless named): the claimed jobs."""
    answer = await call(core, "claim_next", queues=list(queues), **args)
    return [j["job"] for j in answer["jobs"]]


async def sleep_to(core: Core, seconds: float) -> None:
    """Sleep to ``t0 + seconds`` and let every task react at that instant (exactly)."""
    await trio.sleep_until(t0(core) + seconds)
    await trio.testing.wait_all_tasks_blocked()
    assert trio.current_time() - t0(core) == seconds


def job_row(core: Core, job_id: str) -> dict[str, Any]:
    """The stored state of a job, read directly."""
    state, attempts, ready_at, lease = core.conn.execute(
        "SELECT state, attempts, ready_at, lease FROM jobs WHERE id = ?", (job_id,)
    ).fetchone()
    return {"state": state, "attempts": attempts, "ready_at": ready_at, "lease": lease}


def db_counts(core: Core) -> dict[tuple[str, str], dict[str, int]]:
    """Non-zero counts per queue and state, from a fresh GROUP BY."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for ns, queue, state, n in core.conn.execute(
        "SELECT namespace, queue, state, count(*) FROM jobs GROUP BY namespace, queue, state"
    ):
        out.setdefault((ns, queue), {})[state] = n
    return out


def mem_counts(core: Core) -> dict[tuple[str, str], dict[str, int]]:
    """Non-zero counts per queue and state, from the in-memory QueueCounts."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for key, counts in core.counts:
        nonzero = {s: n for s, n in counts.items() if n}
        if nonzero:
            out[key] = nonzero
    return out
