"""Doorbells across daemons sharing a PostgreSQL database: LISTEN/NOTIFY.

A claim waiting on daemon B must wake when daemon A commits an enqueue. After
each commit, the doorbell's rings are published (:meth:`CrossDaemonDoorbell.publish`,
no statement in the write's transaction, so commits pay nothing) and a task
sends them with ``pg_notify`` on :data:`CHANNEL`, coalesced per queue. Every
daemon listens on a connection of its own and rings its claim router for what
the others published (its own notices come back too, and are skipped by the
daemon id they carry). A ring only makes waiting claims try again: each claim
still goes through its own daemon's admission and the row locks.

Notifications can be lost: a daemon crashing between its commit and its
notice, a listener reconnecting, or a pooler in transaction mode (PgBouncer)
that never delivers them. So while claims wait, every :data:`POLL_S` the
daemon also looks at the database for each queue they wait on (one indexed
probe per queue, at most :data:`PROBE_LIMIT` rows) and rings what it finds.
No waiting claim, no poll.

The job timers are told the same way: a lease taken or a delay set here is
published as its instant (a line with an empty namespace and ``lease`` or
``delay`` for the queue), so another daemon's reaper reaps the leases of a
daemon that died, and its delay timer promotes that daemon's scheduled jobs.
A daemon killed between its commit and its notice is covered by every
daemon's timers looking at the database again each :data:`REFRESH_S`.

Payload: one line per queue, ``daemon-id TAB namespace TAB queue TAB n``,
several lines per notice up to PostgreSQL's 8000-byte limit. The first line,
``daemon-id TAB sent-at`` (wall microseconds since the epoch, taken just
before the notice is sent), lets each receiver measure the delivery lag
(``sluicegate_notify_lag_seconds``); a daemon of an older version skips it as
malformed, and a notice without it is simply not measured.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
import attrs
import trio
import trio_asyncio

log = logging.getLogger("sluicegate.store")

QueueKey = tuple[str, str]
CHANNEL = "sluicegate_ready"
#: Seconds between the fallback looks at the database while claims wait.
POLL_S = 1.0
#: Rows one fallback probe counts at most (a ring wakes at most that many claims).
PROBE_LIMIT = 100
#: A notice's payload stays under PostgreSQL's limit (8000 bytes).
PAYLOAD_MAX = 7000
#: Seconds between the timers' fallback looks at the database (PostgreSQL only).
REFRESH_S = 10.0
#: The two timers' names in notices (in the queue field, with no namespace).
TIMERS = ("lease", "delay")
#: Reconnection of the listener: first and longest wait (seconds).
RETRY_S = (0.5, 10.0)
_PROBE = (
    "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE namespace = $1 AND queue = $2 "
    f"AND state = 'pending' AND parked_on IS NULL LIMIT {PROBE_LIMIT}) AS ready"
)


def payloads(daemon_id: str, rings: dict[QueueKey, int], sent_us: int | None = None) -> list[str]:
    """The notices for ``rings``: lines joined up to :data:`PAYLOAD_MAX` bytes,
    each notice led by a ``daemon-id TAB sent_us`` line when ``sent_us`` is given."""
    head = [] if sent_us is None else [f"{daemon_id}\t{sent_us}"]
    head_size = sum(len(line.encode()) + 1 for line in head)
    out: list[str] = []
    lines: list[str] = list(head)
    size = head_size
    for (namespace, queue), n in rings.items():
        line = f"{daemon_id}\t{namespace}\t{queue}\t{n}"
        if len(lines) > len(head) and size + len(line.encode()) + 1 > PAYLOAD_MAX:
            out.append("\n".join(lines))
            lines, size = list(head), head_size
        lines.append(line)
        size += len(line.encode()) + 1
    if len(lines) > len(head):
        out.append("\n".join(lines))
    return out


def sent_at(payload: str) -> int | None:
    """The wall microseconds a notice was sent at, from its first line (None
    when it carries none: a daemon of an older version)."""
    first = payload.split("\n", 1)[0].split("\t")
    if len(first) == 2 and first[1].isdigit():
        return int(first[1])
    return None


def _wall_us() -> int:
    return time.time_ns() // 1000


@attrs.frozen
class NoticeStatistics:
    """A snapshot of :class:`CrossDaemonDoorbell`."""

    #: Notices sent, and ring lines heard from other daemons.
    published: int
    received: int
    #: Whether the LISTEN connection is up.
    listening: bool


def parse(payload: str, own_id: str) -> list[tuple[QueueKey, int]]:
    """The rings another daemon published (malformed lines and our own skipped)."""
    rings = []
    for line in payload.split("\n"):
        parts = line.split("\t")
        if len(parts) != 4 or parts[0] == own_id or not parts[3].isdigit():
            continue
        rings.append(((parts[1], parts[2]), int(parts[3])))
    return rings


class CrossDaemonDoorbell:
    """Publishes this daemon's doorbell rings and rings for the others'."""

    def __init__(
        self,
        pool: Any,
        connect: Callable[[], Any],
        ring: Callable[[QueueKey, int], None],
        waiting_keys: Callable[[], list[QueueKey]],
        some_waiting: Callable[[], trio.Event],
        timers: dict[str, Any] | None = None,
        *,
        lag: Callable[[float], None] | None = None,
        wall_us: Callable[[], int] = _wall_us,
    ) -> None:
        """``lag`` is told each notice's delivery lag in seconds (a metrics sink);
        ``wall_us`` is the wall clock of ``sent-at`` (microseconds)."""
        self._pool = pool
        self._connect = connect  # a coroutine function: a new asyncpg connection
        self._ring = ring
        self._waiting_keys = waiting_keys
        self._some_waiting = some_waiting
        #: "lease" and "delay": the daemon's job timers (DueActor: heard, refresh).
        self._timers = timers or {}
        for kind, timer in self._timers.items():
            timer.on_note = lambda at, kind=kind: self.publish_timer(kind, at)
        self.daemon_id = uuid.uuid4().hex[:12]
        self._outbox: dict[QueueKey, int] = {}
        self._wake = trio.Event()
        self._lost = trio.Event()
        self._lag = lag
        self._wall_us = wall_us
        self.published = 0
        self.received = 0
        self.listening = False

    def statistics(self) -> NoticeStatistics:
        """A frozen snapshot, for metrics."""
        return NoticeStatistics(self.published, self.received, self.listening)

    def publish(self, key: QueueKey, n: int) -> None:
        """``n`` jobs of ``key`` became claimable here (after the commit)."""
        self._outbox[key] = self._outbox.get(key, 0) + n
        self._wake.set()

    def publish_timer(self, kind: str, at_ms: int) -> None:
        """A lease expiry or a delay at ``at_ms`` was set here (the earliest is sent)."""
        key = ("", kind)
        known = self._outbox.get(key)
        self._outbox[key] = at_ms if known is None else min(known, at_ms)
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Publish, listen and (while claims wait) poll, until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._listen)
            nursery.start_soon(self._publish)
            nursery.start_soon(self._poll)
            if self._timers:
                nursery.start_soon(self._refresh)
            task_status.started()

    async def _refresh(self) -> None:
        while True:
            await trio.sleep(REFRESH_S)
            for timer in self._timers.values():
                timer.refresh()

    async def _publish(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            rings, self._outbox = self._outbox, {}
            for payload in payloads(self.daemon_id, rings, self._wall_us()):
                try:
                    await trio_asyncio.aio_as_trio(self._pool.execute)(
                        "SELECT pg_notify($1, $2)", CHANNEL, payload
                    )
                    self.published += 1
                except Exception as exc:  # the database is away: the poll covers it
                    log.warning("doorbell notice not sent: %r", exc)

    def _received(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        sent = sent_at(payload)
        if sent is not None and self._lag is not None:  # ours too: no clock skew in those
            self._lag(max(0, self._wall_us() - sent) / 1_000_000)
        for key, n in parse(payload, self.daemon_id):
            self.received += 1
            if key[0]:
                self._ring(key, n)
            elif key[1] in self._timers:
                self._timers[key[1]].heard(n)

    async def _listen(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        delay = RETRY_S[0]
        started = False
        while True:
            try:
                conn = await trio_asyncio.aio_as_trio(self._connect)()
            except Exception as exc:
                log.warning("doorbell listener cannot connect (%r); retrying in %.1f s", exc, delay)
            else:
                delay = RETRY_S[0]
                self._lost = trio.Event()
                conn.add_termination_listener(lambda _c: self._lost.set())
                try:
                    await trio_asyncio.aio_as_trio(conn.add_listener)(CHANNEL, self._received)
                    self.listening = True
                    if not started:
                        started = True
                        task_status.started()
                    await self._lost.wait()
                    log.warning("doorbell listener lost its connection; reconnecting")
                except Exception as exc:
                    log.warning("doorbell listener failed (%r); reconnecting", exc)
                finally:
                    self.listening = False
                    with trio.CancelScope(shield=True):
                        await trio_asyncio.aio_as_trio(conn.close)()
            if not started:  # start serving anyway: the poll covers it meanwhile
                started = True
                task_status.started()
            await trio.sleep(delay)
            delay = min(delay * 2, RETRY_S[1])

    async def _poll(self) -> None:
        while True:
            await self._some_waiting().wait()  # no waiting claim: no look
            await trio.sleep(POLL_S)
            for key in self._waiting_keys():
                try:
                    n = await trio_asyncio.aio_as_trio(self._pool.fetchval)(_PROBE, *key)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.debug("doorbell poll failed: %r", exc)
                    break
                if n:
                    self._ring(key, n)
