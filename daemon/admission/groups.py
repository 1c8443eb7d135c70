"""Groups in the daemon (docs/fairness.md): each group-aware queue's ring, kept
by the transition step, and the claim's read of such a queue.

A queue whose policy counts groups (round robin, per-group caps, reservations)
has a :class:`~actors.group_ring.GroupRing`, built from one grouped count of
the store when the policy is set or the daemon starts, then moved by every
job transition inside its transaction (undone if it rolls back). Other queues
have none and pay one truth test of an empty dict per move.

The claim reads a round-robin queue group by group: the ring names the groups
of the next claims in turn and one LIMITed probe per group reads their first
jobs from ``ix_jobs_group_ready``, so a group's backlog costs nothing. A FIFO
queue with group limits reads in claim order, skipping the groups the ring
holds back.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from actors import lifecycle as lc
from actors.group_ring import GroupRing
from actors.policy import PolicyState
from daemon.store.interface import JobRow, Store, Tx

if TYPE_CHECKING:
    from daemon.metrics import Metrics

QueueKey = tuple[str, str]
Read = Callable[[int, "dict[str, int] | None"], list[JobRow]]
#: Rounds of one queue's read: a round whose groups turn out empty (parked, or
#: locked by another daemon) plans again without them.
READ_ROUNDS = 8


def group_of(row: JobRow) -> str:
    """A job's group on the ring (``""``: the default group)."""
    return row.grp or ""


class Groups:
    """Every group ring of the daemon."""

    def __init__(self, *, metrics: Metrics) -> None:
        self._metrics = metrics
        self.rings: dict[QueueKey, GroupRing] = {}

    # -- rings follow policies --------------------------------------------------------

    def attach(self, store: Store, state: PolicyState, old: PolicyState | None = None) -> None:
        """Give a policy queue its ring (or none when its policy counts no groups).

        A ring that exists keeps its counts; a new one counts the store once.
        """
        key = state.key
        policy = state.policy
        if policy is None or not policy.groups.counts_groups:
            state.ring = None
            self.rings.pop(key, None)
            return
        ring = GroupRing(policy.groups)
        before = old.ring if old is not None else None
        if before is not None:
            ring.load(before.pending, before.in_flight)
        else:
            store.jobs.adopt_default_group(*key)
            _count(store, key, ring)
        state.ring = ring
        self.rings[key] = ring

    def discover(self, store: Store) -> None:
        """Another daemon wrote (daemon.admission.cluster): every group with
        claimable jobs in the store takes turns here too, its count unknown
        until a claim finds it empty (a walk of ix_jobs_group_ready: one step
        per group, never the backlog)."""
        for key, ring in self.rings.items():
            ring.assume(store.jobs.ready_group_names(*key))

    def recount(self, store: Store, running_only: bool = False) -> None:
        """Count every ring again from the store (several daemons share it:
        daemon.admission.cluster). ``running_only``: the jobs in flight per group
        (what caps and reservations decide on, read back at every reload);
        otherwise pending ones too (every few seconds)."""
        for key, ring in self.rings.items():
            if running_only:
                ring.in_flight = {g: n for g, s, n in store.jobs.group_counts(*key, running_only)
                                  if s == lc.RUNNING and n > 0}  # fmt: skip
            else:
                _count(store, key, ring)

    def restored(self, key: QueueKey, state: PolicyState | None) -> None:
        """A policy write rolled back: the queue's ring is its old state's again."""
        if state is None or state.ring is None:
            self.rings.pop(key, None)
        else:
            self.rings[key] = state.ring

    # -- the transition step ---------------------------------------------------------

    def moved(self, tx: Tx, source: str | None, rows: Sequence[JobRow]) -> None:
        """Rows of group-aware queues moved from ``source`` (None: new) to their state."""
        rings = self.rings
        claimed: Counter[tuple[str, str]] = Counter()
        for row in rows:
            ring = rings.get((row.namespace, row.queue))
            if ring is None:
                continue
            state, group = row.state, group_of(row)
            pending = (state == lc.PENDING) - (source == lc.PENDING)
            running = (state == lc.RUNNING) - (source == lc.RUNNING)
            if pending or running:
                tx.undo(ring.moved(group, pending, running))
            if running > 0:
                claimed[(row.queue, group)] += 1
        if claimed:
            tx.after(lambda: self._claimed(claimed))

    def _claimed(self, claimed: Counter[tuple[str, str]]) -> None:
        for (queue, group), n in claimed.items():
            self._metrics.group_claimed(queue, group, n)

    # -- the claim's read -------------------------------------------------------------

    def reader(self, tx: Tx, namespace: str, queues: list[str],
               free: dict[str, int | None]) -> Read:  # fmt: skip
        """The claim's read of ``queues`` (some group-aware): ``free`` is each
        group-aware queue's free in-flight slots (None: no ``max_in_flight``).
        Plain queues are read as ever; the lists are merged in claim order,
        each group-aware queue's list keeping its turns."""
        jobs = tx.store.jobs
        rings = self.rings
        plain = [q for q in queues if (namespace, q) not in rings]
        fair = [q for q in queues if (namespace, q) in rings]
        claimed: Counter[str] = Counter()

        def read(want: int, caps: dict[str, int] | None) -> list[JobRow]:
            lists = [jobs.ready(namespace, plain, want, caps)] if plain else []
            for queue in fair:
                n = want if caps is None else min(want, caps.get(queue, want))
                slots = free.get(queue)
                if slots is not None:
                    slots -= claimed[queue]
                if n > 0:
                    lists.append(self._read_queue(tx, rings[(namespace, queue)], namespace,
                                                  queue, n, slots))  # fmt: skip
            rows = lists[0] if len(lists) == 1 else merged(lists, want)
            claimed.update(r.queue for r in rows)
            return rows

        return read

    def _read_queue(self, tx: Tx, ring: GroupRing, namespace: str, queue: str, n: int,
                    free: int | None) -> list[JobRow]:  # fmt: skip
        jobs = tx.store.jobs
        if not ring.policy.round_robin:
            return _fifo(jobs.ready_except, jobs.ready, ring, namespace, queue, n, free)
        out: list[JobRow] = []
        spent: set[str] = set()
        extra: dict[str, int] = {}
        for _ in range(READ_ROUNDS):
            picks = ring.plan(n - len(out), free, spent, extra)
            if not picks:
                break
            rows = jobs.ready_groups(namespace, queue, sorted(Counter(picks).items()))
            by_group: dict[str, list[JobRow]] = {}
            for row in reversed(rows):  # each list popped from its end: claim order
                by_group.setdefault(group_of(row), []).append(row)
            before = len(out)
            for group in picks:
                left = by_group.get(group)
                if left:
                    out.append(left.pop())
                else:
                    spent.add(group)
                    extra[group] -= 1  # a turn with no job takes no slot
                    ring.found_empty(group)
            if free is not None:
                free = max(0, free - (len(out) - before))
            if len(out) >= n or not spent:
                break
        return out


