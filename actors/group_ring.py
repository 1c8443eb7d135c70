"""One group-aware queue's live groups: jobs pending and in flight per group,
whose turn it is, and which groups a claim may serve now.

Turns (``fairness = "round_robin"``) are smooth weighted round robin among
the groups with pending jobs (:class:`~actors.turns.Turns`): a group that
gets work joins at once, beside groups with a backlog, and earns no credit
for having been idle. A claim costs ``O(weights + log groups)``, whatever the
jobs behind them.

Limits per group (``max_in_flight_per_group``, ``group_limits``) and
reservations (``min_in_flight``) decide which groups may be served:

- a group at its cap is held (``group_in_flight_cap``);
- a group that *owes* itself slots (it has pending jobs and fewer in flight
  than its reservation) may always take a free slot;
- any other group may take one only while the free slots exceed what the
  owing groups are owed (``reserved_for_other_groups``): a reservation nobody
  uses is lent to anyone, and once its group has work again, the next slots
  that free up go to it first. Nothing running is revoked.

Counts change inside a write and are undone with it (every change returns
its inverse). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping

from actors import lending
from actors.group_policy import GroupPolicy
from actors.turns import Turns

Undo = Callable[[], None]
GROUP_CAP = "group_in_flight_cap"
RESERVED = lending.RESERVED


class GroupRing:
    """The groups of one queue whose policy counts groups."""

    def __init__(self, policy: GroupPolicy) -> None:
        self.policy = policy
        #: Jobs pending per group (parked ones included), and in flight.
        self.pending: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        #: Groups another daemon may have given work (several daemons share the
        #: store): claimable until a claim finds none, whatever the count says.
        self.unknown: set[str] = set()
        #: Whose turn it is among the groups with pending jobs.
        self.turns = Turns()

    # -- counts -----------------------------------------------------------------

    def load(self, pending: Mapping[str, int], in_flight: Mapping[str, int]) -> None:
        """Start from counts read from the store (start-up, a new policy)."""
        self.pending = {g: n for g, n in pending.items() if n > 0}
        self.in_flight = {g: n for g, n in in_flight.items() if n > 0}
        self.unknown = set()
        self.turns = Turns()
        for group in sorted(self.pending):
            self.turns.join(group, self.policy.weight(group))

    def moved(self, group: str, pending: int, in_flight: int) -> Undo:
        """``group`` gained ``pending`` pending jobs and ``in_flight`` running ones
        (either may be negative); returns the inverse."""
        if pending:
            had = self.pending.get(group, 0)
            now = had + pending
            if now > 0:
                self.pending[group] = now
            else:
                self.pending.pop(group, None)
            if had <= 0 < now:
                self.turns.join(group, self.policy.weight(group))
            elif now <= 0 < had and group not in self.unknown:
                self.turns.leave(group)
        if in_flight:
            count = self.in_flight.get(group, 0) + in_flight
            if count > 0:
                self.in_flight[group] = count
            else:
                self.in_flight.pop(group, None)

        def undo() -> None:
            self.moved(group, -pending, -in_flight)

        return undo

    def assume(self, groups: Collection[str]) -> None:
        """Groups the store shows with claimable jobs, counts unknown (another
        daemon enqueued them): served in turn until a claim finds them empty."""
        for group in groups:
            self.unknown.add(group)
            self.turns.join(group, self.policy.weight(group))

    def found_empty(self, group: str) -> None:
        """A claim found no claimable job of ``group``: not assumed any more."""
        if group in self.unknown:
            self.unknown.discard(group)
            if self.pending.get(group, 0) <= 0:
                self.turns.leave(group)

    def left(self, group: str) -> int:
        """Jobs of ``group`` a claim may expect (unknown: as many as it asks)."""
        return self.pending.get(group, 0) + (1 << 30 if group in self.unknown else 0)

    def with_work(self) -> Iterator[str]:
        """The groups with pending jobs (counted, then assumed), lazily: a
        status check stops at the first group that may be served."""
        yield from self.pending
        pending = self.pending
        yield from (g for g in self.unknown if g not in pending)

    # -- who may be served --------------------------------------------------------

    def owed(self, group: str, extra: int = 0, pending: int | None = None) -> int:
        """Slots ``group``'s reservation still claims now (0 without pending work)."""
        reserved = self.policy.min_in_flight.get(group, 0)
        if not reserved:
            return 0
        cap = self.policy.cap(group)
        if cap is not None:
            reserved = min(reserved, cap)
        has_work = bool(self.left(group) if pending is None else pending)
        return lending.owed(reserved, self.in_flight.get(group, 0) + extra, has_work)

    def owed_total(self, extra: Mapping[str, int] | None = None,
                   taken: Mapping[str, int] | None = None) -> int:  # fmt: skip
        """Slots every reservation still claims (``extra`` in flight and ``taken``
        pending per group: a claim's own picks so far)."""
        total = 0
        for group in self.policy.min_in_flight:
            left = self.left(group) - (taken or {}).get(group, 0)
            total += self.owed(group, (extra or {}).get(group, 0), left)
        return total

    def held(self, group: str, free: int | None, extra: int = 0,
             owed_total: int | None = None) -> str | None:  # fmt: skip
        """Why ``group`` may not take a slot now (None: it may). ``free`` is the
        queue's free slots (None: no ``max_in_flight``), ``extra`` the group's
        claims of this claim so far."""
        policy = self.policy
        cap = policy.cap(group)
        if cap is not None and self.in_flight.get(group, 0) + extra >= cap:
            return GROUP_CAP
        if free is None or not policy.min_in_flight:
            return None
        own = self.owed(group, extra)
        if own > 0:
            return None
        owed = self.owed_total() if owed_total is None else owed_total
        return RESERVED if lending.held_back(own, free, 1, owed) else None

    def blocked(self, free: int | None) -> str | None:
        """Why no group with pending jobs may take a slot (None: one may, or none
        has pending jobs). A reservation outranks a cap in the answer."""
        if not self.pending and not self.unknown:
            return None
        owed = self.owed_total() if self.policy.min_in_flight else 0
        reasons = set()
        for group in self.with_work():
            reason = self.held(group, free, 0, owed)
            if reason is None:
                return None
            reasons.add(reason)
        return RESERVED if RESERVED in reasons else GROUP_CAP

    def held_groups(self, free: int | None) -> set[str]:
        """The groups with pending jobs that may not take a slot now."""
        owed = self.owed_total() if self.policy.min_in_flight else 0
        return {g for g in self.with_work() if self.held(g, free, 0, owed) is not None}

    # -- turns ------------------------------------------------------------------

    def plan(self, n: int, free: int | None, spent: Collection[str] = (),
             extra: dict[str, int] | None = None) -> list[str]:  # fmt: skip
        """The groups of the next ``n`` claims, in turn (fewer when the groups
        that may be served run out). ``spent``: groups the claim found empty;
        ``extra``: the claim's picks so far by group (not yet in flight),
        updated with these.

        A turn the claim then finds no row for is not given back.
        """
        picks: list[str] = []
        extra = {} if extra is None else extra
        reserving = bool(self.policy.min_in_flight) and free is not None
        while len(picks) < n:
            owed = self.owed_total(extra, extra) if reserving else None

            def passed_over(group: str, free: int | None = free, owed: int | None = owed) -> bool:
                mine = extra.get(group, 0)
                if group in spent or mine >= self.left(group):
                    return True
                return self.held(group, free, mine, owed) is not None

            group = self.turns.next(passed_over)
            if group is None:
                break
            picks.append(group)
            extra[group] = extra.get(group, 0) + 1
            if free is not None:
                free -= 1
        return picks

    def groups(self) -> list[str]:
        """Every group with jobs pending or in flight, by name."""
        return sorted(self.pending.keys() | self.in_flight.keys() | self.unknown)
