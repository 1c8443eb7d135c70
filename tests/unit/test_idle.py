"""The idle sweeper: one timer closes every connection idle for ``idle_timeout``,
exactly at its instant, and none that has work (virtual time)."""

from __future__ import annotations

import trio
import trio.testing

from daemon.transport.idle import IdleSweeper


class Conn:
    def __init__(self) -> None:
        self.closed_at: float | None = None

    def close(self) -> None:
        self.closed_at = trio.current_time()


async def test_idle_connections_close_exactly_at_their_timeout_in_idling_order(autojump_clock):
    sweeper = IdleSweeper(10.0)
    a, b = Conn(), Conn()
    async with trio.open_nursery() as nursery:
        await nursery.start(sweeper.run)
        t0 = trio.current_time()
        sweeper.idle(a, a.close)
        await trio.sleep(3)  # virtual time (autojump_clock)
        sweeper.idle(b, b.close)
        await trio.sleep(20)  # virtual time (autojump_clock)
        nursery.cancel_scope.cancel()
    assert a.closed_at == t0 + 10
    assert b.closed_at == t0 + 13


async def test_work_keeps_a_connection_open_and_idling_again_restarts_its_clock(autojump_clock):
    sweeper = IdleSweeper(10.0)
    a = Conn()
    async with trio.open_nursery() as nursery:
        await nursery.start(sweeper.run)
        t0 = trio.current_time()
        sweeper.idle(a, a.close)
        await trio.sleep(9)  # virtual time (autojump_clock)
        sweeper.busy(a)  # a request arrives 1 s before the timeout
        await trio.sleep(30)  # virtual time (autojump_clock): busy this long, still open
        assert a.closed_at is None
        sweeper.idle(a, a.close)  # the request ended at t0 + 39
        await trio.sleep(9.5)  # virtual time (autojump_clock)
        assert a.closed_at is None
        await trio.sleep(1)  # virtual time (autojump_clock)
        nursery.cancel_scope.cancel()
    assert a.closed_at == t0 + 49


async def test_a_timeout_of_zero_never_closes_and_no_timer_spins(autojump_clock):
    sweeper = IdleSweeper(0)
    a = Conn()
    async with trio.open_nursery() as nursery:
        await nursery.start(sweeper.run)
        sweeper.idle(a, a.close)
        await trio.sleep(86_400)  # virtual time (autojump_clock)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert a.closed_at is None


async def test_a_gone_connection_is_forgotten(autojump_clock):
    sweeper = IdleSweeper(5.0)
    a, b = Conn(), Conn()
    async with trio.open_nursery() as nursery:
        await nursery.start(sweeper.run)
        t0 = trio.current_time()
        sweeper.idle(a, a.close)
        sweeper.idle(b, b.close)
        sweeper.busy(a)  # closed by its client: removed, never closed again
        await trio.sleep(60)  # virtual time (autojump_clock)
        nursery.cancel_scope.cancel()
    assert a.closed_at is None
    assert b.closed_at == t0 + 5
