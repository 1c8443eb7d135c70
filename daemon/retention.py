"""Retention in the daemon: the leader lease, TTL sweeps and row ceilings.

One tick, on the leader only (:class:`actors.retention.RetentionLeader`):

1. **Lease.** Take or renew the ``retention`` row of ``leader`` until three
   intervals from now. Every later write of the tick renews it again first and
   stops the tick if it was lost.
2. **TTL sweeps**, per queue holding completed or dead rows (from the in-memory
   counts): completed rows whose ``finished_at`` is at least the queue's
   ``completed_ttl_ms`` old (else ``[retention] completed_ttl``), and dead
   letters past ``dead_ttl_ms`` (else ``dead_ttl``). Each write reads a window of
   at most ``retention.batch`` index entries and deletes the expired rows in
   it; the sweep goes window by window to the end of the queue's old rows, so
   TTLs keep up with any completion rate while no write runs long.
3. **Row ceilings**, per namespace with ``max_archived_rows`` /
   ``max_dead_rows``: whether it is over is read from the counts (no query);
   the oldest rows (creation order, i.e. id) over the ceiling are deleted, at
   most ``retention.batch`` per namespace and ceiling per tick, in one write.
   So a namespace far over a new ceiling converges over several ticks.

A namespace whose quota cannot be read is skipped whole (TTLs too), with a
warning when that starts; other namespaces are swept. Only finished rows are
ever deleted: every delete is guarded on ``completed`` or ``dead``.
Counts move in each write's ``tx.after``; metrics count deletions by
namespace and reason; one log line per tick that deleted something.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from actors import lifecycle as lc
from actors.errors import Refused
from actors.ids import first_id
from actors.retention import RetentionLeader
from daemon import failpoints
from daemon.admission import usage
from daemon.store.interface import RETENTION, Tx

if TYPE_CHECKING:
    from actors.counts import QueueCounts
    from actors.namespace import Namespaces
    from daemon.config import Config
    from daemon.metrics import Metrics
    from daemon.store.interface import Committer, Store

log = logging.getLogger("sluicegate.retention")
T = TypeVar("T")
#: The lease lasts this many intervals.
LEASE_TICKS = 3
#: Later than every lease's term (a signed 64-bit integer: PostgreSQL's bigint).
FOREVER = 2**63 - 1
TTL_REASONS = {lc.COMPLETED: "ttl_completed", lc.DEAD: "ttl_dead"}
CEILINGS = ((lc.COMPLETED, "max_archived_rows"), (lc.DEAD, "max_dead_rows"))


def new_holder() -> str:
    """A holder id, random per start: host, pid and 8 random hex digits."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class _LeaseLost(Exception):
    """Another daemon holds the lease: stop this tick's sweep."""


