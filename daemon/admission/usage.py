"""Usage in the daemon (seed 001): metering enqueues, the roll-up tick, retained bytes.

- **Metering.** Every live job inserted (by any producer path, periodic fires
  included; shed rows are not) is counted per namespace and minute in memory
  during its write, and the group commit writes the sums in the same
  transaction (:class:`Meter`): exact through a crash, one upsert per
  namespace per commit.
- **Roll-up tick** (:class:`Rollup`, every ``daemon.rollup_interval``, at
  start so a restart re-blocks, and at the turn of each UTC month so the block
  lifts on time): rolls minutes into days, prunes old minutes
  (``daemon.usage_keep_days``) and days (:data:`KEEP_DAYS`), counts each
  namespace's jobs this UTC month, and announces the monthly levels reached
  (once per namespace and month, rising only: log, audit, metric). On
  PostgreSQL the roll-up is a role (``leadership``: an advisory lock, one
  daemon at a time); every other daemon's tick reads the month's totals for
  its own door and writes nothing.
- **Retained bytes** (:func:`measure_retained`), by the retention leader each
  tick, for namespaces with ``max_retained_bytes`` only: the bytes of the
  payload, result and error texts of all their rows, any state. Daemons
  sharing PostgreSQL read the leader's figures back (:func:`apply_retained`)
  at their own retention tick, so every daemon blocks on them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from actors.errors import Refused
from actors.ticker import Ticker
from actors.usage import MonthlyUse, crossed, month_of
from daemon.store.interface import MINUTE_MS, Store, Tx

if TYPE_CHECKING:
    from actors.clock import Clock
    from actors.namespace import Namespaces
    from daemon.config import Config
    from daemon.metrics import Metrics
    from daemon.store.interface import Committer

log = logging.getLogger("sluicegate.limits")
#: Daily usage rows are kept this long (13 months and a bit).
KEEP_DAYS = 400
DAY_MS = 86_400_000


class Meter:
    """Jobs enqueued per (namespace, minute) by the open transaction's writes."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str, int], int] = {}

    def note(self, tx: Tx, per_namespace: dict[str, int]) -> None:
        """A write of ``tx`` inserted these live jobs (taken back if it rolls back)."""
        minute = tx.now_ms // MINUTE_MS
        sums = self._sums
        for namespace, n in per_namespace.items():
            key = (namespace, minute)
            sums[key] = sums.get(key, 0) + n
            tx.undo(lambda key=key, n=n: sums.__setitem__(key, sums[key] - n))

    def flush(self, store: Store) -> None:
        """One upsert per (namespace, minute), in key order: share-mode
        transactions of several daemons upsert side by side, and rows locked
        in one order cannot deadlock."""
        if self._sums:
            store.usage.meter(
                [(ns, minute, n) for (ns, minute), n in sorted(self._sums.items()) if n]
            )

    def committed(self) -> None:
        self._sums.clear()


