"""The daemons sharing one PostgreSQL database, and each one's share of the
per-daemon limits.

The door's buckets (request and message rates with their bursts) and waiting
slots are kept in each daemon's memory: deciding them in the database on every
request would cost a round trip each. So each of n live daemons takes 1/n of
every such limit (rate, burst, and waiting slots rounded down), and the sum
never exceeds the namespace's limit. The daemons heartbeat into ``members``
every :data:`HEARTBEAT_S`; one silent for :data:`LAPSE_HEARTBEATS` heartbeats
is forgotten, and the others take its share at their next heartbeat.

Joining is the one moment two views of n differ: the daemons already running
still use 1/(n-1) until their next heartbeat. A joining daemon that finds
others live therefore takes no share (its door-limited requests are answered
``rate_limited``) until one heartbeat interval and a half after it registered,
by which time every other daemon has counted it. One that finds none takes the
whole limit at once: no other daemon holds a share, and one registering after
it sees it and waits (registrations commit one at a time, under the epoch
lock). A leaving daemon removes its row on a clean stop.

The shortfall, by design: a daemon's share is unused while its clients are
quiet, so a namespace sending all its requests through one of n daemons gets
1/n of its limit. Spread clients over the daemons (or run one daemon) to get
all of it.
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import Callable

import trio

from daemon.store.interface import Committer, Tx

log = logging.getLogger("sluicegate.membership")
HEARTBEAT_S = 2.0
LAPSE_HEARTBEATS = 3


def daemon_id() -> str:
    """This daemon's member name: host, then random hex (unique per start)."""
    return f"{socket.gethostname()}:{secrets.token_hex(4)}"


class Membership:
    """Heartbeats into ``members`` and sets the door's share from the live count."""

    def __init__(self, *, committer: Committer, now_ms: Callable[[], int],
                 set_share: Callable[[float], None]) -> None:  # fmt: skip
        self._committer = committer
        self._now_ms = now_ms
        self._set_share = set_share
        self.name = daemon_id()
        self.members = 0
        #: Set by :meth:`leave`: no heartbeat brings the row back.
        self.left = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, hold no share for a heartbeat and a half if others are live,
        then heartbeat until cancelled (a clean stop has left already: :meth:`leave`)."""
        self._set_share(0.0)
        lapse_ms = int(HEARTBEAT_S * LAPSE_HEARTBEATS * 1000)
        await self._beat(lapse_ms, share=False)
        if self.members == 1:  # alone: nobody else holds a share to overlap with
            self._set_share(1.0)
        task_status.started()
        await trio.sleep(HEARTBEAT_S * 1.5)
        while not self.left:
            await self._beat(lapse_ms, share=True)
            await trio.sleep(HEARTBEAT_S)

    def leave(self) -> None:
        """A clean stop (the daemon drains): remove our row, so the others take
        our share at their next heartbeat. Queued as a write, so the committer
        runs it before it stops; a daemon that dies is lapsed instead."""
        self.left = True

        def done(_result: object, error: BaseException | None) -> None:
            if error is not None:  # the database away: the others will lapse us
                log.warning("could not leave the members table: %r", error)

        try:
            self._committer.submit(lambda tx: tx.store.epoch.leave(self.name), done)
        except Exception as exc:  # the committer already stopped
            log.warning("could not leave the members table: %r", exc)

    async def _beat(self, lapse_ms: int, *, share: bool) -> None:
        def write(tx: Tx) -> int:
            return tx.store.epoch.heartbeat(self.name, tx.now_ms, lapse_ms)

        try:
            members = await self._committer.write(write)
        except Exception as exc:  # unavailable: keep the share we had, try again
            log.warning("membership heartbeat failed: %r", exc)
            return
        if members != self.members:
            log.info("daemons sharing the database: %d (this one: %s)", members, self.name)
            self.members = members
        if share:
            self._set_share(1.0 / max(1, members))
