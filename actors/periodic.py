"""Periodic schedules and the actor that fires them.

A schedule is a set of *slots*: wall instants (ms since the Unix epoch) at
which an entry fires. Two kinds:

- :class:`Every` ``every = "5m"``: slot *k* is at ``k * every`` since the epoch,
  so every daemon, and every restart, agrees on the slots (``every = "1d"``
  fires at 00:00 UTC).
- :class:`Cron` a 5-field cron expression read in an IANA zone, evaluated with
  ``cronsim`` (Debian cron's rules) on a zone loaded from the pinned ``tzdata``
  package, never the host's. Across a DST change a wall-clock slot fires once:
  a time the spring-forward gap skips fires at the first instant after the gap
  (``30 2 * * *`` fires at 03:00), and a time the fall-back repeats fires at its
  first occurrence only. Expressions whose hour field is ``*`` (or whose
  minute field is) follow elapsed time instead: ``*/30 * * * *`` fires at each
  real half hour, the repeated hour included.

:class:`PeriodicActor` owns, per entry, the last slot handled and the next one,
and one task that sleeps to the earliest next slot (no polling). When a slot
comes, or several passed while the daemon was down, it fires once, for the most
recent slot that has passed (no backfill), then plans the next slot after now.
Whether a fire enqueued anything or was refused, the slot is handled: it is
never retried in a loop.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, tzinfo
from typing import Protocol

import attrs
import pendulum
import trio
from cronsim import CronSim, CronSimError

from actors.clock import Clock

_ZONE_RE = re.compile(r"^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$")
_ZONES: dict[str, tzinfo] = {}
#: Forward steps a catch-up may take to find the latest passed slot (a guard:
#: the reverse search normally lands on it at once).
_MAX_STEPS = 10_000


class ScheduleError(ValueError):
    """A schedule that cannot be used; ``field`` names the part (every, cron, tz)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def zone(name: str) -> tzinfo:
    """The IANA zone ``name`` from the pinned ``tzdata`` package (never the host's)."""
    found = _ZONES.get(name)
    if found is not None:
        return found
    if not _ZONE_RE.match(name) or ".." in name:
        raise ScheduleError("tz", f"unknown time zone {name!r}")
    path = importlib.resources.files("tzdata").joinpath("zoneinfo", *name.split("/"))
    try:
        with path.open("rb") as f:
            found = pendulum.Timezone.from_file(f, key=name)
    except (OSError, ValueError):
        raise ScheduleError("tz", f"unknown time zone {name!r}") from None
    _ZONES[name] = found
    return found


class Schedule(Protocol):
    """The slots of an entry."""

    def next_after(self, at_ms: int) -> int | None:
        """The first slot strictly after ``at_ms`` (None: never again)."""

    def latest_at_or_before(self, at_ms: int) -> int | None:
        """The last slot at or before ``at_ms`` (None: none)."""

    def describe(self) -> str:
        """``every 5m`` or ``cron */5 * * * * UTC``."""


