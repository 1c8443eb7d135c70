"""Foresight's flow: how a backlog drains under a set of limits, free of I/O.

``what_if`` (PROTOCOL.md, "Foresight") answers, besides what a change does now,
how many jobs of today's backlog would be admitted in each of the next 24
hours, with no new arrivals. :class:`Limits` gathers what holds the backlog
back, taken from the limit objects themselves, and :func:`flow` runs them
forward, event by event:

- claim windows (:class:`~actors.claim_windows.ClaimWindow`, in their zones:
  :func:`actors.window.bounds`), each with its current window's usage; a new
  window starts empty (no other daemon claims meanwhile);
- in-flight slots (a policy's ``max_in_flight``, a quota's ``max_running``):
  :class:`Slots`, each admitted job holding one for ``duration_ms`` (the
  observed median), the jobs running now releasing theirs one ``duration_ms``
  from now;
- a budget's :class:`~actors.budget.TokenPool` (a copy: the drip, the burst,
  the cost in flight) with every job costing ``cost``, and its pause.

Jobs are admitted as soon as every limit allows, as a worker waiting with
``claim_next`` would take them. The hours are ``[now + k h, now + (k+1) h)``.
Cost does not grow with the backlog: between events, a drip with nothing
else holding jobs back is counted in closed form, and at most
:data:`MAX_STEPS` events are run (then :attr:`Flow.cut_at` says where it
stopped).
"""

from __future__ import annotations

import heapq

import attrs

from actors.budget import TokenPool
from actors.claim_windows import ClaimWindow
from actors.window import HOUR_MS, bounds

HOURS = 24
#: Events simulated at most (a fast drip under an in-flight cap needs one per job):
#: about 0.2 s of the event loop.
MAX_STEPS = 10_000


@attrs.define
class Meter:
    """One claim window's usage: ``used`` claims in ``[start, end)``."""

    limit: ClaimWindow
    start: int
    end: int
    used: int

    def roll(self, now_ms: int) -> None:
        """Move to the window containing ``now_ms``; a new window starts empty."""
        if not self.start <= now_ms < self.end:
            self.start, self.end = bounds(self.limit.window, now_ms)
            self.used = 0

    def room(self) -> int:
        return max(0, self.limit.max_claims - self.used)


@attrs.define
class Slots:
    """An in-flight cap: at most ``cap`` jobs at once, ``in_use`` now."""

    cap: int
    in_use: int

    def free(self) -> int:
        return max(0, self.cap - self.in_use)


@attrs.define
class Limits:
    """What holds a backlog back at an instant (each part optional).

    ``slots``: in-flight caps (a policy's over its queue, a quota's over its
    namespace); ``held``: jobs running now in the scope, releasing their slots
    (and ``pool``'s cost in flight) one ``duration_ms`` from now;
    ``duration_ms`` None: no completion is assumed.
    ``broken``: a limit that cannot be read holds everything (fail closed).
    """

    backlog: int
    meters: list[Meter] = attrs.field(factory=list)
    slots: list[Slots] = attrs.field(factory=list)
    held: int = 0
    pool: TokenPool | None = None
    cost: int = 1
    paused_until: int | None = None
    duration_ms: int | None = None
    broken: bool = False

    def copy(self) -> Limits:
        """A copy to run forward (the pool and meters copied too)."""
        pool = None if self.pool is None else copy_pool(self.pool)
        return attrs.evolve(
            self, meters=[attrs.evolve(m) for m in self.meters],
            slots=[attrs.evolve(s) for s in self.slots], pool=pool,
        )  # fmt: skip


def copy_pool(pool: TokenPool) -> TokenPool:
    """A copy of ``pool`` to change freely (the same settings and exact state)."""
    out = TokenPool(pool.spec, 0)
    out.restore(pool.raw())
    return out


def admissible(limits: Limits, now_ms: int) -> int:
    """How many of the backlog every limit admits at ``now_ms`` (meters rolled)."""
    if limits.broken:
        return 0
    n = limits.backlog
    for meter in limits.meters:
        meter.roll(now_ms)
        n = min(n, meter.room())
    for slots in limits.slots:
        n = min(n, slots.free())
    pool = limits.pool
    if pool is not None and n > 0:
        if limits.paused_until is not None and now_ms < limits.paused_until:
            return 0
        n = min(n, _affordable(pool, limits.cost, now_ms))
    return max(0, n)