def _count(store: Store, key: QueueKey, ring: GroupRing) -> None:
    pending: Counter[str] = Counter()
    running: Counter[str] = Counter()
    for group, status, n in store.jobs.group_counts(*key):
        (pending if status == lc.PENDING else running)[group] += n
    ring.load(pending, running)


def _fifo(ready_except: Callable[..., list[JobRow]], ready: Callable[..., list[JobRow]],
          ring: GroupRing, namespace: str, queue: str, n: int,
          free: int | None) -> list[JobRow]:  # fmt: skip
    """A FIFO queue with group limits: claim order, without the held groups (a
    group that reaches its cap within this claim stops there too)."""
    held = ring.held_groups(free)
    rows = ready_except(namespace, queue, n, sorted(held)) if held else ready(namespace, [queue], n)
    out = []
    extra: Counter[str] = Counter()
    reserving = bool(ring.policy.min_in_flight) and free is not None
    for row in rows:
        group = group_of(row)
        owed = ring.owed_total(extra, extra) if reserving else None
        if ring.held(group, free, extra[group], owed) is None:
            out.append(row)
            extra[group] += 1
            if free is not None:
                free -= 1
    return out


def merged(lists: list[list[JobRow]], want: int) -> list[JobRow]:
    """The first ``want`` rows of several lists, by each list's head in claim order
    (priority, ready_at, id); each list keeps its own order."""
    heads = [((rows[0].priority, rows[0].ready_at, rows[0].id), i, 0)
             for i, rows in enumerate(lists) if rows]  # fmt: skip
    heapq.heapify(heads)
    out: list[JobRow] = []
    while heads and len(out) < want:
        _key, i, at = heapq.heappop(heads)
        rows = lists[i]
        out.append(rows[at])
        if at + 1 < len(rows):
            row = rows[at + 1]
            heapq.heappush(heads, ((row.priority, row.ready_at, row.id), i, at + 1))
    return out
