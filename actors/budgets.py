"""A budget of a namespace, and the registry of every budget.

:class:`Budget` joins a :class:`~actors.budget.TokenPool` to what dispatch
needs without a scan (parked jobs, promised tokens, bound jobs, holders) and
changes them only in its own methods, each returning its undo (as
:meth:`actors.namespace.NamespaceActor.admit` does), which the caller runs if
its transaction rolls back. :class:`Budgets` holds them by (namespace, key),
beside :class:`actors.namespace.Namespaces`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Any

import attrs

from actors.budget import BudgetSpec, TokenPool
from actors.budget_groups import GroupCounts

Undo = Callable[[], None]
BudgetKey = tuple[str, str]


@attrs.define(eq=False)
class Budget(GroupCounts):
    """A named budget of a namespace: its settings, its pool and its jobs.

    Besides the pool it keeps what dispatch needs without a scan: how many
    jobs are parked on it (and the cost of the oldest), the costs of jobs
    released to the ready index but not yet claimed (so tokens are not
    promised twice), and the costs of its unfinished bound jobs (seed 003's
    409 on delete and 422 on a lowered allocation).
    """

    namespace: str
    key: str
    pool: TokenPool
    created_at: int
    updated_at: int
    #: "api", or "config" when provisioned by the config file (then read-only).
    source: str = "api"
    #: Jobs parked on this budget.
    parked: int = 0
    #: The cost, for this budget, of its oldest parked job (None: not known).
    head_cost: int | None = None
    #: Released (unparked) jobs not yet claimed: job id -> cost.
    reserved: dict[str, int] = attrs.field(factory=dict)
    #: Unfinished bound jobs as a multiset: cost -> number of jobs.
    bound: dict[int, int] = attrs.field(factory=dict)
    #: Running jobs holding this budget's tokens.
    holders: set[str] = attrs.field(factory=set)
    #: A pause (``budget_pause``): no debit before this wall instant (ms), whatever
    #: the tokens; None, or an instant past, when not paused.
    paused_until: int | None = None
    #: Why it is paused (the worker's words), or None.
    pause_reason: str | None = None
    #: A ``reserve`` (:mod:`actors.lending`), per group: cost in flight, and jobs
    #: pending (ready or parked), kept only while the budget reserves tokens.
    group_cost: dict[str, int] = attrs.field(factory=dict)
    group_pending: dict[str, int] = attrs.field(factory=dict)
    #: The parked jobs of each reserving group, oldest first: job id -> (queue,
    #: cost), so the tokens owed to a group go to its own jobs without a scan.
    parked_of: dict[str, dict[str, tuple[str, int]]] = attrs.field(factory=dict)
    #: job id -> group, of the jobs in :attr:`parked_of` and of released jobs of
    #: reserving groups not yet claimed (their promises count as the group's).
    group_of: dict[str, str] = attrs.field(factory=dict)
    #: The oldest parked job is held back by a reservation, not by tokens: no
    #: release until a count changes (else the waker would spin on it).
    held_head: bool = False

    @property
    def spec(self) -> BudgetSpec:
        """The budget's current settings."""
        return self.pool.spec

    # -- bookkeeping: each change returns its undo ----------------------------------

    def bind(self, cost: int, n: int = 1) -> Undo:
        """``n`` unfinished jobs of ``cost`` now draw on this budget (negative ``n``: no longer)."""
        self._bind(cost, n)
        return lambda: self._bind(cost, -n)

    def _bind(self, cost: int, n: int) -> None:
        left = self.bound.get(cost, 0) + n
        if left > 0:
            self.bound[cost] = left
        else:
            self.bound.pop(cost, None)

    def debit(self, job_id: str, cost: int, now_ms: int) -> Undo:
        """Job ``job_id`` starts running and holds ``cost`` tokens (the caller has
        checked :meth:`TokenPool.can_debit`); what was promised to it is taken."""
        undo = self._starts(job_id)
        self.pool.debit(cost, now_ms)
        return undo

    def hold(self, job_id: str, cost: int) -> Undo:
        """Job ``job_id`` starts running on a shadowed budget that cannot pay for it:
        its ``cost`` is in flight (a level: what runs), no token is taken (a
        denial never debits, actors.shadow)."""
        undo = self._starts(job_id)
        self.pool.in_flight += cost
        return undo

    def _starts(self, job_id: str) -> Undo:
        """Job ``job_id`` becomes a holder and takes its promise; the undo puts the
        pool back as it is before the caller changes it."""
        raw, promised = self.pool.raw(), self.reserved.pop(job_id, None)
        group = self.group_of.pop(job_id, None) if self.group_of else None
        self.holders.add(job_id)

        def undo() -> None:
            self.pool.restore(raw)
            self.holders.discard(job_id)
            if promised is not None:
                self.reserved[job_id] = promised
            if group is not None:
                self.group_of[job_id] = group

        return undo

    def credit(self, job_id: str, cost: int) -> Undo:
        """Job ``job_id`` left ``running``: its ``cost`` is no longer in flight."""
        raw, held = self.pool.raw(), job_id in self.holders
        self.pool.credit(cost)
        self.holders.discard(job_id)
        self.held_head = False

        def undo() -> None:
            self.pool.restore(raw)
            if held:
                self.holders.add(job_id)

        return undo

    def park(self, cost: int | None, n: int = 1, *, newest: bool = False) -> Undo:
        """``n`` jobs of ``cost`` were parked on this budget (released, if negative).

        ``newest``: the parked job is younger than every other parked on it
        (a new job), so the head stays; a job parked by a claim may be older.
        """
        head = self.head_cost
        self.parked += n
        if n > 0 and self.parked == n:
            self.head_cost = cost
        elif n > 0 and not newest:
            self.head_cost = None

        def undo() -> None:
            self.parked -= n
            self.head_cost = head

        return undo

    def head_is(self, cost: int | None) -> None:
        """The oldest parked job's cost was read (None: no longer known)."""
        self.head_cost = cost

    def reserve(self, released: list[tuple[str, int]]) -> Undo:
        """Released jobs (id, cost) are promised their tokens until claimed."""
        for job_id, cost in released:
            self.reserved[job_id] = cost

        def undo() -> None:
            for job_id, _cost in released:
                self.reserved.pop(job_id, None)

        return undo

    def unreserve(self, job_id: str) -> Undo | None:
        """A released job went back to parked: its promise is dropped (None: it had none)."""
        promised = self.reserved.pop(job_id, None)
        if promised is None:
            return None
        if self.group_of:
            self.left_parked(job_id)
            self.group_of.pop(job_id, None)
        return lambda: self.reserved.__setitem__(job_id, promised)

    def settle(self, job_id: str, reserved: int, actual: Fraction, now_ms: int) -> Undo:
        """Job ``job_id`` completed having cost ``actual``, not the ``reserved``
        debited at its claim (:meth:`TokenPool.settle`)."""
        raw = self.pool.raw()
        self.pool.settle(reserved, actual, now_ms)
        return lambda: self.pool.restore(raw)

    # -- pausing ---------------------------------------------------------------------

    def paused(self, now_ms: int) -> bool:
        """Whether a pause holds every debit back at ``now_ms``."""
        until = self.paused_until
        return until is not None and until > now_ms

    def pause(self, until_ms: int, reason: str | None, now_ms: int) -> Undo | None:
        """Pause until ``until_ms`` for ``reason``, unless a pause already lasts as
        long: the later instant wins, so a pause never shortens another (None:
        nothing changed)."""
        current = self.paused_until if self.paused(now_ms) else None
        if until_ms <= now_ms or (current is not None and until_ms <= current):
            return None
        return self._set_pause(until_ms, reason)

    def resume(self) -> Undo:
        """End any pause now."""
        return self._set_pause(None, None)

    def _set_pause(self, until_ms: int | None, reason: str | None) -> Undo:
        old = (self.paused_until, self.pause_reason)
        self.paused_until, self.pause_reason = until_ms, reason

        def undo() -> None:
            self.paused_until, self.pause_reason = old

        return undo

    def update(self, spec: BudgetSpec, now_ms: int, source: str) -> Undo:
        """New settings (never new tokens: :meth:`TokenPool.update`) from ``source``."""
        old = (self.pool.spec, self.pool.raw(), self.updated_at, self.source)
        self.pool.update(spec, now_ms)
        self.updated_at, self.source = now_ms, source

        def undo() -> None:
            self.pool.spec, raw, self.updated_at, self.source = old
            self.pool.restore(raw)

        return undo

    # -- start-up ------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every job (before they are recovered from the store)."""
        self.parked, self.head_cost = 0, None
        self.bound.clear()
        self.reserved.clear()
        self.holders.clear()
        self.pool.in_flight = 0
        self.group_cost.clear()
        self.group_pending.clear()
        self.parked_of.clear()
        self.group_of.clear()
        self.held_head = False

    def recover_running(self, job_id: str, cost: int) -> None:
        """A running job found at start-up holds ``cost`` of this budget."""
        self.pool.in_flight += cost
        self.holders.add(job_id)

    # -- reading -------------------------------------------------------------------

    @property
    def reserved_cost(self) -> int:
        """Tokens promised to released jobs not yet claimed."""
        return sum(self.reserved.values())

    def next_release_at(self, now_ms: int) -> int | None:
        """When the oldest parked job can be released: its cost plus what is
        already promised must be affordable. None when nothing is parked, or
        when only a job finishing (or a claim, or an update) can change it."""
        if self.parked <= 0 or self.held_head:
            return None
        if not self.spec.enforce:
            return now_ms  # a shadowed budget parks nothing: let them all go
        return self.eligible_at((self.head_cost or 1) + self.reserved_cost, now_ms)

    def eligible_at(self, cost: int, now_ms: int) -> int | None:
        """The first instant ``cost`` can be debited, the pause included: the
        later of its end and the pool's instant (:meth:`TokenPool.eligible_at`;
        the drip goes on during a pause, so the pool's instant, taken now, stands)."""
        if not self.paused(now_ms):
            return self.pool.eligible_at(cost, now_ms)
        until: int = self.paused_until  # type: ignore[assignment]
        at = self.pool.eligible_at(cost, until)
        return None if at is None else max(at, until)

    def to_wire(self, now_ms: int) -> dict[str, Any]:
        """The budget object of the wire contract (seed 003's shape plus ``state``;
        ``enforce`` only when false, as a strategy's optional fields)."""
        out = {
            "key": self.key,
            "allocation": self.spec.allocation,
            "strategy": self.spec.strategy.to_dict(),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "state": {
                **self.pool.describe(now_ms),
                "parked": self.parked,
                **self.pause_state(now_ms),
            },
        }
        if not self.spec.enforce:
            out["enforce"] = False
        return out

    def pause_state(self, now_ms: int) -> dict[str, Any]:
        """``{paused_until, pause_reason}`` of the ``state`` (both null unless paused now)."""
        if not self.paused(now_ms):
            return {"paused_until": None, "pause_reason": None}
        return {"paused_until": self.paused_until, "pause_reason": self.pause_reason}


