"""Namespace quotas in the daemon: loading documents, and the checks that use them.

The documents live in the settings store; each namespace's
:class:`~actors.namespace.NamespaceActor` holds the decoded one. The settings
watcher reloads them all every two seconds (and at SIGHUP), so a change made
by another process sharing the database reaches this one within about two
seconds; a change made here applies at its commit. A document that cannot be
decoded fails its namespace closed, no other.

The config file's ``[quotas.<ns>]`` tables are written to the store at start
and at every reload (audited, actor ``config``) and are read-only through the
API. The store remembers which namespaces' documents came from the file (the
reserved key :data:`PROVISIONED`), so a document whose table left the file is
removed at the next reload or start, even one that did not decode, and
``quota_get`` says ``source: "config"`` for exactly those namespaces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from actors import lifecycle as lc
from actors.clock import Clock
from actors.counts import QueueCounts
from actors.errors import Refused
from actors.namespace import NamespaceActor, Namespaces
from actors.quota import Quota, parse_quota
from actors.shadow import ALLOWED, BLOCKED, QUOTA_RUNNING, WOULD_BLOCK, over
from daemon.admission.door import log_decision
from daemon.admission.doorbell import Doorbell
from daemon.store.interface import SettingsStore, Store, Tx, namespace_of, quota_key

if TYPE_CHECKING:
    from daemon.metrics import Metrics

log = logging.getLogger("sluicegate.quotas")


def decode(text: str) -> Quota:
    """A stored document to a :class:`Quota`; ``invalid_argument`` if it does not decode."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise Refused("invalid_argument", f"not JSON: {exc}", field="quota") from None
    return parse_quota(doc)


def apply(actor: NamespaceActor, text: str | None, now_ms: int) -> None:
    """Give ``actor`` the document ``text`` (None: no quota), failing closed if bad."""
    if text is None:
        actor.set_quota(None, now_ms)
        return
    try:
        quota = decode(text)
    except Refused as exc:
        if actor.broken != exc.message:
            log.error("quota of namespace %r cannot be decoded, failing closed: %s",
                      actor.namespace, exc.message)  # fmt: skip
        actor.set_broken(exc.message)
        return
    actor.set_quota(quota, now_ms)


def stored(settings: SettingsStore, namespace: str) -> tuple[Any, str | None]:
    """A namespace's stored document (decoded JSON, or None) and its decode error."""
    text = settings.get(quota_key(namespace))
    if text is None:
        return None, None
    try:
        return decode(text).to_dict(), None
    except Refused as exc:
        return None, exc.message


#: The settings key listing the namespaces whose documents the config file wrote
#: (inside the reserved ``quota:`` prefix; not a namespace's key).
PROVISIONED = "quota:provisioned"


def provisioned(settings: SettingsStore) -> set[str]:
    """The namespaces whose stored documents came from the config file."""
    text = settings.get(PROVISIONED)
    return set(orjson.loads(text)) if text else set()


# -- the checks --------------------------------------------------------------------