class Rollup:
    """The roll-up tick's work; run it with :meth:`ticker`."""

    def __init__(
        self,
        *,
        clock: Clock,
        committer: Committer,
        namespaces: Namespaces,
        metrics: Metrics,
        config: Callable[[], Config],
    ) -> None:
        """``config``: the live config (a reload applies at the next tick)."""
        #: PostgreSQL: the roll-up role's advisory lock (daemon.store.pg_leader);
        #: a daemon that does not hold it only reads the month's totals.
        self.leadership: Callable[[], Awaitable[bool]] | None = None
        self._clock = clock
        self._committer = committer
        self._namespaces = namespaces
        self._metrics = metrics
        self._config = config

    def ticker(self) -> Ticker:
        """The actor that runs this work; start it with ``nursery.start(x.run)``."""
        return Ticker(self._clock, self)

    def next_tick_ms(self, started_ms: int) -> int:
        _month, _start, month_end = month_of(started_ms)
        return min(started_ms + self._config().daemon.rollup_interval, month_end)

    async def tick(self) -> None:
        leads = self.leadership is None or await self.leadership()
        try:
            await self._committer.write(self._roll if leads else self._follow)
        except Refused as exc:  # a store error, or shutting down: the decisions stand
            if exc.code != "shutting_down":
                log.error("usage roll-up failed: %s", exc.message)

    def _roll(self, tx: Tx) -> None:
        namespaces, usage, now = self._namespaces, tx.store.usage, tx.now_ms
        keep_minutes = self._config().daemon.usage_keep_days * 1440
        usage.roll_up(now // MINUTE_MS - keep_minutes, now // DAY_MS - KEEP_DAYS)
        month, start, end = month_of(now)
        totals = usage.month_totals(start, end)
        announced: list[tuple[str, int, int, int]] = []
        for actor in namespaces.known():
            quota = actor.quota.monthly_jobs_quota if actor.quota is not None else None
            if quota is None:
                continue
            used = totals.get(actor.namespace, 0)
            before = usage.announced_level(actor.namespace, month)
            levels = crossed(used, quota, before)
            if not levels:
                continue
            usage.announce_level(actor.namespace, month, levels[-1])
            tx.store.audit.record(
                at=now, actor="daemon", namespace=actor.namespace, target_kind="namespace",
                target=actor.namespace, action="monthly_level", before={"level": before},
                after={"level": levels[-1], "used": used, "monthly_jobs_quota": quota,
                       "month": month},
            )  # fmt: skip
            announced += [(actor.namespace, level, used, quota) for level in levels]

        def effect() -> None:
            self._set_monthly(totals, month, end)
            for namespace, level, used, quota in announced:
                log.log(
                    logging.WARNING if level >= 100 else logging.INFO,
                    "limits namespace=%s limit=monthly_jobs_quota level=%d used=%d max=%d "
                    "month=%s", namespace, level, used, quota, month,
                )  # fmt: skip
                self._metrics.monthly_level(namespace, level)

        tx.after(effect)

    def _follow(self, tx: Tx) -> None:
        """Another daemon rolls up: read this month's totals for the door."""
        month, start, end = month_of(tx.now_ms)
        totals = tx.store.usage.month_totals(start, end)
        tx.after(lambda: self._set_monthly(totals, month, end))

    def _set_monthly(self, totals: dict[str, int], month: str, end: int) -> None:
        namespaces = self._namespaces
        for namespace in {*totals, *(a.namespace for a in namespaces.known())}:
            namespaces.get(namespace).monthly = MonthlyUse(month, totals.get(namespace, 0), end)


async def measure_retained(
    queues: list[tuple[str, str]], *, store: Store, namespaces: Namespaces, batch: int
) -> dict[str, int]:
    """Measure the retained bytes of each namespace with ``max_retained_bytes`` over
    ``queues`` (every queue in the store), update its storage block, and return
    the figures (namespace -> bytes).

    Reads go window by window (``batch`` rows: ``retention.batch``), letting the
    loop run between them. Namespaces without the limit are not read; their block
    clears.
    """
    per_namespace: dict[str, list[str]] = {}
    for namespace, queue in queues:
        per_namespace.setdefault(namespace, []).append(queue)
    totals: dict[str, int] = {}
    for actor in namespaces.known():
        if actor.quota is None or actor.quota.max_retained_bytes is None:
            continue
        total = 0
        for queue in per_namespace.get(actor.namespace, []):
            after = ""
            while True:
                last, n, size = store.usage.retained_window(actor.namespace, queue, after, batch)
                total += size
                if n < batch or last is None:
                    break
                after = last
                await trio.lowlevel.checkpoint()  # other requests run between windows
        totals[actor.namespace] = total
    apply_retained(totals, namespaces)
    return totals


def apply_retained(totals: dict[str, int], namespaces: Namespaces) -> None:
    """Set each namespace's storage block from measured ``totals`` (namespace ->
    bytes; one missing: no measurement, the decision stands), logging a change."""
    for actor in namespaces.known():
        quota = actor.quota
        cap = quota.max_retained_bytes if quota is not None else None
        if quota is None or cap is None:
            actor.storage.measure(None, None, None)
            continue
        total = totals.get(actor.namespace)
        if actor.storage.measure(total, cap, quota.retained_release_band):
            held = actor.storage.held
            log.log(
                logging.WARNING if held else logging.INFO,
                "limits namespace=%s limit=max_retained_bytes %s retained_bytes=%s max=%d",
                actor.namespace, "blocks" if held else "releases", total, cap,
            )  # fmt: skip