class Budgets(Mapping[BudgetKey, Budget]):
    """Every budget of the daemon by (namespace, key); read as a mapping, changed
    through :meth:`add` and :meth:`remove`, which return their undo."""

    def __init__(self, budgets: Iterable[Budget] = ()) -> None:
        self._budgets: dict[BudgetKey, Budget] = {}
        #: Changes whenever a budget is added or removed (undos included): what a
        #: resolution of keys to budgets kept aside is checked against.
        self.version = 0
        self.load(budgets)

    def load(self, budgets: Iterable[Budget]) -> None:
        """Replace every budget (start-up)."""
        self._budgets = {(b.namespace, b.key): b for b in budgets}
        self.version += 1

    def __getitem__(self, key: BudgetKey) -> Budget:
        return self._budgets[key]

    def get(self, key: BudgetKey, default: Any = None) -> Any:
        """The budget of ``key``, or ``default`` (the dict's own lookup: the
        Mapping mixin's would raise and catch a KeyError per miss)."""
        return self._budgets.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._budgets

    def __iter__(self) -> Iterator[BudgetKey]:
        return iter(self._budgets)

    def __len__(self) -> int:
        return len(self._budgets)

    def add(self, budget: Budget) -> Undo:
        """A new budget."""
        key = (budget.namespace, budget.key)
        self._budgets[key] = budget
        self.version += 1

        def undo() -> None:
            self._budgets.pop(key, None)
            self.version += 1

        return undo

    def remove(self, namespace: str, key: str) -> Undo:
        """A deleted budget."""
        budget = self._budgets.pop((namespace, key))
        self.version += 1

        def undo() -> None:
            self._budgets[(namespace, key)] = budget
            self.version += 1

        return undo

    def of(self, namespace: str) -> list[Budget]:
        """The budgets of ``namespace``, by key."""
        return [self._budgets[k] for k in sorted(k for k in self._budgets if k[0] == namespace)]
