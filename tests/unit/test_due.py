"""actors/due.py: a DueActor sleeps to its work's earliest instant, woken early by note()."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.clock import Clock
from actors.due import DueActor
from actors.reaper import DelayTimer, LeaseReaper

WALL0 = 1_700_000_000_000


class FakeWork:
    """Due items as wall instants; records when run_due ran (virtual time, now_ms)."""

    SPIN_LIMIT = 1_000

    def __init__(self, *instants: int) -> None:
        self.items = sorted(instants)
        self.runs: list[tuple[float, int]] = []
        self.earliest_calls = 0

    def earliest(self) -> int | None:
        self.earliest_calls += 1
        if self.earliest_calls > self.SPIN_LIMIT:
            # The actor is looping without sleeping; virtual time cannot advance.
            raise RuntimeError(f"DueActor spins at t={trio.current_time()!r}")
        return self.items[0] if self.items else None

    def add(self, at_ms: int) -> None:
        self.items = sorted([*self.items, at_ms])

    async def run_due(self, now_ms: int) -> None:
        self.runs.append((trio.current_time(), now_ms))
        self.items = [at for at in self.items if at > now_ms]


async def _started(nursery, clock: Clock, work: FakeWork, cls=DueActor) -> DueActor:
    actor = cls(clock, work)
    await nursery.start(actor.run)
    return actor


async def test_sleeps_exactly_to_the_earliest_instant(autojump_clock):
    with trio.fail_after(100):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = FakeWork(WALL0 + 3_000, WALL0 + 7_500)
        async with trio.open_nursery() as nursery:
            actor = await _started(nursery, clock, work)
            await trio.testing.wait_all_tasks_blocked()
            assert actor.target == WALL0 + 3_000
            assert work.runs == []
            await trio.sleep(50)  # virtual time: autojump_clock
            nursery.cancel_scope.cancel()
        assert work.runs == [(t0 + 3.0, WALL0 + 3_000), (t0 + 7.5, WALL0 + 7_500)]


async def test_already_due_work_runs_at_once(autojump_clock):
    with trio.fail_after(100):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = FakeWork(WALL0 - 5_000, WALL0)
        async with trio.open_nursery() as nursery:
            await _started(nursery, clock, work)
            await trio.testing.wait_all_tasks_blocked()
            assert work.runs == [(t0, WALL0)]
            assert work.items == []
            nursery.cancel_scope.cancel()


async def test_note_of_an_earlier_instant_wakes_it_early(autojump_clock):
    with trio.fail_after(100):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = FakeWork(WALL0 + 10_000)
        async with trio.open_nursery() as nursery:
            actor = await _started(nursery, clock, work)
            await trio.sleep(1)
            work.add(WALL0 + 2_000)
            actor.note(WALL0 + 2_000)
            assert actor.target == WALL0 + 2_000
            await trio.sleep(20)  # virtual time: autojump_clock
            nursery.cancel_scope.cancel()
        assert work.runs == [(t0 + 2.0, WALL0 + 2_000), (t0 + 10.0, WALL0 + 10_000)]


async def test_note_of_a_later_instant_does_not_wake_it(autojump_clock):
    with trio.fail_after(100):
        clock = Clock(wall_start_ms=WALL0)
        work = FakeWork(WALL0 + 5_000)
        async with trio.open_nursery() as nursery:
            actor = await _started(nursery, clock, work)
            await trio.testing.wait_all_tasks_blocked()
            calls = work.earliest_calls
            work.add(WALL0 + 9_000)
            actor.note(WALL0 + 9_000)
            await trio.testing.wait_all_tasks_blocked()
            assert work.earliest_calls == calls  # not woken to look again
            assert actor.target == WALL0 + 5_000
            nursery.cancel_scope.cancel()


async def test_idle_when_nothing_is_due_until_note(autojump_clock):
    with trio.fail_after(1_000):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = FakeWork()
        async with trio.open_nursery() as nursery:
            actor = await _started(nursery, clock, work)
            await trio.sleep(100)  # virtual time: autojump_clock
            assert actor.target is None
            assert work.earliest_calls == 1  # asked once, then slept: no polling
            assert work.runs == []
            work.add(WALL0 + 105_000)
            actor.note(WALL0 + 105_000)
            await trio.sleep(200)  # virtual time: autojump_clock
            nursery.cancel_scope.cancel()
        assert work.runs == [(t0 + 105.0, WALL0 + 105_000)]


async def test_note_of_a_past_instant_runs_now(autojump_clock):
    with trio.fail_after(100):
        clock = Clock(wall_start_ms=WALL0)
        work = FakeWork()
        async with trio.open_nursery() as nursery:
            actor = await _started(nursery, clock, work)
            await trio.sleep(3)  # virtual time: autojump_clock
            work.add(WALL0)
            actor.note(WALL0)
            await trio.testing.wait_all_tasks_blocked()
            assert work.runs == [(trio.current_time(), WALL0 + 3_000)]
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("cls", [LeaseReaper, DelayTimer])
async def test_reaper_and_delay_timer_are_due_actors(autojump_clock, cls):
    with trio.fail_after(100):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = FakeWork(WALL0 + 4_000)
        async with trio.open_nursery() as nursery:
            await _started(nursery, clock, work, cls)
            await trio.sleep(10)  # virtual time: autojump_clock
            nursery.cancel_scope.cancel()
        assert work.runs == [(t0 + 4.0, WALL0 + 4_000)]


async def test_fires_at_an_instant_whose_float_deadline_rounds_down(autojump_clock):
    with trio.fail_after(100):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = FakeWork(WALL0 + 1_001)
        async with trio.open_nursery() as nursery:
            await _started(nursery, clock, work)
            await trio.sleep(5)  # virtual time: autojump_clock
            nursery.cancel_scope.cancel()
        assert work.runs == [(t0 + 1.001, WALL0 + 1_001)]


async def test_refresh_finds_work_another_process_added(autojump_clock):
    """Work added to the store by someone else (another daemon on the same
    PostgreSQL) is found when the actor is told to look again."""
    with trio.fail_after(1_000):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = FakeWork()
        async with trio.open_nursery() as nursery:
            actor = await _started(nursery, clock, work)
            await trio.sleep(10)  # virtual time: autojump_clock
            work.add(WALL0 + 20_000)  # not noted here
            await trio.sleep(10)  # virtual time: autojump_clock
            assert actor.target is None
            actor.refresh()
            await trio.sleep(100)  # virtual time: autojump_clock
            nursery.cancel_scope.cancel()
        assert work.runs == [(t0 + 20.0, WALL0 + 20_000)]


async def test_notes_are_passed_on_and_heard_instants_are_not(autojump_clock):
    with trio.fail_after(1_000):
        clock = Clock(wall_start_ms=WALL0)
        work = FakeWork()
        passed_on: list[int] = []
        async with trio.open_nursery() as nursery:
            actor = await _started(nursery, clock, work)
            actor.on_note = passed_on.append
            work.add(WALL0 + 5_000)
            actor.note(WALL0 + 5_000)  # set here: the other daemons are told
            work.add(WALL0 + 3_000)
            actor.heard(WALL0 + 3_000)  # told by another daemon: not sent back
            await trio.testing.wait_all_tasks_blocked()
            assert actor.target == WALL0 + 3_000
            nursery.cancel_scope.cancel()
        assert passed_on == [WALL0 + 5_000]


class _FailingWork(FakeWork):
    """The store away for the first ``fails`` looks (a database restarting)."""

    def __init__(self, fails: int, *instants: int) -> None:
        super().__init__(*instants)
        self.fails = fails

    def earliest(self) -> int | None:
        if self.fails:
            self.fails -= 1
            raise ConnectionError("the database is away")
        return super().earliest()


async def test_a_store_failure_is_retried_with_backoff_not_the_end_of_the_actor(autojump_clock):
    with trio.fail_after(1_000):
        clock = Clock(wall_start_ms=WALL0)
        t0 = trio.current_time()
        work = _FailingWork(3, WALL0 + 1_000)
        async with trio.open_nursery() as nursery:
            await _started(nursery, clock, work)
            await trio.sleep(30)  # virtual time: autojump_clock
            nursery.cancel_scope.cancel()
        # Looked again after 0.5, 1 and 2 s, then found the item (due at 1 s): ran at once.
        assert work.runs == [(t0 + 3.5, WALL0 + 3_500)]
