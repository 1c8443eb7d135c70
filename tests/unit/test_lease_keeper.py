"""The worker's lease keeper: one task beats every running job's lease (virtual time)."""

from __future__ import annotations

from typing import Any

import trio

from daemon.sdk.errors import LeaseLost
from daemon.sdk.lease_keeper import LeaseKeeper


class FakeJob:
    """A claimed job whose heartbeats are recorded (and may be slow, or lost)."""

    def __init__(self, name: str, lease_ms: int, *, slow_s: float = 0.0, lost_at: int = 0) -> None:
        self.id = name
        self.lease_ms = lease_ms
        self.beats: list[float] = []
        self.slow_s = slow_s
        self.lost_at = lost_at  # the beat (1-based) that finds the lease lost; 0: never

    async def heartbeat(self) -> int:
        self.beats.append(trio.current_time())
        if self.lost_at and len(self.beats) >= self.lost_at:
            raise LeaseLost("lease_lost", "gone", 409)
        await trio.sleep(self.slow_s)  # virtual time (autojump_clock)
        return 0


class Outcome:
    lost = False


async def _kept(jobs: list[tuple[FakeJob, float]]) -> dict[str, Any]:
    """Keep each job for its seconds (in parallel); return each handler's fate."""
    keeper = LeaseKeeper()
    fate: dict[str, Any] = {}

    async def handler(job: FakeJob, seconds: float) -> None:
        outcome = Outcome()
        with trio.CancelScope() as scope:
            keeper.keep(job, scope, outcome)  # type: ignore[arg-type]
            try:
                await trio.sleep(seconds)  # virtual time (autojump_clock)
            finally:
                keeper.drop(job)  # type: ignore[arg-type]
        fate[job.id] = ("cancelled" if scope.cancelled_caught else "ran", outcome.lost,
                        trio.current_time())  # fmt: skip

    async with trio.open_nursery() as nursery:
        await nursery.start(keeper.run)
        async with trio.open_nursery() as handlers:
            for job, seconds in jobs:
                handlers.start_soon(handler, job, seconds)
        nursery.cancel_scope.cancel()
    return fate


async def test_a_job_is_beaten_every_third_of_its_lease_until_it_ends(autojump_clock):
    job = FakeJob("a", lease_ms=3000)
    start = trio.current_time()
    fate = await _kept([(job, 3.5)])
    assert [round(t - start, 3) for t in job.beats] == [1.0, 2.0, 3.0]
    assert fate["a"][:2] == ("ran", False)


async def test_a_short_lease_wakes_a_keeper_that_sleeps_for_a_long_one(autojump_clock):
    long, short = FakeJob("long", lease_ms=30_000), FakeJob("short", lease_ms=300)
    start = trio.current_time()
    await _kept([(long, 0.35), (short, 0.35)])
    assert long.beats == []  # its first beat (10 s) never came: it ended first
    assert [round(t - start, 3) for t in short.beats] == [0.1, 0.2, 0.3]


async def test_a_lost_lease_cancels_that_handler_only_and_beats_stop(autojump_clock):
    lost, other = FakeJob("lost", lease_ms=3000, lost_at=2), FakeJob("other", lease_ms=3000)
    start = trio.current_time()
    fate = await _kept([(lost, 10.0), (other, 3.5)])
    assert fate["lost"][:2] == ("cancelled", True)
    assert round(fate["lost"][2] - start, 3) == 2.0  # cancelled at its second beat
    assert len(lost.beats) == 2  # none after the loss
    assert fate["other"][:2] == ("ran", False) and len(other.beats) == 3


async def test_a_slow_beat_delays_no_other_job(autojump_clock):
    slow, quick = FakeJob("slow", lease_ms=3000, slow_s=5.0), FakeJob("quick", lease_ms=3000)
    start = trio.current_time()
    await _kept([(slow, 3.5), (quick, 3.5)])
    assert [round(t - start, 3) for t in quick.beats] == [1.0, 2.0, 3.0]
    assert [round(t - start, 3) for t in slow.beats] == [1.0, 2.0, 3.0]  # each in its own task
