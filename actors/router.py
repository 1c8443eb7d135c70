"""The claim router: waiting claims and subscriptions, woken by doorbells.

A waiting ``claim_next`` holds no database resources: it registers a
:class:`Waiter` on each of its queues and sleeps. When work becomes claimable
on a queue, the writer that made it so rings the doorbell with the number of
claimable jobs it added, and the router wakes at most that many waiters, oldest
first: one waiter per claimable job, never a herd. A woken waiter that finds
nothing (another claimer was quicker) simply waits again.

Subscriptions receive one ``doorbell`` event each time a queue goes from
nothing claimable to claimable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import trio

QueueKey = tuple[str, str]  # (namespace, queue)
EventSink = Callable[[dict[str, Any]], None]


@attrs.define(eq=False)
class Waiter:
    """One waiting claim: woken once, then done."""

    keys: tuple[QueueKey, ...]
    event: trio.Event = attrs.field(factory=trio.Event)
    done: bool = False

    def wake(self) -> None:
        self.done = True
        self.event.set()


@attrs.frozen
class RouterStats:
    """A snapshot of the router, for metrics and ``status``."""

    waiters: int
    subscriptions: int
    closed: bool


class ClaimRouter:
    """Holds waiting claims and subscriptions; rings them when work arrives."""

    def __init__(self) -> None:
        self._waiters: dict[QueueKey, deque[Waiter]] = {}
        self._subs: dict[QueueKey, dict[object, EventSink]] = {}
        self._live = 0
        self._closed = False
        #: Set while some claim waits (replaced when the last one stops): lets a
        #: task sleep until there are waiters instead of looking for them.
        self.some_waiting = trio.Event()

    @property
    def waiting(self) -> bool:
        """True while some claim waits."""
        return self._live > 0

    def waiting_keys(self) -> list[QueueKey]:
        """The queues some claim waits on."""
        return list(self._waiters)

    @property
    def closed(self) -> bool:
        """True once the daemon is draining: waits return at once."""
        return self._closed

    def register(self, keys: Iterable[QueueKey]) -> Waiter:
        """Register a waiter on ``keys``; pair with :meth:`unregister`."""
        if self._closed:
            waiter = Waiter(())
            waiter.wake()
            return waiter
        waiter = Waiter(tuple(keys))
        for key in waiter.keys:
            self._waiters.setdefault(key, deque()).append(waiter)
        self._live += 1
        self.some_waiting.set()
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        """Forget ``waiter`` (it timed out, was cancelled, or was woken)."""
        if not waiter.done:
            waiter.done = True
        if waiter.keys and self._live:
            self._live -= 1
            if not self._live:
                self.some_waiting = trio.Event()
            for key in waiter.keys:
                queue = self._waiters.get(key)
                if queue is not None:
                    _drop_done(queue)
                    if not queue:
                        del self._waiters[key]
            waiter.keys = ()

    async def wait(self, keys: Iterable[QueueKey], deadline: float) -> bool:
        """Wait on ``keys`` until rung or ``deadline``; True when rung."""
        waiter = self.register(keys)
        try:
            with trio.move_on_at(deadline):
                await waiter.event.wait()
            return waiter.event.is_set() and not self._closed
        finally:
            self.unregister(waiter)

    def ring(self, key: QueueKey, claimable: int, *, pending: int, edge: bool) -> None:
        """``claimable`` jobs became claimable on ``key``.

        Wakes at most that many waiters. ``edge`` says the queue went from
        nothing claimable to claimable, which is what subscribers hear about.
        """
        queue = self._waiters.get(key)
        while queue and claimable > 0:
            waiter = queue.popleft()
            if not waiter.done:
                waiter.wake()
                claimable -= 1
        if queue is not None and not queue:
            del self._waiters[key]
        if edge:
            for sink in list(self._subs.get(key, {}).values()):
                sink({"event": "doorbell", "queue": key[1], "pending": pending})

    def subscribe(self, owner: object, keys: Iterable[QueueKey], sink: EventSink) -> None:
        """Send ``sink`` a doorbell event on every claimable edge of ``keys``."""
        for key in keys:
            self._subs.setdefault(key, {})[owner] = sink

    def unsubscribe(self, owner: object) -> None:
        """Drop every subscription of ``owner`` (a closing connection)."""
        for key in list(self._subs):
            sinks = self._subs[key]
            sinks.pop(owner, None)
            if not sinks:
                del self._subs[key]

    def close(self) -> None:
        """Draining: wake every waiting claim so it answers empty."""
        self._closed = True
        for queue in self._waiters.values():
            for waiter in queue:
                if not waiter.done:
                    waiter.wake()
        self._waiters.clear()

    def statistics(self) -> RouterStats:
        """A frozen snapshot."""
        return RouterStats(
            waiters=self._live,
            subscriptions=sum(len(s) for s in self._subs.values()),
            closed=self._closed,
        )


def _drop_done(queue: deque[Waiter]) -> None:
    while queue and queue[0].done:
        queue.popleft()
    if len(queue) > 64 and sum(w.done for w in queue) * 2 > len(queue):
        live = [w for w in queue if not w.done]
        queue.clear()
        queue.extend(live)
