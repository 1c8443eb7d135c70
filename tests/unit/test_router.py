"""actors/router.py: waiting claims woken one per claimable job, never a herd."""

from __future__ import annotations

import trio
import trio.testing

from actors.router import ClaimRouter, RouterStats

Q1 = ("ns", "q1")
Q2 = ("ns", "q2")


async def _waiters(nursery, router, n, keys, deadline, results):
    for i in range(n):

        async def wait_one(i=i):
            results.append((i, await router.wait(keys, deadline), trio.current_time()))

        nursery.start_soon(wait_one)
        # Start them one by one so FIFO order is the start order.
        await trio.testing.wait_all_tasks_blocked()


async def test_ring_wakes_at_most_n_waiters_in_fifo_order(autojump_clock):
    with trio.fail_after(100):
        router = ClaimRouter()
        results: list[tuple[int, bool, float]] = []
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            await _waiters(nursery, router, 10, [Q1], t0 + 60, results)
            assert router.statistics().waiters == 10
            router.ring(Q1, 3, pending=3, edge=True)
            await trio.testing.wait_all_tasks_blocked()
            # Trio may run the woken tasks in any order; which ones woke is FIFO.
            assert sorted((i, ok) for i, ok, _ in results) == [(0, True), (1, True), (2, True)]
            assert all(at == t0 for _, _, at in results)
            assert router.statistics().waiters == 7
            router.ring(Q1, 1, pending=1, edge=False)
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(i for i, ok, _ in results if ok) == [0, 1, 2, 3]
        # The rest time out at the deadline, unrung.
        assert sorted(i for i, ok, _ in results if not ok) == [4, 5, 6, 7, 8, 9]
        assert all(at - t0 == 60 for _, ok, at in results if not ok)
        assert router.statistics().waiters == 0


def test_ring_with_no_waiters_is_a_no_op():
    router = ClaimRouter()
    router.ring(Q1, 5, pending=5, edge=True)
    assert router.statistics() == RouterStats(waiters=0, subscriptions=0, closed=False)


async def test_ring_of_another_queue_wakes_nobody(autojump_clock):
    with trio.fail_after(100):
        router = ClaimRouter()
        results: list = []
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            await _waiters(nursery, router, 2, [Q1], t0 + 10, results)
            router.ring(Q2, 5, pending=5, edge=True)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
        assert [(ok, at - t0) for _, ok, at in results] == [(False, 10), (False, 10)]


async def test_a_waiter_on_two_queues_is_woken_once(autojump_clock):
    with trio.fail_after(100):
        router = ClaimRouter()
        results: list = []
        both: list = []
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def on_both():
                both.append(await router.wait([Q1, Q2], t0 + 30))

            nursery.start_soon(on_both)
            await trio.testing.wait_all_tasks_blocked()
            await _waiters(nursery, router, 1, [Q2], t0 + 30, results)
            router.ring(Q1, 1, pending=1, edge=True)
            await trio.testing.wait_all_tasks_blocked()
            assert both == [True]
            # The two-queue waiter is done: a ring of Q2 goes to the next one.
            router.ring(Q2, 1, pending=1, edge=True)
            await trio.testing.wait_all_tasks_blocked()
            assert [(i, ok) for i, ok, _ in results] == [(0, True)]
            assert router.statistics().waiters == 0
        assert both == [True]


async def test_wait_times_out_at_the_exact_deadline(autojump_clock):
    with trio.fail_after(100):
        router = ClaimRouter()
        t0 = trio.current_time()
        assert await router.wait([Q1], t0 + 7.25) is False
        assert trio.current_time() - t0 == 7.25
        assert router.statistics().waiters == 0


async def test_wait_past_deadline_returns_false_at_once(autojump_clock):
    with trio.fail_after(10):
        router = ClaimRouter()
        t0 = trio.current_time()
        assert await router.wait([Q1], t0 - 1) is False
        assert trio.current_time() == t0


