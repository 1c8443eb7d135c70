"""Periodic jobs in the daemon: the config's ``[[periodic]]`` entries fired through enqueue.

:class:`PeriodicScheduler` feeds the entries to a
:class:`~actors.periodic.PeriodicActor` and fires what it says is due. A fire
is one group-commit write that checks and records the slot in the settings
store (key ``periodic:<len>:<namespace>:<name>``, ``<len>`` the namespace's
byte length) and enqueues the job in the same transaction: a slot fires at most
once, across restarts and crashes too. The job's ``ready_at`` is its slot; the
audit and logs name the actor ``periodic``.

The scheduler is a producer like a client: it does not import the verb layer.
The composition root (:mod:`daemon.main`) hands it an :data:`Enqueue`, the
verb layer's :func:`daemon.verbs.periodic.fire_enqueue`, with the clock, the
writer and the metrics call it uses.

A fire the enqueue refuses (``queue_full``, ``rate_limited``,
``quota_unavailable``, ...) is logged, counted, and its slot recorded as
handled by a second write: it is not retried. Only ``shutting_down`` leaves the
slot unrecorded, so the next start catches it up (once).

The stored record: ``{schedule, slot_at, result, fired_at, job_id}``. ``slot_at``
is the last slot handled, or, with ``result: "baseline"``, the instant the
entry (or its changed schedule) was first seen: an entry fires from its first
slot after that instant, never for slots before it existed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import trio

from actors.clock import Clock
from actors.errors import Refused
from actors.periodic import PeriodicActor
from daemon.config import PeriodicConfig
from daemon.store.interface import Committer, SettingsStore, Tx

log = logging.getLogger("sluicegate.periodic")
ACTOR = "periodic"
#: Makes the write that enqueues an entry's job for a slot (run inside the
#: fire's transaction; it returns enqueue's per-job results).
Enqueue = Callable[[PeriodicConfig, int], Callable[[Tx], list[dict[str, Any]]]]


def settings_key(entry: PeriodicConfig) -> str:
    """Where the entry's last handled slot is kept."""
    return f"periodic:{len(entry.namespace.encode())}:{entry.namespace}:{entry.name}"


def stored(settings: SettingsStore, key: str) -> dict[str, Any] | None:
    """The entry's record (None when absent or unreadable)."""
    text = settings.get(key)
    if text is None:
        return None
    try:
        record = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict) or type(record.get("slot_at")) is not int:
        return None
    return record


def _put(tx: Tx, key: str, record: dict[str, Any]) -> None:
    tx.store.settings.put(key, orjson.dumps(record).decode(), tx.now_ms)


def handled_through(entry: PeriodicConfig, record: dict[str, Any] | None) -> int | None:
    """The instant after which the entry's slots are due (None: not seen yet, or its
    schedule changed since)."""
    if record is None or record.get("schedule") != entry.schedule.describe():
        return None
    return record["slot_at"]


def describe(entry: PeriodicConfig, record: dict[str, Any] | None, now_ms: int) -> dict[str, Any]:
    """One entry as ``periodic_list`` shows it."""
    schedule = entry.schedule
    handled = handled_through(entry, record)
    upcoming = schedule.next_after(now_ms if handled is None else handled)
    if upcoming is not None and upcoming <= now_ms:  # missed: the latest passed slot fires
        upcoming = max(upcoming, schedule.latest_at_or_before(now_ms) or upcoming)
    result = None if record is None else record.get("result")
    return {
        "name": entry.name,
        "queue": entry.queue,
        "type": entry.type,
        "schedule": schedule.describe(),
        "next_fire_at": upcoming,
        "last_fired_at": None if record is None else record.get("fired_at"),
        "last_slot_at": None if record is None or result == "baseline" else record["slot_at"],
        "last_result": None if result == "baseline" else result,
    }


def fire_write(
    enqueue: Enqueue, entry: PeriodicConfig, slot_ms: int
) -> Callable[[Tx], dict[str, Any]]:
    """The write that fires ``entry`` for ``slot_ms``: records the slot and enqueues,
    or does nothing when the slot is already handled (``duplicate``)."""
    key = settings_key(entry)
    enqueue_job = enqueue(entry, slot_ms)

    def write(tx: Tx) -> dict[str, Any]:
        record = stored(tx.store.settings, key)
        if record is not None and record["slot_at"] >= slot_ms:
            return {"result": "duplicate"}
        result = enqueue_job(tx)[0]
        shed = bool(result["shed"])
        job_id = result["job"]["id"]
        _put(tx, key, {
            "schedule": entry.schedule.describe(), "slot_at": slot_ms,
            "result": "shed" if shed else "fired", "fired_at": tx.now_ms, "job_id": job_id,
        })  # fmt: skip
        return {"result": "refused" if shed else "fired", "job_id": job_id}

    return write