class Quotas:
    """The namespaces' quotas: their documents, and the checks of enqueue and claim."""

    def __init__(
        self, *, namespaces: Namespaces, counts: QueueCounts, clock: Clock, store: Store,
        metrics: Metrics, config: Callable[[], Any], doorbell: Doorbell,
        lease_hint: Callable[[], int | None],
    ) -> None:  # fmt: skip
        self._namespaces = namespaces
        self._counts = counts
        self._clock = clock
        self._store = store
        self._metrics = metrics
        #: The running config (``quota_tables``); replaced at each reload.
        self._config = config
        self._doorbell = doorbell
        #: The earliest lease expiry (``running_full``'s hint).
        self._lease_hint = lease_hint
        #: Several daemons: waiting jobs per namespace beyond this daemon's counts,
        #: as of the last read-back, and whether rate pools are written.
        self.elsewhere: dict[str, int] = {}
        self.save_rates = False

    def reload(self) -> None:
        """Read every stored quota document into the namespace actors."""
        now = self._clock.now_ms()
        seen: set[str] = set()
        for key, text in self._store.settings.quotas():
            namespace = namespace_of(key)
            if namespace is None:
                continue
            seen.add(namespace)
            apply(self._namespaces.get(namespace), text, now)
        for actor in self._namespaces.known():
            if actor.namespace not in seen and (actor.quota is not None or actor.broken):
                actor.set_quota(None, now)
                log.info("quota of namespace %r cleared", actor.namespace)

    def write(self, tx: Tx, actor: str, namespace: str, quota: Quota | None,
              raw: Any = None) -> None:  # fmt: skip
        """Store (or clear, with None) a namespace's document, audited; applied at commit.

        ``raw`` stores a config table that does not decode as it is, so the
        namespace fails closed exactly as a bad stored document does.
        """
        key = quota_key(namespace)
        before, _error = stored(tx.store.settings, namespace)
        if quota is None and raw is None:
            tx.store.settings.delete(key)
            text = None
            after = None
        else:
            after = quota.to_dict() if quota is not None else raw
            text = orjson.dumps(after).decode()
            tx.store.settings.put(key, text, tx.now_ms)
        tx.store.audit.record(
            at=tx.now_ms, actor=actor, namespace=namespace, target_kind="namespace",
            target=namespace, action="clear" if text is None else "set", before=before, after=after,
        )  # fmt: skip
        ns = self._namespaces.get(namespace)
        tx.after(lambda: apply(ns, text, self._clock.now_ms()))
        tx.after(lambda: self._doorbell.wake_namespace(namespace))

    def provision(self) -> Any:
        """The write that makes the config file's ``[quotas.<ns>]`` tables true in the
        store: each table stored (as it is when it does not decode), and the document of
        a table that left the file removed."""
        tables = self._config().quota_tables

        def write_all(tx: Tx) -> None:
            before = provisioned(tx.store.settings)
            for namespace in sorted(before - tables.keys()):
                if tx.store.settings.get(quota_key(namespace)) is not None:
                    self.write(tx, "config", namespace, None)
            for namespace, (quota, raw) in tables.items():
                text = tx.store.settings.get(quota_key(namespace))
                wanted = orjson.dumps(quota.to_dict() if quota is not None else raw).decode()
                if text != wanted:
                    self.write(tx, "config", namespace, quota, raw)
            if before != tables.keys():
                if tables:
                    tx.store.settings.put(PROVISIONED, orjson.dumps(sorted(tables)).decode(),
                                          tx.now_ms)  # fmt: skip
                else:
                    tx.store.settings.delete(PROVISIONED)

        return write_all

    def admit(self, tx: Tx, namespace: str, n: int, queue: str) -> tuple[int, str | None]:
        """Enqueue admission of ``n`` jobs of one call: how many are written live (the
        first ones) and why the rest are shed. ``reject`` refuses the whole call.

        Counts this transaction's earlier admissions too, so two calls of one group
        commit cannot both take the last room: within one daemon ``max_pending``
        never overshoots (seed 000's "count, then insert" overshoot is across
        daemons sharing a database).
        """
        actor = self._namespaces.get(namespace)
        quota = actor.quota
        if actor.broken is None and (
            quota is None or (quota.max_pending is None and quota.enqueue_rate is None)
        ):
            return n, None  # nothing to count against (door limits are the door's)
        try:
            admitted, undo = actor.admit(n, self.pending_now(namespace), queue, tx.now_ms)
        except Refused as exc:
            self._metrics.quota_refused(namespace, exc.code)
            if exc.details.get("limit") in ("max_pending", "enqueue_rate"):
                limit = f"quota.{exc.details['limit']}"
                log_decision(namespace, limit, True, jobs=n)
                self._metrics.admission_decision(limit, BLOCKED, n)
            raise
        tx.undo(undo)
        if admitted.decisions:
            enforce = quota is None or quota.enforce
            tx.after(lambda: self._decided(namespace, admitted.decisions, enforce))
        if self.save_rates and actor.rate is not None and admitted.live:
            tx.store.epoch.save_rate(namespace, actor.rate.raw(), tx.now_ms)
        tx.after(lambda: actor.committed_pending(admitted.live))
        if admitted.shed_reason is not None:
            shed = n - admitted.live
            tx.after(lambda: self._metrics.quota_shed(namespace, admitted.shed_reason or "", shed))
        return admitted.live, admitted.shed_reason

    def _decided(self, namespace: str, decisions: tuple[tuple[str, int, int], ...],
                 enforce: bool) -> None:  # fmt: skip
        """Count (and log what was held of) one committed enqueue's quota decisions."""
        metrics = self._metrics
        for limit, allowed, held in decisions:
            if allowed:
                metrics.admission_decision(limit, ALLOWED, allowed)
            if held:
                log_decision(namespace, limit, enforce, jobs=held)
                metrics.admission_decision(limit, BLOCKED if enforce else WOULD_BLOCK, held)

    def limit_text(self, namespace: str, limit: str) -> str:
        """``max_pending 10000`` or ``enqueue_rate 500/s``: a limit and its value."""
        quota = self._namespaces.find(namespace).quota
        return f"{limit} {getattr(quota, limit, '')}"

    def pending_now(self, namespace: str) -> int:
        """The namespace's scheduled and pending jobs (what ``max_pending`` counts),
        those other daemons moved included (:attr:`elsewhere`)."""
        return (
            self._counts.total(namespace, lc.SCHEDULED)
            + self._counts.total(namespace, lc.PENDING)
            + self.elsewhere.get(namespace, 0)
        )

    def read_back(self, store: Store, rates: list[tuple[str, tuple[int, int, int]]]) -> None:
        """Several daemons (daemon.admission.cluster): the ``enqueue_rate`` pools as
        stored (``rates``, read with the other limits), and each ``max_pending``
        namespace's waiting jobs as counted."""
        stored = dict(rates)
        self.elsewhere.clear()
        for actor in self._namespaces.known():
            if actor.rate is not None and actor.namespace in stored:
                actor.rate.restore(stored[actor.namespace])
            if actor.quota is not None and actor.quota.max_pending is not None:
                counted = store.epoch.waiting(actor.namespace)
                self.elsewhere[actor.namespace] = counted - self.pending_now(actor.namespace)

    def claim_room(self, namespace: str, want: int) -> int:
        """How many jobs a claim in ``namespace`` may take now (at most ``want``).

        0 under a hold (:meth:`hold`); with ``max_running``, what is left of it
        beside what runs, counting the claims of this transaction not yet
        committed (:meth:`claimed`).
        """
        actor = self._namespaces.find(namespace)
        if actor.broken is not None:
            return 0
        room = actor.running_room(self._counts.total(namespace, lc.RUNNING))
        if room == 0 and want:
            self.running_full(namespace)
        return want if room is None else min(want, room)

    def hold(self, namespace: str) -> str | None:
        """Why no job of ``namespace`` may start now: ``quota_unavailable``,
        ``running_full``, or None."""
        actor = self._namespaces.find(namespace)
        if actor.broken is not None:
            return "quota_unavailable"
        if actor.running_room(self._counts.total(namespace, lc.RUNNING)) == 0:
            return "running_full"
        return None

    def running_use(self, namespace: str) -> tuple[int, int] | None:
        """(jobs running, ``max_running``) of ``namespace``; None without the limit."""
        quota = self._namespaces.find(namespace).quota
        if quota is None or quota.max_running is None:
            return None
        return self._counts.total(namespace, lc.RUNNING), quota.max_running

    def claimed(self, tx: Tx, namespace: str, n: int) -> None:
        """``n`` jobs of ``namespace`` were claimed in ``tx`` (counted only where
        ``max_running`` is set)."""
        actor = self._namespaces.find(namespace)  # max_running set: the actor exists
        quota = actor.quota
        if n and quota is not None and quota.max_running is not None:
            running = self._counts.total(namespace, lc.RUNNING)
            held = over(actor.running_room(running, shadow=True), n)  # 0 when enforcing
            tx.undo(actor.claiming(n))
            tx.after(lambda: self._ran(actor, n, held))

    def _ran(self, actor: NamespaceActor, n: int, held: int) -> None:
        """``n`` claims of a ``max_running`` namespace committed, ``held`` of them let
        through by a shadowed document (counted, logged)."""
        actor.committed_running(n)
        metrics = self._metrics
        if n > held:
            metrics.admission_decision(QUOTA_RUNNING, ALLOWED, n - held)
        if held:
            log_decision(actor.namespace, QUOTA_RUNNING, False, jobs=held)
            metrics.admission_decision(QUOTA_RUNNING, WOULD_BLOCK, held)

    def running_full(self, namespace: str) -> None:
        """A claim found ``namespace`` at its enforced ``max_running`` (counted, logged)."""
        log_decision(namespace, QUOTA_RUNNING, True)
        self._metrics.admission_decision(QUOTA_RUNNING, BLOCKED)

    def held_back(self, namespace: str, reason: str, queues: list[str]) -> list[dict[str, Any]]:
        """``claim_next``'s ``deferred`` entries for a namespace-wide hold (``running_full``,
        ``quota_unavailable``): every asked queue with claimable jobs."""
        out = []
        for queue in queues:
            pending = self._doorbell.claimable((namespace, queue))
            if pending <= 0:
                continue
            at = self._lease_hint() if reason == "running_full" else None
            out.append({"queue": queue, "reason": reason, "pending": pending,
                        "next_eligible_at": at, "exact": False})  # fmt: skip
        return out