async def test_close_wakes_every_waiter_and_wait_returns_false(autojump_clock):
    with trio.fail_after(100):
        router = ClaimRouter()
        results: list = []
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            await _waiters(nursery, router, 4, [Q1, Q2], t0 + 60, results)
            router.close()
            await trio.testing.wait_all_tasks_blocked()
            expected = [(i, False, t0) for i in range(4)]
            assert sorted((i, ok, at) for i, ok, at in results) == expected
        assert router.closed
        assert router.statistics() == RouterStats(waiters=0, subscriptions=0, closed=True)
        # Waits after close return at once.
        assert await router.wait([Q1], t0 + 60) is False
        assert trio.current_time() == t0
        assert router.register([Q1]).done


async def test_cancelled_waiter_is_forgotten_and_skipped_by_ring(autojump_clock):
    with trio.fail_after(100):
        router = ClaimRouter()
        results: list = []
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            first = trio.CancelScope()

            async def cancelled():
                with first:
                    await router.wait([Q1], t0 + 60)

            nursery.start_soon(cancelled)
            await trio.testing.wait_all_tasks_blocked()
            await _waiters(nursery, router, 1, [Q1], t0 + 60, results)
            assert router.statistics().waiters == 2
            first.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert router.statistics().waiters == 1
            router.ring(Q1, 1, pending=1, edge=False)
            await trio.testing.wait_all_tasks_blocked()
            assert [(i, ok) for i, ok, _ in results] == [(0, True)]


async def test_many_timed_out_waiters_do_not_swallow_rings(autojump_clock):
    with trio.fail_after(1000):
        router = ClaimRouter()
        t0 = trio.current_time()
        late: list = []
        async with trio.open_nursery() as nursery:
            # A long-lived waiter first, then 200 that time out behind it.
            nursery.start_soon(lambda: _record(router, late, t0 + 500))
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(200):
                nursery.start_soon(router.wait, [Q1], t0 + 10)
            await trio.sleep(20)  # virtual time: autojump_clock
            assert router.statistics().waiters == 1
            router.ring(Q1, 1, pending=1, edge=False)
            await trio.testing.wait_all_tasks_blocked()
            assert late == [(True, 20.0)]
            assert router.statistics().waiters == 0
            assert router._waiters == {}


async def _record(router, out, deadline):
    t0 = trio.current_time()
    out.append((await router.wait([Q1], deadline), trio.current_time() - t0))


def test_subscribers_hear_only_edges():
    router = ClaimRouter()
    heard: list = []
    other: list = []
    router.subscribe("conn-1", [Q1, Q2], heard.append)
    router.subscribe("conn-2", [Q1], other.append)
    assert router.statistics().subscriptions == 3
    router.ring(Q1, 1, pending=4, edge=False)
    assert heard == [] and other == []
    router.ring(Q1, 1, pending=1, edge=True)
    assert heard == [{"event": "doorbell", "queue": "q1", "pending": 1}]
    assert other == [{"event": "doorbell", "queue": "q1", "pending": 1}]
    router.ring(Q2, 2, pending=2, edge=True)
    assert heard[-1] == {"event": "doorbell", "queue": "q2", "pending": 2}
    assert len(other) == 1


def test_unsubscribe_drops_every_subscription_of_the_owner():
    router = ClaimRouter()
    heard: list = []
    other: list = []
    router.subscribe("conn-1", [Q1, Q2], heard.append)
    router.subscribe("conn-2", [Q1], other.append)
    router.unsubscribe("conn-1")
    assert router.statistics().subscriptions == 1
    router.ring(Q1, 1, pending=1, edge=True)
    router.ring(Q2, 1, pending=1, edge=True)
    assert heard == []
    assert len(other) == 1
    router.unsubscribe("conn-2")
    router.unsubscribe("never-subscribed")
    assert router.statistics().subscriptions == 0
    assert router._subs == {}


def test_statistics_is_a_frozen_snapshot():
    router = ClaimRouter()
    snap = router.statistics()
    waiter = router.register([Q1, Q2])
    assert snap.waiters == 0
    assert router.statistics() == RouterStats(waiters=1, subscriptions=0, closed=False)
    router.unregister(waiter)
    router.unregister(waiter)  # twice is harmless
    assert router.statistics().waiters == 0
    assert router._waiters == {}
