"""Whether the database answers, for ``/healthz``: what the committer knows, and
at most one cheap probe per :data:`FRESH_S`.

State model of :class:`Reachability` (no state of its own but the age of the
last proof that the database answered):

- **unreachable** while the store's health is failing
  (:class:`~daemon.store.health.StoreHealth`): a transaction failed with a
  store error, or this module's probe did. The committer probes the store
  with backoff while failing and ends the episode when it answers; nothing
  is asked here meanwhile.
- **reachable, proven** when the database answered within the last
  :data:`FRESH_S`: a transaction committed since the previous look (when
  that look was itself that recent), or a probe answered.
- **to be probed** otherwise (an idle daemon, or looks further apart than
  :data:`FRESH_S`): one ``SELECT 1`` on a pooled connection, bounded by the
  connect timeout and shared by every ``/healthz`` request that arrives
  meanwhile. A probe that fails, or does not answer in time, starts a failing
  episode (``on_failure``: the committer's health, and its probe).

SQLite has no probe: the daemon holds the file open itself, so it is
reachable unless the store is failing (a full disk, an I/O error).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from daemon.store.health import StoreHealth, is_store_failure

#: Seconds a proof that the database answered stays good.
FRESH_S = 2.0


@attrs.frozen
class DatabaseTarget:
    """What ``/healthz`` names of the database: never a user or a password."""

    #: ``"sqlite"`` or ``"postgresql"``.
    store: str
    #: PostgreSQL: ``host[:port]`` (or the socket directory); None for SQLite,
    #: or when the DSN leaves it to libpq's defaults.
    host: str | None
    #: The database's name (SQLite: the file's path).
    name: str | None


class Reachability:
    """Answers whether the database answers, costing at most one probe per
    :data:`FRESH_S` and none while the committer knows the answer."""

    def __init__(
        self,
        target: DatabaseTarget,
        *,
        health: StoreHealth,
        commits: Callable[[], int],
        probe: Callable[[], Awaitable[None]] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        """``commits`` counts the committer's committed transactions; ``probe``
        (PostgreSQL) asks the database once; ``on_failure`` is told what a
        failed probe raised (default: ``health.failed``)."""
        self.target = target
        self._health = health
        self._commits = commits
        self._probe = probe
        self._on_failure = on_failure or health.failed
        self._timeout_s = timeout_s
        #: When the database last proved to answer (Trio time), if ever.
        self._ok_at: float | None = None
        self._seen_commits = commits()
        self._looked_at: float | None = None
        self._probing: trio.Event | None = None
        #: Probes sent so far (for tests and statistics).
        self.probes = 0

    async def check(self) -> bool:
        """Whether the database answers now (see the module's state model)."""
        if self._probe is None:
            return self._health.failing is None
        self._note_commits()
        while True:
            if self._health.failing is not None:
                return False
            if self._fresh():
                return True
            if self._probing is None:
                break
            await self._probing.wait()  # another request's probe: its answer is ours
        await self._run_probe()
        return self._health.failing is None

    async def wire(self) -> dict[str, Any]:
        """The ``database`` section of ``/healthz``."""
        reachable = await self.check()
        return {"store": self.target.store, "reachable": reachable,
                "host": self.target.host, "name": self.target.name}  # fmt: skip

    def _note_commits(self) -> None:
        """A commit since the previous look proves the database answered after
        that look: a proof as old as the look."""
        now = trio.current_time()
        commits = self._commits()
        if commits != self._seen_commits and self._looked_at is not None:
            last = self._looked_at
            self._ok_at = last if self._ok_at is None else max(self._ok_at, last)
        self._seen_commits = commits
        self._looked_at = now

    def _fresh(self) -> bool:
        return self._ok_at is not None and trio.current_time() - self._ok_at < FRESH_S

    async def _run_probe(self) -> None:
        assert self._probe is not None
        probing = self._probing = trio.Event()
        self.probes += 1
        try:
            with trio.move_on_after(self._timeout_s) as waited:
                await self._probe()
            if waited.cancelled_caught:
                self._failed(TimeoutError(f"no answer to a probe within {self._timeout_s:g} s"))
            else:
                self._ok_at = trio.current_time()
        except Exception as exc:
            self._failed(exc)
        finally:
            self._probing = None
            probing.set()

    def _failed(self, exc: BaseException) -> None:
        """A probe failed: whatever it raised, the database is unusable now."""
        if not is_store_failure(exc):  # e.g. the database was dropped: still "away"
            exc = ConnectionError(f"{type(exc).__name__}: {exc}")
        self._ok_at = None
        self._on_failure(exc)