def _affordable(pool: TokenPool, cost: int, now_ms: int) -> int:
    if cost > pool.spec.max_cost():
        return 0
    if pool.time_based:
        return int(pool.available(now_ms) // cost)
    return max(0, (pool.spec.allocation - pool.in_flight) // cost)


def _blockers(limits: Limits, now_ms: int, next_completion: int | None) -> list[int | None]:
    """For each limit admitting nothing at ``now_ms``: when it may admit again
    (None: not by itself, e.g. a full in-flight cap with nothing completing)."""
    # A window of 0 claims pauses the queue: no boundary reopens it.
    out: list[int | None] = [
        m.end if m.limit.max_claims else None for m in limits.meters if m.room() == 0
    ]
    for slots in limits.slots:
        if slots.free() == 0:
            out.append(next_completion if slots.cap > 0 else None)
    pool = limits.pool
    if pool is not None:
        if limits.paused_until is not None and now_ms < limits.paused_until:
            out.append(limits.paused_until)
        if _affordable(pool, limits.cost, now_ms) == 0:
            if pool.time_based:
                out.append(pool.eligible_at(limits.cost, now_ms))
            else:
                out.append(next_completion if pool.in_flight else None)
    return out


def next_eligible_at(limits: Limits, now_ms: int) -> int | None:
    """When the backlog's head may next be admitted: ``now_ms`` if now, None if
    there is no backlog or no limit says when."""
    if limits.backlog <= 0 or limits.broken:
        return None
    if admissible(limits, now_ms) > 0:
        return now_ms
    done = now_ms + limits.duration_ms if limits.duration_ms is not None and limits.held else None
    waits = _blockers(limits, now_ms, done)
    if not waits or any(w is None for w in waits):
        return None
    return max(w for w in waits if w is not None)


@attrs.frozen
class Flow:
    """Jobs admitted per hour, and where the run stopped early (None: it did not)."""

    admitted: list[int]
    #: The instant the run stopped at after :data:`MAX_STEPS` events, if it did.
    cut_at: int | None = None
    #: True when the backlog waits for a limit that nothing releases in the run.
    stalled: bool = False


def flow(start: Limits, now_ms: int, hours: int = HOURS) -> Flow:
    """Run ``start`` (copied) forward from ``now_ms``: jobs admitted in each hour."""
    limits = start.copy()
    end = now_ms + hours * HOUR_MS
    out = [0] * hours
    pool, cost, duration = limits.pool, limits.cost, limits.duration_ms
    # Completions matter only where a slot or a cost in flight comes back.
    tracked = duration is not None and (limits.slots or (pool is not None and not pool.time_based))
    done: list[tuple[int, int, int]] = []  # (instant, jobs, their cost in flight)
    if tracked and (limits.held or (pool is not None and pool.in_flight)):
        assert duration is not None
        done.append((now_ms + duration, limits.held, pool.in_flight if pool is not None else 0))
    t, steps = now_ms, 0
    while limits.backlog > 0 and t < end and not limits.broken:
        if steps >= MAX_STEPS:
            return Flow(out, cut_at=t)
        steps += 1
        while done and done[0][0] <= t:
            _at, jobs, held_cost = heapq.heappop(done)
            for slots in limits.slots:
                slots.in_use = max(0, slots.in_use - jobs)
            if pool is not None:
                pool.credit(held_cost)
        n = admissible(limits, t)
        if n:
            _admit(limits, out, n, t, now_ms)
            if tracked:
                assert duration is not None
                heapq.heappush(done, (t + duration, n, n * cost))
        if limits.backlog <= 0:
            break
        waits = _blockers(limits, t, done[0][0] if done else None)
        if not tracked and _only_the_drip(limits, waits, t):
            t = _drip(limits, out, t, now_ms, end)  # only the drip holds: in closed form
            continue
        if not waits or any(w is None for w in waits):
            return Flow(out, stalled=True)
        t = max(w for w in waits if w is not None)
    return Flow(out)


def _only_the_drip(limits: Limits, waits: list[int | None], t: int) -> bool:
    """Whether a ``time_based`` pool that will pay (in time) alone holds the backlog."""
    pool = limits.pool
    if pool is None or not pool.time_based or len(waits) != 1 or waits[0] is None:
        return False
    return waits[0] == pool.eligible_at(limits.cost, t)


def _admit(limits: Limits, out: list[int], n: int, t: int, now_ms: int, paid: bool = False) -> None:
    out[(t - now_ms) // HOUR_MS] += n
    limits.backlog -= n
    for meter in limits.meters:
        meter.used += n
    for slots in limits.slots:
        slots.in_use += n
    if limits.pool is not None and not paid:
        limits.pool.debit(n * limits.cost, t)


def _drip(limits: Limits, out: list[int], t: int, now_ms: int, end: int) -> int:
    """Admit what the drip pays for before the next event (the hour's end, a
    window's end): the pool stays below one job's cost between admissions, so
    never at its cap, and what it paid for by then does not depend on when."""
    pool = limits.pool
    assert pool is not None
    until = min([end, now_ms + ((t - now_ms) // HOUR_MS + 1) * HOUR_MS]
                + [m.end for m in limits.meters])  # fmt: skip
    last = until - 1
    units, as_of, in_flight = pool.raw()
    scale, price = pool.spec.strategy.duration_ms or 1, limits.cost
    # Uncapped: below one job's cost after the last admission, the pool never
    # reaches its cap before the next one.
    units += (last - as_of) * pool.spec.allocation
    n = min(limits.backlog, units // (price * scale))
    for meter in limits.meters:
        n = min(n, meter.room())
    if n > 0:
        pool.restore((units - n * price * scale, last, in_flight + n * price))
        _admit(limits, out, n, last, now_ms, paid=True)
    return until
