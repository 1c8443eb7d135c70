"""Which writes decide no limit: those may share the cluster's epoch lock.

On PostgreSQL shared by several daemons, a write transaction that decides no
limit holds the epoch row in share mode, beside other such transactions of
every daemon (:mod:`daemon.admission.cluster`). What may is decided here, from
memory, as the write joins a transaction, and is False unless shown True:

- the namespace has no quota document (nor a broken one), no queue policy and
  no budget, so no step of admission counts anything in it;
- an enqueue binds no budget, names no ``unique_key`` (the uniqueness check
  reads and then inserts: two daemons side by side would both insert) and
  goes to queues that exist (two daemons recording the same new queues in
  opposite orders would deadlock);
- a claim finds the job timers with nothing due: their catch-up (promotions,
  reaps of any namespace) is left to the timers' own, exclusive, writes.

Every other write (limits and their settings, fails, releases, retention,
periodic jobs, membership) is exclusive. The cluster's lock rereads memory
under the lock before a share-mode transaction's writes run, so a limit made
on another daemon meanwhile turns the transaction exclusive
(:meth:`daemon.store.database.GroupCommit._open`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Protocol

from actors.budgets import Budgets
from actors.clock import Clock
from actors.namespace import Namespaces

if TYPE_CHECKING:
    from daemon.admission.policies import Policies
    from daemon.admission.timers import JobTimers


class _Job(Protocol):
    """What an enqueue's job says that matters here."""

    queue: str
    budgets: Sequence[object] | None
    unique_key: str | None


class LimitFree:
    """Predicates over one daemon's memory: does a write decide no limit?"""

    def __init__(self, *, namespaces: Namespaces, policies: Policies, budgets: Budgets,
                 timers: JobTimers, clock: Clock,
                 known_queues: Callable[[], Collection[tuple[str, str]]]) -> None:  # fmt: skip
        self._namespaces = namespaces
        self._known_queues = known_queues
        self._policies = policies
        self._budgets = budgets
        self._timers = timers
        self._clock = clock
        self._budgeted: set[str] = set()
        self._budgets_version = -1
        #: Whether anything asks (share mode is on: PostgreSQL, locked). Off, every
        #: write is exclusive and the verbs' hot paths build no predicate.
        self.enabled = False

    def namespace(self, namespace: str) -> bool:
        """Nothing in ``namespace`` limits work: no quota, policy or budget."""
        if not self._namespaces.unlimited(namespace):
            return False
        if any(ns == namespace for ns, _queue in self._policies.states):
            return False
        budgets = self._budgets
        if budgets.version != self._budgets_version:  # budgets made or removed
            self._budgeted = {ns for ns, _key in budgets}
            self._budgets_version = budgets.version
        return namespace not in self._budgeted

    def enqueue(self, namespace: str, jobs: Sequence[_Job]) -> Callable[[], bool] | None:
        """The predicate of an enqueue of ``jobs``; None when they may decide a limit."""
        if not self.enabled or any(job.budgets or job.unique_key is not None for job in jobs):
            return None
        keys = {(namespace, job.queue) for job in jobs}

        def free() -> bool:
            known = self._known_queues()
            return self.namespace(namespace) and all(key in known for key in keys)

        return free

    def claim(self, namespace: str) -> Callable[[], bool] | None:
        """The predicate of a claim of ``namespace``'s queues."""
        if not self.enabled:
            return None
        return lambda: self.namespace(namespace) and not self._timers.due(self._clock.now_ms())

    def settle(self, namespace: str) -> Callable[[], bool] | None:
        """The predicate of a completion or a heartbeat of ``namespace``'s jobs."""
        if not self.enabled:
            return None
        return lambda: self.namespace(namespace)
