"""A budget's reservations for groups (``strategy.reserve``): its jobs per group.

While a ``while_in_flight`` budget reserves tokens for groups, it keeps, per
group, the pending jobs bound to it and their cost in flight, and notes the
parked jobs of the reserving groups so that tokens owed to a group go to its
own jobs first without a scan. The rule itself is :mod:`actors.lending`'s,
the one a policy's ``min_in_flight`` follows. Each change returns its undo,
as :class:`~actors.budgets.Budget`'s do (this is its mixin).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from actors import lending

if TYPE_CHECKING:
    from actors.budget import BudgetSpec, TokenPool

Undo = Callable[[], None]


class GroupCounts:
    """The group side of a :class:`~actors.budgets.Budget` (fields declared there)."""

    pool: TokenPool
    reserved: dict[str, int]
    group_cost: dict[str, int]
    group_pending: dict[str, int]
    parked_of: dict[str, dict[str, tuple[str, int]]]
    group_of: dict[str, str]
    held_head: bool
    spec: BudgetSpec  # Budget's property

    @property
    def reservations(self) -> dict[str, int]:
        """Tokens reserved per group (empty: none)."""
        return self.spec.strategy.reserve

    def counted(self, group: str, pending: int, cost: int) -> Undo:
        """A job of ``group`` changed: ``pending`` jobs and ``cost`` in flight more
        (either may be negative). Kept only while the budget reserves tokens."""
        if not self.reservations:
            return _nothing
        _add(self.group_pending, group, pending)
        _add(self.group_cost, group, cost)
        self.held_head = False

        def undo() -> None:
            _add(self.group_pending, group, -pending)
            _add(self.group_cost, group, -cost)

        return undo

    def owed(self, group: str, taken: int = 0) -> int:
        """Tokens ``group``'s reservation still claims (``taken``: promised it already)."""
        return lending.owed(self.reservations.get(group, 0), self.group_cost.get(group, 0) + taken,
                            self.group_pending.get(group, 0) > 0)  # fmt: skip

    def owed_total(self, taken: Mapping[str, int] | None = None) -> int:
        """Tokens every reservation still claims."""
        taken = taken or {}
        return sum(self.owed(g, taken.get(g, 0)) for g in self.reservations)

    def held_for_others(self, group: str, cost: int, promised: int = 0,
                        taken: Mapping[str, int] | None = None) -> bool:  # fmt: skip
        """Whether ``cost`` for ``group`` would take tokens owed to other groups
        (``promised``: tokens promised to released jobs, ``taken`` of them per group)."""
        if not self.reservations:
            return False
        taken = taken or {}
        free = self.spec.allocation - self.pool.in_flight - promised
        return lending.held_back(self.owed(group, taken.get(group, 0)), free, cost,
                                 self.owed_total(taken))  # fmt: skip

    def parked_reserved(self, group: str, job_id: str, queue: str, cost: int) -> Undo:
        """A job of a reserving group was parked here (noted, so it can come back
        first); a group without a reservation is not noted."""
        if group not in self.reservations:
            return _nothing
        self.parked_of.setdefault(group, {})[job_id] = (queue, cost)
        self.group_of[job_id] = group
        return lambda: self.left_parked(job_id)

    def left_parked(self, job_id: str, promised: bool = False) -> Undo:
        """A noted parked job is no longer parked (``promised``: it was released,
        and its promise counts as its group's until it is claimed)."""
        group = self.group_of.get(job_id) if promised else self.group_of.pop(job_id, None)
        jobs = self.parked_of.get(group, {}) if group is not None else {}
        noted = jobs.pop(job_id, None)
        if noted is None:
            return _nothing
        if not jobs:
            del self.parked_of[group]  # type: ignore[arg-type]

        def undo() -> None:
            self.parked_of.setdefault(group, {})[job_id] = noted  # type: ignore[index]
            self.group_of[job_id] = group  # type: ignore[assignment]

        return undo

    def promised_per_group(self) -> dict[str, int]:
        """Tokens promised to released jobs, per reserving group."""
        out: dict[str, int] = {}
        group_of = self.group_of
        for job_id, cost in self.reserved.items():
            group = group_of.get(job_id)
            if group is not None:
                out[group] = out.get(group, 0) + cost
        return out


def _nothing() -> None:
    pass


def _add(counts: dict[str, int], group: str, n: int) -> None:
    if n:
        left = counts.get(group, 0) + n
        if left > 0:
            counts[group] = left
        else:
            counts.pop(group, None)