def refused_write(entry: PeriodicConfig, slot_ms: int, code: str) -> Callable[[Tx], None]:
    """The write that records a refused fire's slot as handled."""
    key = settings_key(entry)

    def write(tx: Tx) -> None:
        record = stored(tx.store.settings, key) or {}
        if record.get("slot_at", -1) >= slot_ms:
            return
        _put(tx, key, {
            "schedule": entry.schedule.describe(), "slot_at": slot_ms, "result": "refused",
            "refused": code, "fired_at": record.get("fired_at"), "job_id": record.get("job_id"),
        })  # fmt: skip

    return write


def baseline_write(entries: dict[str, PeriodicConfig]) -> Callable[[Tx], dict[str, int]]:
    """The write that records a baseline for new (or rescheduled) entries; returns,
    per key, the instant after which its slots are due."""

    def write(tx: Tx) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, entry in entries.items():
            record = stored(tx.store.settings, key)
            handled = handled_through(entry, record)
            if handled is None:
                handled = tx.now_ms
                _put(tx, key, {
                    "schedule": entry.schedule.describe(), "slot_at": handled,
                    "result": "baseline", "fired_at": (record or {}).get("fired_at"),
                    "job_id": (record or {}).get("job_id"),
                })  # fmt: skip
            out[key] = handled
        return out

    return write


class PeriodicScheduler:
    """Fires the config's periodic entries; :meth:`replace` takes new ones (SIGHUP)."""

    def __init__(
        self,
        entries: Iterable[PeriodicConfig],
        *,
        clock: Clock,
        writer: Committer,
        enqueue: Enqueue,
        fired: Callable[[str, str], None],
    ) -> None:
        """``fired(name, result)`` counts each fire (the metrics)."""
        self._clock = clock
        self._writer = writer
        self._enqueue = enqueue
        self._fired = fired
        self._entries: dict[str, PeriodicConfig] = {}
        self._wanted = tuple(entries)
        self._changed = trio.Event()
        self.actor = PeriodicActor(clock, self.fire)

    def replace(self, entries: Iterable[PeriodicConfig]) -> None:
        """Take a reloaded config's entries (applied by :meth:`run` at once)."""
        self._wanted = tuple(entries)
        self._changed.set()

    def next_fire_at(self, entry: PeriodicConfig) -> int | None:
        """When the actor will fire ``entry`` next (None: not planned)."""
        return self.actor.next_fire_at(settings_key(entry))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the entries' slots, then fire them until cancelled. Needs the writer running."""
        async with trio.open_nursery() as nursery:
            await self._apply()
            await nursery.start(self.actor.run)
            task_status.started()
            while True:
                await self._changed.wait()
                self._changed = trio.Event()
                await self._apply()

    async def _apply(self) -> None:
        entries = {settings_key(e): e for e in self._wanted}
        if not entries and not self._entries:
            return  # nothing to plan: no write either
        try:
            handled = await self._writer.write(baseline_write(entries))
        except Refused as exc:
            log.error("periodic: cannot record baselines (%s); starting from now", exc.message)
            now = self._clock.now_ms()
            handled = dict.fromkeys(entries, now)
        self._entries = entries
        self.actor.set_entries({k: (e.schedule, handled[k]) for k, e in entries.items()})

    async def fire(self, key: str, slot_ms: int) -> None:
        """Fire the entry of settings key ``key`` for ``slot_ms`` (the actor calls this)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        try:
            outcome = await self._writer.write(fire_write(self._enqueue, entry, slot_ms))
        except Refused as exc:
            await self._refused(entry, slot_ms, exc)
            return
        result = outcome["result"]
        self._fired(entry.name, result)
        log.log(
            logging.WARNING if result == "refused" else logging.INFO,
            "periodic name=%s namespace=%s queue=%s slot_at=%d result=%s%s",
            entry.name, entry.namespace, entry.queue, slot_ms, result,
            f" job={outcome['job_id']}" + (" shed=quota" if result == "refused" else "")
            if "job_id" in outcome else "",
        )  # fmt: skip

    async def _refused(self, entry: PeriodicConfig, slot_ms: int, exc: Refused) -> None:
        self._fired(entry.name, "refused")
        log.warning(
            "periodic name=%s namespace=%s queue=%s slot_at=%d result=refused code=%s: %s",
            entry.name, entry.namespace, entry.queue, slot_ms, exc.code, exc.message,
        )  # fmt: skip
        if exc.code == "shutting_down":
            return  # left unrecorded: the next start fires it (once)
        try:
            await self._writer.write(refused_write(entry, slot_ms, exc.code))
        except Refused as again:
            log.error("periodic name=%s: cannot record the refused slot: %s", entry.name,
                      again.message)  # fmt: skip
