"""Budget math: the token pool of one budget, exact and free of I/O.

Two strategies (seed 003):

- ``while_in_flight {allocation}``: a job's cost is debited at claim and
  credited when it leaves ``running``; available = allocation - in flight.
- ``time_based {allocation, duration_ms, burst?}``: a continuous drip of
  ``allocation`` tokens per ``duration_ms``, the pool capped at ``burst``
  (default: the allocation; below or above it is allowed). A new pool starts
  full.

Tokens of a ``time_based`` pool are kept as integers scaled by
``duration_ms`` (one token = ``duration_ms`` units; the drip adds
``allocation`` units per millisecond), so the drip never drifts and "when do
the tokens suffice" is exact to the millisecond.

A completion may *settle* a ``time_based`` debit to the job's actual cost
(:meth:`TokenPool.settle`): a smaller actual gives the difference back (never
above the cap), a larger one takes the extra even below zero, a debt that
delays every later debit exactly until the drip repays it.

An update never creates tokens (seed 001, "A plan upgrade does not hand out
free tokens"): raising the cap keeps the current count, lowering it clamps the
count down. Unlike seed 003, a restart does not refill a pool: its state
(:meth:`TokenPool.snapshot`) is persisted, so a crash loop hands out no free
burst.

:func:`parse_spec` and :func:`parse_strategy` are the one parser of a budget's
settings, for the wire (``budget_*``, ``create_with``) and the config file
alike. They raise :class:`SpecError` naming the field and the problem, and
each caller words it in its own way (seed 003's texts on the wire,
path-qualified ``budgets.<ns>.<key>.<field>: ...`` in the config file).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import attrs

from actors.limits import GROUP_RULE, MAX_TOKENS, valid_group

WHILE_IN_FLIGHT: Literal["while_in_flight"] = "while_in_flight"
TIME_BASED: Literal["time_based"] = "time_based"
STRATEGIES = (WHILE_IN_FLIGHT, TIME_BASED)
SPEC_FIELDS = frozenset({"allocation", "strategy", "enforce"})
STRATEGY_FIELDS = frozenset({"type", "duration_ms", "burst", "reserve"})
#: The most groups a ``reserve`` names (as a policy's ``min_in_flight``).
MAX_RESERVED_GROUPS = 1_000

#: The problems :class:`SpecError` names.
NOT_OBJECT = "not_object"  # the spec or its strategy is not an object
UNKNOWN_FIELD = "unknown_field"
BAD_COUNT = "bad_count"  # allocation, duration_ms or burst: not an integer in range
UNREADABLE = "unreadable"  # duration_ms the caller's reader refused (``detail`` says why)
BAD_TYPE = "bad_type"  # strategy.type is neither strategy
REQUIRED = "required"  # time_based without duration_ms
TIME_BASED_ONLY = "time_based_only"  # while_in_flight with duration_ms or burst
BAD_FLAG = "bad_flag"  # enforce: not a boolean
#: ``strategy.reserve`` refused (``detail`` is the whole sentence): not a map of
#: groups to tokens, on a time_based budget, or more than the allocation in all.
BAD_RESERVE = "bad_reserve"


class SpecError(ValueError):
    """Budget settings refused: ``field`` (a path such as ``strategy.burst``, or
    ``""`` for the whole value) has ``problem``; the caller words it."""

    def __init__(self, field: str, problem: str, detail: str = "") -> None:
        super().__init__(f"{field or 'budget'}: {problem}" + (f" ({detail})" if detail else ""))
        self.field = field
        self.problem = problem
        self.detail = detail


def _count(value: Any, most: int | None) -> bool:
    return type(value) is int and value >= 1 and (most is None or value <= most)


def parse_strategy(
    value: Any, *, most: int | None = MAX_TOKENS, duration: Callable[[Any], int] | None = None
) -> Strategy:
    """A strategy object (``{type, duration_ms?, burst?}``) to a :class:`Strategy`.

    ``most`` bounds ``duration_ms`` and ``burst`` (None: no bound); ``duration``
    reads ``duration_ms`` first (the config file's ``"1h"``), raising ValueError.
    Fields are named relative to the spec (``strategy.type``).
    """
    if not isinstance(value, dict):
        raise SpecError("strategy", NOT_OBJECT)
    extra = sorted(set(value) - STRATEGY_FIELDS)
    if extra:
        raise SpecError(f"strategy.{extra[0]}", UNKNOWN_FIELD)
    kind = value.get("type")
    if kind not in STRATEGIES:
        raise SpecError("strategy.type", BAD_TYPE)
    length, burst = value.get("duration_ms"), value.get("burst")
    if duration is not None and length is not None:
        try:
            length = duration(length)
        except ValueError as exc:
            raise SpecError("strategy.duration_ms", UNREADABLE, str(exc)) from None
    for part, number in (("duration_ms", length), ("burst", burst)):
        if number is not None and not _count(number, most):
            raise SpecError(f"strategy.{part}", BAD_COUNT)
    if kind == TIME_BASED and length is None:
        raise SpecError("strategy.duration_ms", REQUIRED)
    if kind == WHILE_IN_FLIGHT and (length is not None or burst is not None):
        raise SpecError("strategy.duration_ms" if length is not None else "strategy.burst",
                        TIME_BASED_ONLY)  # fmt: skip
    reserve = _reserve(value.get("reserve"), kind)
    return Strategy(kind, length, burst, reserve)


def _reserve(value: Any, kind: str) -> dict[str, int]:
    """``strategy.reserve``: ``{group: tokens}`` of a ``while_in_flight`` budget."""
    field = "strategy.reserve"
    if value is None:
        return {}
    if kind != WHILE_IN_FLIGHT:
        raise SpecError(field, BAD_RESERVE, f"{field} applies to while_in_flight budgets only")
    if not isinstance(value, dict):
        raise SpecError(field, BAD_RESERVE, f"{field} is an object {{group: tokens}}")
    if len(value) > MAX_RESERVED_GROUPS:
        raise SpecError(field, BAD_RESERVE, f"{field} names at most {MAX_RESERVED_GROUPS} groups")
    out = {}
    for group, tokens in value.items():
        if group != "" and not valid_group(group):
            words = f'{field}: a group is {GROUP_RULE}, or "" (the default group)'
            raise SpecError(field, BAD_RESERVE, words)
        if type(tokens) is not int or not 0 <= tokens <= MAX_TOKENS:
            words = f"{field}.{group} must be an integer from 0 to {MAX_TOKENS}"
            raise SpecError(f"{field}.{group}", BAD_RESERVE, words)
        if tokens:
            out[group] = tokens
    return dict(sorted(out.items()))


def check_reserve(spec: BudgetSpec) -> BudgetSpec:
    """``spec``, unless its reservations add up to more than its allocation."""
    total = sum(spec.strategy.reserve.values())
    if total > spec.allocation:
        raise SpecError(
            "strategy.reserve", BAD_RESERVE,
            f"strategy.reserve reserves {total} tokens in all, more than allocation "
            f"{spec.allocation}",
        )  # fmt: skip
    return spec


def parse_spec(
    value: Any, *, most: int | None = MAX_TOKENS, duration: Callable[[Any], int] | None = None
) -> BudgetSpec:
    """A budget's settings (``{allocation, strategy}``) to a :class:`BudgetSpec`.

    ``most`` bounds the allocation too; see :func:`parse_strategy`.
    """
    if not isinstance(value, dict):
        raise SpecError("", NOT_OBJECT)
    extra = sorted(set(value) - SPEC_FIELDS)
    if extra:
        raise SpecError(extra[0], UNKNOWN_FIELD)
    allocation = value.get("allocation")
    if not _count(allocation, most):
        raise SpecError("allocation", BAD_COUNT)
    strategy = parse_strategy(value.get("strategy"), most=most, duration=duration)
    enforce = value.get("enforce", True)
    if type(enforce) is not bool and enforce is not None:
        raise SpecError("enforce", BAD_FLAG)
    return check_reserve(BudgetSpec(allocation, strategy, enforce is not False))


@attrs.frozen
class Strategy:
    """How a budget's tokens come back."""

    type: Literal["while_in_flight", "time_based"]
    duration_ms: int | None = None
    burst: int | None = None
    #: ``{group: tokens}`` of the allocation reserved for groups, lent while
    #: they have no work (``while_in_flight`` only: :mod:`actors.lending`).
    reserve: dict[str, int] = attrs.field(factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """The strategy object of the wire contract (absent fields omitted)."""
        out: dict[str, Any] = {"type": self.type}
        if self.duration_ms is not None:
            out["duration_ms"] = self.duration_ms
        if self.burst is not None:
            out["burst"] = self.burst
        if self.reserve:
            out["reserve"] = dict(self.reserve)
        return out


@attrs.frozen
class BudgetSpec:
    """A budget's settings: its allocation and strategy (checked by :func:`parse_spec`)."""

    allocation: int
    strategy: Strategy
    #: False: shadow mode (actors.shadow): the budget is debited as if enforcing
    #: and parks nothing.
    enforce: bool = True

    @property
    def cap(self) -> int:
        """The most tokens the pool can hold: ``burst``, else the allocation."""
        if self.strategy.type == TIME_BASED and self.strategy.burst is not None:
            return self.strategy.burst
        return self.allocation

    def max_cost(self) -> int:
        """The largest cost a job bound to this budget may have."""
        return min(self.allocation, self.cap)


@attrs.frozen
class PoolState:
    """What is persisted of a pool: scaled tokens as of an instant, and cost in flight."""

    units: int
    as_of_ms: int
    in_flight: int


class TokenPool:
    """The tokens of one budget under its strategy."""

    def __init__(self, spec: BudgetSpec, now_ms: int, state: PoolState | None = None) -> None:
        self.spec = spec
        if state is None:  # a new budget starts full
            self._units = spec.cap * self._scale
            self._as_of = now_ms
            self.in_flight = 0
        else:
            self._units, self._as_of, self.in_flight = state.units, state.as_of_ms, state.in_flight
            self._units = min(self._units, spec.cap * self._scale)

    @property
    def _scale(self) -> int:
        return self.spec.strategy.duration_ms or 1

    @property
    def time_based(self) -> bool:
        return self.spec.strategy.type == TIME_BASED

    def _units_at(self, now_ms: int) -> int:
        cap = self.spec.cap * self._scale
        if self._units >= cap:
            return cap
        return min(cap, self._units + max(0, now_ms - self._as_of) * self.spec.allocation)

    def available(self, now_ms: int) -> float:
        """Tokens available now (fractional for ``time_based``)."""
        if self.time_based:
            return self._units_at(now_ms) / self._scale
        return float(self.spec.allocation - self.in_flight)

    def can_debit(self, cost: int, now_ms: int) -> bool:
        """True if ``cost`` tokens can be debited now."""
        if self.time_based:
            return self._units_at(now_ms) >= cost * self._scale
        return self.in_flight + cost <= self.spec.allocation

    def debit(self, cost: int, now_ms: int) -> bool:
        """Debit ``cost`` if affordable; False (and nothing changed) if not."""
        if not self.can_debit(cost, now_ms):
            return False
        if self.time_based:
            self._units = self._units_at(now_ms) - cost * self._scale
            self._as_of = max(self._as_of, now_ms)
        self.in_flight += cost
        return True

    def credit(self, cost: int) -> None:
        """A job left ``running``: its cost is no longer in flight (which gives
        ``while_in_flight`` tokens back; ``time_based`` tokens only drip)."""
        self.in_flight = max(0, self.in_flight - cost)

    def settle(self, reserved: int, actual: Fraction, now_ms: int) -> int:
        """A ``time_based`` debit of ``reserved`` tokens becomes ``actual``: the
        difference in scaled units (positive: refunded, negative: taken).

        A refund never lifts the pool above its cap; an extra may take it below
        zero (a debt: :meth:`can_debit` is false until the drip repays it). The
        actual is rounded up to a unit (1/``duration_ms`` of a token), so a
        settle never undercharges. No effect on a ``while_in_flight`` pool.
        """
        if not self.time_based:
            return 0
        scale, cap = self._scale, self.spec.cap * self._scale
        units = self._units_at(now_ms)
        change = reserved * scale - math.ceil(actual * scale)
        after = min(cap, units + change) if change > 0 else units + change
        self._units, self._as_of = after, max(self._as_of, now_ms)
        return after - units

    def eligible_at(self, cost: int, now_ms: int) -> int | None:
        """The first instant ``cost`` can be debited, if nothing else happens.

        Exact for ``time_based``; None for ``while_in_flight`` when it cannot be
        debited now (it depends on jobs finishing) and for a cost above the cap.
        """
        if cost > self.spec.max_cost():
            return None
        if self.can_debit(cost, now_ms):
            return now_ms
        if not self.time_based:
            return None
        deficit = cost * self._scale - self._units_at(now_ms)
        return now_ms + -(-deficit // self.spec.allocation)  # ceil division

    def next_token_at(self, now_ms: int) -> int | None:
        """When the drip next completes a whole token (None: full, or ``while_in_flight``)."""
        if not self.time_based:
            return None
        units, scale = self._units_at(now_ms), self._scale
        if units >= self.spec.cap * scale:
            return None
        deficit = (units // scale + 1) * scale - units
        return now_ms + -(-deficit // self.spec.allocation)

    def update(self, spec: BudgetSpec, now_ms: int, in_flight: int | None = None) -> None:
        """New settings without new tokens: keep the count, clamp it to the new cap.

        ``in_flight`` (the cost held by running jobs) is needed when switching
        to ``while_in_flight``.
        """
        was_time_based, old_scale = self.time_based, self._scale
        units = self._units_at(now_ms) if was_time_based else 0
        before = self.available(now_ms)
        self.spec = spec
        if in_flight is not None:
            self.in_flight = in_flight
        if spec.strategy.type == TIME_BASED:
            scale = self._scale
            # Exact in the same unit; rounded down across units, so a change of
            # unit never adds a token.
            # A debt (settled excess) is kept, in the new unit, rounded to more debt.
            same_unit = was_time_based and scale == old_scale
            if same_unit:
                kept = units
            elif was_time_based:
                kept = math.floor(Fraction(units, old_scale) * scale)
            else:
                kept = int(max(0.0, before) * scale)
            self._units = min(kept, spec.cap * scale)
            self._as_of = max(self._as_of, now_ms) if was_time_based else now_ms

    def raw(self) -> tuple[int, int, int]:
        """The pool's exact internal state, for :meth:`restore` (undo)."""
        return (self._units, self._as_of, self.in_flight)

    def restore(self, raw: tuple[int, int, int]) -> None:
        """Put back a state taken with :meth:`raw`."""
        self._units, self._as_of, self.in_flight = raw

    def snapshot(self, now_ms: int) -> PoolState:
        """The state to persist."""
        if self.time_based:
            return PoolState(self._units_at(now_ms), now_ms, self.in_flight)
        return PoolState(0, now_ms, self.in_flight)

    def describe(self, now_ms: int) -> dict[str, Any]:
        """``{available, in_flight, next_refill_at}`` for a budget object's ``state``."""
        return {
            "available": self.available(now_ms),
            "in_flight": self.in_flight,
            "next_refill_at": self.next_token_at(now_ms),
        }
