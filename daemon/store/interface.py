"""The store interface: every operation the daemon asks of its database.

The verbs, admission, the core and the leaders speak to storage only through
these protocols, in :class:`~daemon.store.rows.JobRow` records and plain
values; no SQL, no connection, no dialect crosses this line. SQLite
(:mod:`daemon.store.sqlite`) implements it today; PostgreSQL (issue 15,
asyncpg under trio-asyncio, several daemons on one database) is the second
implementation it is shaped for. ``tests/unit/test_store_contract.py`` is the
one contract suite every implementation must pass, unchanged.

A :class:`Store` is a set of narrow protocols, one per table family:
:class:`JobStore`, :class:`QueueStore`, :class:`BudgetStore`,
:class:`PolicyStore`, :class:`SettingsStore`, :class:`AuditStore`,
:class:`UsageStore` and :class:`RetentionStore`. Writes happen inside a
:class:`Transaction` handed out by a :class:`Committer`.

Why the seams sit where they do, on both databases:

**The transaction boundary is the write function.** A write is ``fn(tx)``,
submitted to the :class:`Committer`; everything it does through ``tx.store``
commits or rolls back together, and its effects on memory are registered with
``tx.after`` (run after COMMIT) and ``tx.undo`` (run if its statements are
rolled back). No store method opens, commits or rolls back a transaction, so
the same verb code runs on either store. SQLite: ``BEGIN IMMEDIATE`` on the
daemon's one connection. PostgreSQL: ``BEGIN`` on one pooled connection per
group; an error aborts a PostgreSQL transaction, so there every write runs
under its own ``SAVEPOINT`` (the "careful" pass :class:`GroupCommit` already
has on SQLite) and a refused write is rolled back alone.

**The group commit is the Committer's business, not the verbs'.** Writes that
arrive in one scheduling round share one transaction and are answered after
its COMMIT. That is expressible on both: SQLite runs the round's writes on
the event loop (statements are microseconds); PostgreSQL runs the round on a
connection taken from the pool, and a second round may start on a second
connection while the first commits, because correctness no longer rests on
one connection but on row locks (below). Accumulated writes flushed once per
transaction (usage meters) are :class:`Pending` objects given the ``Store``.

**The methods are synchronous.** A write function must make each admission
decision with no ``await`` between a check and the change it guards (the
actors' rule, DESIGN.md "Actors"), so the protocol methods are plain calls.
SQLite serves them on the loop. PostgreSQL serves them through the greenlet
bridge (:mod:`daemon.store.bridge`): a transaction's write functions run in a
greenlet whose statements are awaited by an asyncio task on a pooled
connection (asyncpg under trio-asyncio), and a read outside a transaction is
awaited through greenback from the task that makes it. One thread throughout:
the in-memory actors are touched as on SQLite. Across daemons, exactness then
comes from the locks the transaction holds, not from the event loop: the
in-memory actors become caches, corrected by ``tx.after`` and NOTIFY.

**The row locks a claim needs are taken by the claim's own calls, in one
order.** A claim is ``jobs.ready`` (the candidates, in priority, ready_at, id
order) then, after admission decided, ``jobs.mark_running`` / ``jobs.park``
in the same transaction. SQLite's ``BEGIN IMMEDIATE`` holds the database's
write lock for the whole group, so every row read is already locked.
PostgreSQL: ``ready`` is ``SELECT ... FOR UPDATE SKIP LOCKED`` (another
daemon's candidates are skipped, never waited for); the budget and queue
policy rows that admission decides against are locked after the jobs, blocking
and in key order (``SELECT ... FOR UPDATE``, or the ``UPDATE`` of
``budgets.save_pool`` / ``policies.charge`` itself), as seed 002 REQ-4
describes, so two daemons never deadlock. Those reads are the operations
issue 15 adds to :class:`BudgetStore` and :class:`PolicyStore`; today the
actors' memory is the exact copy, since one daemon owns the file. Guarded updates
(``finish``, ``heartbeat``: ``WHERE state = 'running' AND lease = ?``) lock
the row they change and raise :class:`StaleRow` when it moved on, which both
dialects express with the affected-row count.

**The lifecycle table is enforced at this door.** Every method that moves a
job (``mark_running``: claim; ``extend_lease``: heartbeat; ``finish``:
complete, fail, release, reap; ``complete_many``; ``fold``; ``replay``) checks
:data:`actors.lifecycle.TRANSITIONS` against the row it is given before any
statement runs, and raises :class:`~actors.lifecycle.IllegalTransition`,
having changed nothing. ``promote_due`` moves many rows in one statement, so
its guard is the table's own: only the states :func:`actors.lifecycle.sources`
names for ``promote``. The contract suite holds every implementation to this.

**Every move of a job is reported.** The store's :class:`JobStore` is
wrapped in the jobs journal (:mod:`daemon.store.journal`), whose writes hand
each move (the rows after, the event, the state left) to the transition step
as soon as their statement ran; no caller reports a move, so none can forget
one. An
implementation only has to return the rows after (``promote_due`` too).

**Time is passed in.** Every method that needs "now" takes it (``now``, in
ms since the epoch, from the Transaction), so a store never reads a clock, and
the contract suite runs at exact instants (the horizon ± 1 ms).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from daemon.store.families import (
    MINUTE_MS,
    QUOTA_PREFIX,
    RETENTION,
    AuditStore,
    BudgetStore,
    EpochStore,
    PolicyStore,
    QueueStore,
    RetentionStore,
    SettingsStore,
    UsageStore,
    namespace_of,
    quota_key,
)
from daemon.store.rows import JobRow

__all__ = [
    "MINUTE_MS",
    "QUOTA_PREFIX",
    "RETENTION",
    "AuditStore",
    "BudgetStore",
    "Committer",
    "EpochStore",
    "JobRow",
    "JobStore",
    "Pending",
    "PolicyStore",
    "QueueStore",
    "RetentionStore",
    "SettingsStore",
    "StaleRow",
    "Store",
    "Transaction",
    "UsageStore",
    "namespace_of",
    "quota_key",
]

T = TypeVar("T")


class StaleRow(Exception):
    """A guarded update found the job no longer in the state its caller saw."""


@runtime_checkable
class JobStore(Protocol):
    """Jobs: insert, claim, park/release, heartbeat, finish, reap, promote, read."""

    def insert(self, rows: Sequence[JobRow]) -> None:
        """Insert new jobs."""

    def get(self, namespace: str, job_id: str) -> JobRow | None:
        """One job of ``namespace``; another namespace's job reads as absent."""

    def find_live_unique(self, namespace: str, queue: str, key: str) -> JobRow | None:
        """The live (scheduled, pending or running) job holding ``unique_key``."""

    def fold(self, before: JobRow, payload: str, ready_at: int, now: int) -> JobRow:
        """Debounce: a waiting job's new payload and ``ready_at``; scheduled, unparked."""

    def ready(
        self, namespace: str, queues: Sequence[str], limit: int, caps: dict[str, int] | None = None
    ) -> list[JobRow]:
        """Claim, step 1: the first ``limit`` claimable jobs of ``queues`` (at most
        ``caps[queue]`` of a capped queue), in priority, ready_at, id order,
        locked for this transaction. Parked jobs are never read."""

    def ready_groups(
        self, namespace: str, queue: str, wants: Sequence[tuple[str, int]]
    ) -> list[JobRow]:
        """Claim, step 1 of a fair queue: the first claimable jobs of named groups
        (``(group, n)`` pairs, ``""`` the default group), locked."""

    def ready_except(
        self, namespace: str, queue: str, limit: int, held: Sequence[str]
    ) -> list[JobRow]:
        """Claim, step 1 of a FIFO queue with group limits: the first ``limit``
        claimable jobs of one queue outside the groups ``held``, locked."""

    def ready_group_names(self, namespace: str, queue: str) -> list[str]:
        """The groups of one queue with claimable jobs, by name."""

    def group_counts(
        self, namespace: str, queue: str, running_only: bool = False
    ) -> list[tuple[str, str, int]]:
        """(group, state, count) of one queue's pending and running jobs (or
        running ones only)."""

    def mark_running(
        self, rows: list[JobRow], lease: str, lease_ms: int | None, now: int
    ) -> list[JobRow]:
        """Claim, step 2: the jobs ``rows`` (read in this transaction) become
        running under ``lease``, one more attempt; their rows after."""

    def park(self, parked: Sequence[tuple[str, str]]) -> None:
        """Park jobs, ``(budget key, job id)`` pairs: they leave the ready index."""

    def unpark(self, ids: Sequence[str]) -> None:
        """Release parked jobs back to the ready index."""

    def parked_oldest(self, namespace: str, key: str, limit: int) -> list[tuple[str, str, str]]:
        """(id, queue, budgets JSON) of the oldest ``limit`` jobs parked on ``key``."""

    def parked_counts(self) -> list[tuple[str, str, str, int]]:
        """(namespace, queue, budget key, parked jobs) for every parked combination."""

    def unfinished_bindings(self) -> list[tuple[str, str, str, str]]:
        """(id, namespace, state, budgets JSON) of every unfinished bound job."""

    def unfinished_bound_groups(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """(id, namespace, queue, state, group, parked_on, budgets JSON) of every
        unfinished bound job (``""``: the default group), by id."""

    def extend_lease(self, before: JobRow, expires: int, now: int) -> JobRow:
        """Heartbeat: push a running job's lease expiry (guarded: :class:`StaleRow`)."""

    def finish(
        self,
        before: JobRow,
        *,
        event: str,
        state: str,
        now: int,
        ready_at: int | None = None,
        attempts_delta: int = 0,
        error: str | None = None,
        result: str | None = None,
        dead: str | None = None,
        budgets: str | None = None,
    ) -> JobRow:
        """A running job leaves ``running`` by ``event`` (complete, fail, release,
        reap) for ``state`` (guarded on its lease: :class:`StaleRow`);
        ``budgets``, when given, replaces its stored bindings (settled costs)."""

    def complete_many(self, rows: list[tuple[JobRow, str | None]], now: int) -> list[JobRow] | None:
        """Complete running jobs ((row, result JSON) each), all or none: None
        when any lease guard failed, having changed nothing."""

    def replay(self, before: JobRow, now: int, grouped: bool = False) -> JobRow:
        """A dead letter back to pending: attempts 0, no error, no dead record
        (``grouped``: into the default group ``''`` of a queue counting groups)."""

    def adopt_default_group(self, namespace: str, queue: str) -> int:
        """A queue starts counting groups: its unfinished jobs without a group go
        to the default group ``''``; how many."""

    def promote_due(self, now: int, batch: int = 1000) -> list[JobRow]:
        """Scheduled jobs whose ``ready_at`` is at or before ``now`` become
        pending; their rows after."""

    def lapsed(self, now: int, batch: int = 1000) -> list[JobRow]:
        """Running jobs whose lease expired at or before ``now`` (for the reaper)."""

    def earliest_scheduled(self) -> int | None:
        """The earliest ``ready_at`` of a scheduled job."""

    def earliest_lease_expiry(self) -> int | None:
        """The earliest lease expiry of a running job."""

    def list_jobs(
        self, namespace: str, *, queue: str | None, state: str | None, after: str | None,
        limit: int,
    ) -> list[JobRow]:  # fmt: skip
        """Jobs of ``namespace`` in id order, filtered, after the cursor ``after``."""

    def dead_ids(
        self, namespace: str, queue: str | None, after: str | None, limit: int
    ) -> list[str]:
        """Ids of dead letters of ``namespace`` after ``after``, oldest first."""

    def state_counts(self) -> list[tuple[str, str, str, int]]:
        """(namespace, queue, state, count) for every non-empty combination."""

    def ahead(self, row: JobRow, limit: int) -> int:
        """Claimable jobs before ``row`` in its queue's claim order, counted up to
        ``limit``: ``explain``'s position."""


class Store(Protocol):
    """One database, as the daemon sees it."""

    jobs: JobStore
    queues: QueueStore
    budgets: BudgetStore
    policies: PolicyStore
    settings: SettingsStore
    audit: AuditStore
    usage: UsageStore
    retention: RetentionStore
    epoch: EpochStore

    def close(self) -> None:
        """Close the database."""


class Transaction(Protocol):
    """One write's view of the open transaction."""

    store: Store
    now_ms: int
    #: A share-mode transaction (daemon.admission.cluster): no limit decided in it.
    shared: bool

    def after(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once the transaction has committed (never if not)."""

    def undo(self, inverse: Callable[[], None]) -> None:
        """Run ``inverse`` if this write's statements are rolled back."""


class Pending(Protocol):
    """Memory that a group's writes accumulate and that is written once per
    transaction, just before its COMMIT (e.g. usage counts: one upsert per
    group, not per write). A write's share is taken back with ``Tx.undo``."""

    def flush(self, store: Store) -> None:
        """Write what the transaction's writes accumulated (inside it)."""

    def committed(self) -> None:
        """The transaction committed: forget what was flushed."""


class Committer(Protocol):
    """The transaction boundary: runs write functions in group transactions."""

    store: Store
    after_commit: list[Callable[[], None]]
    pending: list[Pending]

    def submit(
        self,
        fn: Callable[[Any], Any],
        done: Callable[[Any, BaseException | None], None],
        free: Callable[[], bool] | None = None,
    ) -> Any:
        """Queue ``fn`` for the next transaction; ``done`` is called when settled.
        ``free`` says whether it decides no limit (it may then share the cluster's
        epoch lock: daemon.admission.limit_free)."""

    async def write(self, fn: Callable[[Any], T], free: Callable[[], bool] | None = None) -> T:
        """Run ``fn(tx)`` in the next group transaction; its result after COMMIT."""

    def run_now(self, fn: Callable[[Any], T]) -> T:
        """Run one write in its own transaction at once (start-up, tests)."""


#: The short name the verbs use for a write's transaction.
Tx = Transaction
