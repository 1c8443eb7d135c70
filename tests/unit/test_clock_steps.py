"""Steps of the host's wall clock (-1 h, +1 h, +24 h) while windows, drips and leases are live.

The decision (issue 17, part 5). The daemon's wall time is the host's wall clock
read once, at start, plus Trio's monotonic time since (:mod:`actors.clock`, as
DESIGN.md says). A step of the host clock while the daemon runs is **not
adopted**: every window boundary, drip refill and lease expiry stays timed on the
monotonic clock, so a step changes nothing until the next start, and
:meth:`Clock.wall_step_ms` tells how far the host has moved meanwhile. Adopting
steps at run time would move every stored instant's meaning mid-flight (a lease
taken a second ago lapsing at once on +24 h) for no gain in safety; the cost of
not adopting is that the daemon's instants (``*_at``, calendar windows) are off by
the step until a restart.

At the next start the step is adopted (the stored instants were written on the
old time):

- **forward** (+1 h, +24 h): a window whose boundary the step passed reopens at
  once; a drip refills at most up to its burst, never above it; a lease the step
  passed has lapsed and is reaped (the job runs again: a duplicate explained by a
  lease lapse, as the delivery contract says).
- **backward** (-1 h): no elapsed time goes negative (refills count
  ``max(0, now - as_of)``); a drip's next token comes, and a dead worker's lease
  lapses, at most the step later than without it; a live worker's next heartbeat
  re-anchors its lease on the new time. A window reopens at its boundary on the
  new time: at most the step later.

  The one case where the issue's properties conflict: a window used up within the
  step of its start, with the window before it used up too. Never over (the
  product's rule) wins over never shut longer than one nominal window: the stored
  usage of windows after the current one is loaded at start
  (:attr:`actors.claim_windows.WindowUsage.ahead`), so the window charged on the old
  time stays used up when it comes round on the new one. The queue is then shut
  for one nominal window plus the step, at most.

Tested here on MockClock with a separate wall source (:class:`HostWall`) standing
in for the host's clock, on the real Core and store, restarts included.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import trio
import trio.testing

from actors.clock import Clock
from actors.limits import MAX_WAIT_MS
from actors.policy import PolicyState, parse_policy
from daemon.core import Core
from tests.unit.harness import call, claim_jobs, job_row, running_core

HOUR = 3_600_000
DAY = 24 * HOUR
STEPS = [-HOUR, HOUR, DAY]
IDS = ["back_1h", "forward_1h", "forward_24h"]
LA = ZoneInfo("America/Los_Angeles")
DAY_LA = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}
#: 2023-11-14 14:00 in Los Angeles: ten hours before the window's boundary.
AFTERNOON = int(datetime(2023, 11, 14, 14, 0, tzinfo=LA).timestamp() * 1000)
MIDNIGHT = int(datetime(2023, 11, 15, 0, 0, tzinfo=LA).timestamp() * 1000)
#: Six tokens a minute (one per 10 s), at most two at once.
DRIP = {"allocation": 6, "strategy": {"type": "time_based", "duration_ms": 60_000, "burst": 2}}
LEASE_MS = 60_000


class HostWall:
    """The host's wall clock, as a test drives it: it moves with virtual time and
    steps when told (what NTP or ``date -s`` does to the OS clock)."""

    def __init__(self, at_ms: int) -> None:
        self._at_ms = at_ms
        self._t0 = trio.current_time()
        self.stepped = 0

    def __call__(self) -> int:
        return self._at_ms + round((trio.current_time() - self._t0) * 1000) + self.stepped

    def step(self, ms: int) -> None:
        """Step the clock by ``ms`` (negative: back)."""
        self.stepped += ms


def daemon(tmp_path: Path, host: HostWall) -> AbstractAsyncContextManager[Core]:
    """A Core on ``tmp_path``'s database (kept across calls: a second call is a
    restart) whose clock reads its wall time from ``host`` at start."""
    return running_core(tmp_path, clock=Clock(wall_source=host))


async def enqueue(core: Core, n: int, **extra: Any) -> None:
    await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t", **extra}] * n)


async def claim(core: Core, n: int = 100, **extra: Any) -> list[dict[str, Any]]:
    return await claim_jobs(core, ["q"], max=n, **extra)


async def seconds_to_a_claim(core: Core, most_ms: int) -> float:
    """Virtual seconds until a waiting claim gets a job (fails past ``most_ms``)."""
    start = trio.current_time()
    with trio.fail_after(most_ms / 1000 + 1):
        while not await claim(core, 1, wait_ms=MAX_WAIT_MS):
            pass
    return trio.current_time() - start


async def claims_within(core: Core, seconds: float) -> int:
    """How many jobs waiting claims get in the next ``seconds``."""
    start, got = trio.current_time(), 0
    while trio.current_time() - start < seconds:
        got += len(await claim(core, wait_ms=1_000))
    return got


async def window_policy(core: Core) -> None:
    await call(core, "policy_set", queue="q", max_claims_per_window=3, window=DAY_LA)


async def drain_a_drip(core: Core) -> None:
    """The budget ``drip``, twenty jobs bound to it, and its burst (two) claimed."""
    await call(core, "budget_create", key="drip", **DRIP)
    await enqueue(core, 20, budgets=[{"key": "drip"}])
    assert len(await claim(core)) == 2


def drip_state(core: Core) -> dict[str, Any]:
    return core.budgets[("default", "drip")].to_wire(core.clock.now_ms())["state"]


# -- the clock itself ---------------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS, ids=IDS)
async def test_a_step_of_the_host_clock_is_seen_not_adopted(step, autojump_clock):
    host = HostWall(AFTERNOON)
    clock = Clock(wall_source=host)
    assert clock.now_ms() == AFTERNOON and clock.wall_step_ms() == 0
    mono, wall = clock.monotonic(), clock.now_ms()
    host.step(step)
    await trio.sleep(90)  # virtual time (autojump_clock)
    assert clock.now_ms() - wall == 90_000  # elapsed wall time: the monotonic 90 s
    assert clock.monotonic() - mono == 90
    assert clock.wall_step_ms() == step
    again = Clock(wall_source=host)  # a restart adopts it
    assert again.now_ms() == AFTERNOON + 90_000 + step and again.wall_step_ms() == 0


# -- windows ------------------------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS, ids=IDS)
async def test_a_live_step_moves_no_window_boundary(tmp_path, step, autojump_clock):
    host = HostWall(AFTERNOON)
    async with daemon(tmp_path, host) as core:
        await window_policy(core)
        await enqueue(core, 5)
        assert len(await claim(core)) == 3  # the window is used up at 14:00
        host.step(step)
        assert await claim(core) == []
        status = await call(core, "admission_status", queue="q")
        waited = await seconds_to_a_claim(core, DAY)
        assert waited == (MIDNIGHT - AFTERNOON) / 1000  # at the boundary, as if no step
        assert core.clock.wall_step_ms() == step
    assert "window_exhausted" in str(status)


@pytest.mark.parametrize("step", STEPS, ids=IDS)
async def test_a_restart_after_a_step_reopens_a_window_at_most_the_step_late(
    tmp_path, step, autojump_clock
):
    host = HostWall(AFTERNOON)
    async with daemon(tmp_path, host) as core:
        await window_policy(core)
        await enqueue(core, 10)
        assert len(await claim(core)) == 3
    host.step(step)
    async with daemon(tmp_path, host) as core:
        remaining = max(0, MIDNIGHT - core.clock.now_ms())
        waited = await seconds_to_a_claim(core, DAY)
        # Forward past the boundary: open at once; otherwise at the boundary on the new time.
        assert waited == remaining / 1000
        assert waited * 1000 <= (MIDNIGHT - AFTERNOON) + max(0, -step) <= DAY
        assert len(await claim(core)) == 2  # the new window's three, no more
        assert await claim(core) == []


async def use_up_both_days(tmp_path: Path, host: HostWall) -> float:
    """From 23:30: the old day's three claims, then at 00:10 the new day's, then
    the host steps back 1 h; returns the instant the new day was used up."""
    async with daemon(tmp_path, host) as core:
        await window_policy(core)
        await enqueue(core, 8)
        assert len(await claim(core)) == 3
        await trio.sleep(40 * 60)  # virtual time (autojump_clock): 00:10
        assert len(await claim(core)) == 3
        exhausted = trio.current_time()
    host.step(-HOUR)
    return exhausted


async def test_the_worst_backward_step_shuts_a_window_for_one_window_plus_the_step(
    tmp_path, autojump_clock
):
    """Both windows used up around midnight, then -1 h and a restart: the old day
    (still used up) comes back for the hour, then the new day, already used up
    too. Never over (three claims per window) wins over never shut longer than
    a window: it stays shut its remaining 23 h 50 min plus the step."""
    host = HostWall(MIDNIGHT - 30 * 60_000)
    exhausted = await use_up_both_days(tmp_path, host)
    async with daemon(tmp_path, host) as core:
        assert core.clock.now_ms() == MIDNIGHT - 50 * 60_000  # 23:10 again
        await seconds_to_a_claim(core, DAY + HOUR)
        shut_ms = (trio.current_time() - exhausted) * 1000
        charged = core.conn.execute(
            "SELECT window_start, used FROM policy_usage ORDER BY window_start"
        ).fetchall()
        assert max(used for _start, used in charged) <= 3, charged  # never over
        assert shut_ms == DAY - 10 * 60_000 + HOUR


def test_a_window_charged_ahead_of_the_clock_starts_at_its_charge():
    """The unit under the test above: :attr:`WindowUsage.ahead` seeds a window
    when the clock reaches it, and windows the clock has passed are dropped."""
    state = PolicyState("default", "q")
    state.policy = parse_policy({"max_claims_per_window": 3, "window": DAY_LA})
    state.roll(MIDNIGHT - HOUR)
    (day,) = state.meters
    assert (day.end, day.used) == (MIDNIGHT, 0)
    day.ahead = {MIDNIGHT: 3, MIDNIGHT + DAY: 1}
    state.roll(MIDNIGHT + 1)
    assert (day.start, day.used) == (MIDNIGHT, 3)
    assert day.ahead == {MIDNIGHT + DAY: 1}
    state.roll(MIDNIGHT + 3 * DAY)
    assert (day.used, day.ahead) == (0, {})


# -- drips (time_based budgets) -----------------------------------------------------------


@pytest.mark.parametrize("step", STEPS, ids=IDS)
async def test_a_live_step_neither_refills_nor_stalls_a_drip(tmp_path, step, autojump_clock):
    host = HostWall(AFTERNOON)
    async with daemon(tmp_path, host) as core:
        await drain_a_drip(core)
        host.step(step)
        assert await claim(core) == []  # no token from the step
        assert await seconds_to_a_claim(core, 60_000) == 10.0  # the next one on time
        got = await claims_within(core, 60)
        assert got == 5  # one every 10 s after it, as without a step
        assert drip_state(core)["available"] >= 0


@pytest.mark.parametrize("step", STEPS, ids=IDS)
async def test_a_restart_after_a_step_never_admits_above_the_burst(tmp_path, step, autojump_clock):
    host = HostWall(AFTERNOON)
    async with daemon(tmp_path, host) as core:
        await drain_a_drip(core)
    host.step(step)
    async with daemon(tmp_path, host) as core:
        state = drip_state(core)
        assert 0 <= state["available"] <= 2
        first = len(await claim(core))
        assert first == (0 if step < 0 else 2)  # forward: the burst at most
        if step < 0:  # back: no negative elapsed time, the next token the step late
            waited = await seconds_to_a_claim(core, -step + 60_000)
            assert waited == -step / 1000 + 10
        got = await claims_within(core, 60)
        assert got <= 6  # then the drip's pace: never a second burst
        assert drip_state(core)["available"] >= 0


# -- leases -------------------------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS, ids=IDS)
async def test_a_live_step_neither_lapses_nor_extends_a_lease(tmp_path, step, autojump_clock):
    host = HostWall(AFTERNOON)
    async with daemon(tmp_path, host) as core:
        await enqueue(core, 1)
        (job,) = await claim(core, lease_ms=LEASE_MS)
        taken = trio.current_time()
        host.step(step)
        await trio.sleep_until(taken + 59.9)  # virtual time (autojump_clock)
        assert job_row(core, job["id"])["state"] == "running"
        await trio.sleep_until(taken + 60.1)  # virtual time (autojump_clock)
        await trio.testing.wait_all_tasks_blocked()
        assert job_row(core, job["id"])["state"] != "running"  # lapsed on time


@pytest.mark.parametrize("step", STEPS, ids=IDS)
async def test_a_restart_after_a_step_lapses_a_lease_at_most_the_step_late(
    tmp_path, step, autojump_clock
):
    host = HostWall(AFTERNOON)
    async with daemon(tmp_path, host) as core:
        await enqueue(core, 2)
        dead, alive = await claim(core, lease_ms=LEASE_MS)
    host.step(step)
    async with daemon(tmp_path, host) as core:
        restarted = trio.current_time()
        await trio.testing.wait_all_tasks_blocked()
        if step > 0:  # forward past the lease: lapsed and reaped at once
            assert job_row(core, dead["id"])["state"] != "running"
            return
        # Back: the worker that lives on heartbeats, and its lease is the new time's.
        beat = await call(core, "heartbeat", job_id=alive["id"], lease=alive["lease"])
        assert beat["lease_expires_at"] - core.clock.now_ms() == LEASE_MS
        await trio.sleep_until(restarted + 60.1)  # virtual time (autojump_clock)
        await trio.testing.wait_all_tasks_blocked()
        assert job_row(core, alive["id"])["state"] != "running"
        assert job_row(core, dead["id"])["state"] == "running"  # the step later, not never
        await trio.sleep_until(restarted + 60.1 + -step / 1000)  # virtual time (autojump_clock)
        await trio.testing.wait_all_tasks_blocked()
        assert job_row(core, dead["id"])["state"] != "running"