@attrs.frozen
class Every:
    """Slots at every multiple of ``every_ms`` since the Unix epoch."""

    every_ms: int
    text: str

    def next_after(self, at_ms: int) -> int | None:
        return (at_ms // self.every_ms + 1) * self.every_ms

    def latest_at_or_before(self, at_ms: int) -> int | None:
        return at_ms // self.every_ms * self.every_ms

    def describe(self) -> str:
        return f"every {self.text}"


@attrs.frozen
class Cron:
    """Slots of a 5-field cron expression in zone ``tz``."""

    expr: str
    tz: str
    zone: tzinfo = attrs.field(eq=False, repr=False)

    @classmethod
    def parse(cls, expr: str, tz: str = "UTC") -> Cron:
        """Check ``expr`` (exactly five fields) and ``tz``; :class:`ScheduleError` if bad."""
        fields = expr.split()
        if len(fields) != 5:
            raise ScheduleError(
                "cron", f"expected 5 fields (minute hour day month weekday), got {len(fields)}"
            )
        where = zone(tz)
        try:
            CronSim(" ".join(fields), datetime(2000, 1, 1, tzinfo=where))
        except CronSimError as exc:
            raise ScheduleError("cron", f"not a cron expression: {exc}") from None
        return cls(" ".join(fields), tz, where)

    def _local(self, at_ms: int) -> datetime:
        return datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(self.zone)

    def next_after(self, at_ms: int) -> int | None:
        # cronsim counts whole seconds: from the second of at_ms, strictly after it.
        try:
            for slot in CronSim(self.expr, self._local(at_ms)):
                ms = _ms(slot)
                # A wall-clock slot in a repeated hour maps to its first
                # occurrence, which may be earlier than at_ms: step past it.
                if ms > at_ms:
                    return ms
        except StopIteration:  # pragma: no cover - cronsim ends its iterator itself
            pass
        return None

    def latest_at_or_before(self, at_ms: int) -> int | None:
        # Reverse from one second later, so a slot at at_ms itself is found.
        try:
            found = _ms(next(CronSim(self.expr, self._local(at_ms + 1000), reverse=True)))
        except StopIteration:
            return None
        if found > at_ms:  # a DST fix-up landed after at_ms: go back from before it
            earlier = self._before(found)
            if earlier is None:
                return None
            found = earlier
        # Guard: no later slot may also be at or before at_ms.
        for _ in range(_MAX_STEPS):
            later = self.next_after(found)
            if later is None or later > at_ms:
                break
            found = later
        return found

    def _before(self, at_ms: int) -> int | None:
        try:
            found = _ms(next(CronSim(self.expr, self._local(at_ms), reverse=True)))
        except StopIteration:
            return None
        return found if found < at_ms else None

    def describe(self) -> str:
        return f"cron {self.expr} {self.tz}"


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def parse_schedule(
    every_ms: int | None, every_text: str | None, cron: str | None, tz: str | None
) -> Schedule:
    """The schedule of an entry: exactly one of ``every`` or ``cron`` (``tz`` only with cron)."""
    if (every_ms is None) == (cron is None):
        raise ScheduleError("every", "give exactly one of every or cron")
    if every_ms is not None:
        if tz is not None:
            raise ScheduleError("tz", "tz goes with cron, not with every (every is zone-free)")
        if every_ms < 1000:
            raise ScheduleError("every", f"must be at least 1s, got {every_ms} ms")
        return Every(every_ms, every_text or f"{every_ms}ms")
    assert cron is not None
    return Cron.parse(cron, tz or "UTC")


# -- the actor ---------------------------------------------------------------


@attrs.define
class _Plan:
    schedule: Schedule
    #: The last slot handled (fired or refused), or the instant the entry was
    #: first seen: slots after it are due.
    handled: int
    next_at: int | None


#: Fires entry ``key`` for slot ``slot_ms``; handles its own refusals.
Fire = Callable[[str, int], Awaitable[None]]


class PeriodicActor:
    """Sleeps to the earliest next slot of its entries, then fires it."""

    def __init__(self, clock: Clock, fire: Fire) -> None:
        self._clock = clock
        self._fire = fire
        self._plans: dict[str, _Plan] = {}
        self._wake = trio.Event()

    def set_entries(self, entries: dict[str, tuple[Schedule, int]]) -> None:
        """Replace the entries: key -> (schedule, last slot handled or first-seen instant)."""
        self._plans = {
            key: _Plan(schedule, handled, schedule.next_after(handled))
            for key, (schedule, handled) in entries.items()
        }
        self._wake.set()

    def next_fire_at(self, key: str) -> int | None:
        """When entry ``key`` fires next (None: unknown or never)."""
        plan = self._plans.get(key)
        return None if plan is None else plan.next_at

    def _earliest(self) -> tuple[str, _Plan, int] | None:
        best: tuple[str, _Plan, int] | None = None
        for key, plan in self._plans.items():
            if plan.next_at is not None and (best is None or plan.next_at < best[2]):
                best = (key, plan, plan.next_at)
        return best

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor's task: runs until cancelled."""
        task_status.started()
        while True:
            self._wake = trio.Event()
            earliest = self._earliest()
            if earliest is None:
                await self._wake.wait()
                continue
            key, plan, due = earliest
            now = self._clock.now_ms()
            if due > now:
                with trio.move_on_at(self._clock.deadline_for(due)):
                    await self._wake.wait()
                continue
            # Due: fire once, for the most recent slot that has passed.
            slot = plan.schedule.latest_at_or_before(now)
            slot = due if slot is None or slot < due else slot
            await self._fire(key, slot)
            if self._plans.get(key) is plan:  # not replaced while firing
                plan.handled = max(plan.handled, slot)
                # A slot that passed while firing is due at once (and fires once).
                plan.next_at = plan.schedule.next_after(plan.handled)
            await trio.lowlevel.checkpoint()