class Retention:
    """The sweep of one tick, run by :class:`~actors.retention.RetentionLeader`."""

    def __init__(
        self,
        *,
        committer: Committer,
        store: Store,
        counts: QueueCounts,
        namespaces: Namespaces,
        metrics: Metrics,
        config: Callable[[], Config],
        holder: str | None = None,
    ) -> None:
        """``committer`` runs the sweep's writes; ``store`` is read outside them (the
        queues table); ``counts`` say which rows there are and move with deletions;
        ``config`` is the live config (a reload applies at the next tick)."""
        self._committer = committer
        self._store = store
        self._counts = counts
        self._namespaces = namespaces
        self._metrics = metrics
        self._config = config
        self.holder = holder or new_holder()
        self.held = False
        #: PostgreSQL: the role's advisory lock (daemon.store.pg_leader). While it
        #: is held the lease row is taken whoever had it: it only says who leads.
        self.leadership: Callable[[], Awaitable[bool]] | None = None
        #: Namespaces skipped because their quota cannot be read, and why (warned once).
        self.skipped: dict[str, str] = {}
        #: What the last tick deleted: (namespace, reason) -> rows.
        self.last: Counter[tuple[str, str]] = Counter()

    def leader(self) -> RetentionLeader:
        """The retention leader actor running this sweep; start it with
        ``nursery.start(x.run)``."""
        return RetentionLeader(self)

    def interval_s(self) -> float:
        return self._config().retention.interval / 1000

    async def tick(self) -> bool:
        if not self._config().daemon.maintenance:
            if self.held:
                await self._write(self._release)
            if self.leadership is not None:  # the leader's measurements still bind
                await self._follow()
            return False
        deleted: Counter[tuple[str, str]] = Counter()
        if self.leadership is not None and not await self.leadership():
            self.held = False
            await self._follow()
            return False
        try:
            self.held = await self._write(self._renew)
            if not self.held:
                return False
            queues = await self._ttl_sweeps(deleted)
            await self._ceilings(deleted)
            # After the deletions, so the figure is what stays (seed 001's storage quota).
            retained = await usage.measure_retained(
                queues, store=self._store, namespaces=self._namespaces,
                batch=self._config().retention.batch,
            )  # fmt: skip
            if self.leadership is not None and retained:  # for the daemons that follow
                await self._write(lambda tx: tx.store.epoch.save_retained(retained, tx.now_ms))
        except _LeaseLost:
            self.held = False
            log.info("retention: the lease was taken over; this daemon stops sweeping")
        except Refused as exc:  # a store error (busy, full disk) or shutting down
            if exc.code != "shutting_down":
                log.error("retention tick failed: %s", exc.message)
        self.last = deleted
        if deleted:
            parts = ", ".join(f"{ns} {reason} {n}" for (ns, reason), n in sorted(deleted.items()))
            log.info("retention deleted %d rows: %s", sum(deleted.values()), parts)
        return self.held

    async def _follow(self) -> None:
        """Another daemon leads: block on the retained bytes it measured."""
        try:
            retained = await self._write(lambda tx: tx.store.epoch.retained())
        except Refused as exc:  # the store away: the decisions stand
            if exc.code != "shutting_down":
                log.error("retention: reading the leader's measurements failed: %s", exc.message)
            return
        usage.apply_retained(retained, self._namespaces)

    # -- the lease -----------------------------------------------------------------

    async def _write(self, fn: Callable[[Tx], T]) -> T:
        return await self._committer.write(fn)

    def _renew(self, tx: Tx) -> bool:
        expires = tx.now_ms + LEASE_TICKS * self._config().retention.interval
        # Holding the advisory lock, the row is ours whoever's term it shows.
        lapsed_before = tx.now_ms if self.leadership is None else FOREVER
        return tx.store.retention.hold_lease(RETENTION, self.holder, lapsed_before, expires)

    def _release(self, tx: Tx) -> None:
        tx.store.retention.release_lease(RETENTION, self.holder)
        tx.after(lambda: setattr(self, "held", False))

    async def _sweep_write(self, fn: Callable[[Tx], T]) -> T:
        """Run one write of the sweep: ``fn`` runs only while the lease is renewed."""

        def write(tx: Tx) -> tuple[bool, T | None]:
            if not self._renew(tx):
                return False, None  # raising here would read as a bug (an internal error)
            return True, fn(tx)

        held, result = await self._write(write)
        if not held:
            raise _LeaseLost
        return result  # type: ignore[return-value]

    def _swept(self, namespace: str) -> bool:
        """Whether ``namespace`` may be swept now (its quota can be read)."""
        actor = self._namespaces.get(namespace)
        if actor.broken is None:
            if self.skipped.pop(namespace, None) is not None:
                log.info("retention resumes namespace %r: its quota can be read", namespace)
            return True
        if self.skipped.get(namespace) != actor.broken:
            log.warning("retention skips namespace %r: its quota cannot be read (%s)",
                        namespace, actor.broken)  # fmt: skip
            self.skipped[namespace] = actor.broken
        return False

    # -- TTL sweeps ----------------------------------------------------------------

    async def _ttl_sweeps(self, deleted: Counter[tuple[str, str]]) -> list[tuple[str, str]]:
        """Every queue's expired rows, in writes of at most ``batch`` index entries read;
        returns every queue it looked at (for the retained-bytes measurement)."""
        defaults = self._config().retention
        # The queues table names every queue, whichever daemon made it, so a leader
        # sweeps rows that other daemons sharing the database finished too.
        ttls = {(ns, q): (c, d) for ns, q, c, d in self._store.queues.all_queues()}
        for key, _counts in self._counts:
            ttls.setdefault(key, (None, None))
        work = [
            (key, state, ttl or default)
            for key, (completed_ttl, dead_ttl) in sorted(ttls.items())
            if self._swept(key[0])
            for state, ttl, default in (
                (lc.COMPLETED, completed_ttl, defaults.completed_ttl),
                (lc.DEAD, dead_ttl, defaults.dead_ttl),
            )
        ]
        position = (0, "")
        while position[0] < len(work):
            position = await self._sweep_write(
                lambda tx, at=position: self._ttl_batch(tx, work, at, deleted)
            )
        return list(ttls)

    def _ttl_batch(
        self,
        tx: Tx,
        work: list[tuple[tuple[str, str], str, int]],
        position: tuple[int, str],
        deleted: Counter[tuple[str, str]],
    ) -> tuple[int, str]:
        """One write of the TTL sweep, from ``position`` (item, last id read) on;
        returns where the next write starts."""
        budget = self._config().retention.batch
        index, after = position
        while index < len(work) and budget > 0:
            key, state, ttl = work[index]
            cutoff = tx.now_ms - ttl
            rows = tx.store.retention.window(state, *key, after, first_id(cutoff + 1), budget)
            expired = [
                i for i, s, finished in rows
                if s == state and finished is not None and finished <= cutoff
            ]  # fmt: skip
            n = tx.store.retention.delete(state, expired)
            if failpoints.ARMED and n:
                failpoints.hit("retention_mid_batch")
            self._removed(tx, key, state, TTL_REASONS[state], n)
            if n:
                reason = (key[0], TTL_REASONS[state])
                tx.after(lambda reason=reason, n=n: deleted.update({reason: n}))
            if len(rows) < budget:  # the window came back short: this item is done
                index, after = index + 1, ""
            else:  # the budget is spent within this item: the next write goes on
                after = rows[-1][0]
            budget -= max(1, len(rows))  # an empty window costs a seek: count it
        return index, after

    # -- row ceilings --------------------------------------------------------------

    async def _ceilings(self, deleted: Counter[tuple[str, str]]) -> None:
        counts = self._counts
        for actor in self._namespaces.known():
            namespace, quota = actor.namespace, actor.quota
            if quota is None and actor.broken is None:
                continue  # no quota: no ceilings
            if not self._swept(namespace) or quota is None:
                continue
            for state, field in CEILINGS:
                cap = getattr(quota, field)
                if cap is not None and counts.total(namespace, state) > cap:
                    deleted[(namespace, field)] += await self._sweep_write(
                        lambda tx, ns=namespace, s=state, f=field: self._trim(tx, ns, s, f)
                    )

    def _trim(self, tx: Tx, namespace: str, state: str, field: str) -> int:
        """Delete the oldest rows of ``namespace`` in ``state`` over its ``field``
        ceiling, at most ``retention.batch``; rows deleted."""
        counts = self._counts
        quota = self._namespaces.get(namespace).quota
        cap = getattr(quota, field, None)
        if cap is None:
            return 0
        over = counts.total(namespace, state) - cap
        if over <= 0:
            return 0
        queues = [q for q in counts.queues_of(namespace) if counts.get((namespace, q), state)]
        victims = tx.store.retention.oldest(
            state, namespace, queues, min(over, self._config().retention.batch)
        )
        per_queue: dict[str, list[str]] = {}
        for job_id, queue in victims:
            per_queue.setdefault(queue, []).append(job_id)
        total = 0
        for queue, ids in per_queue.items():
            n = tx.store.retention.delete(state, ids)
            self._removed(tx, (namespace, queue), state, field, n)
            total += n
        return total

    def _removed(self, tx: Tx, key: tuple[str, str], state: str, reason: str, n: int) -> None:
        """``n`` rows of ``key`` in ``state`` were deleted for ``reason`` (effects at commit)."""
        if not n:
            return
        counts, metrics = self._counts, self._metrics

        def effect() -> None:
            # Never below zero: rows finished by another daemon sharing the
            # database were never in this daemon's counts.
            counts.remove(key, state, min(n, max(0, counts.get(key, state))))
            metrics.retention_deleted(key[0], reason, n)

        tx.after(effect)
