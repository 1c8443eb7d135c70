"""Limits exact across daemons that share one PostgreSQL database.

Every limit (budgets, queue policies, namespace quotas) is decided inside the
write's transaction from memory: exact for one daemon, whose event loop is the
only writer. Daemons sharing a database each see only their own moves, and
deciding from that view would over-admit (PgQueuer's count-then-insert,
Hatchet #4778). So on PostgreSQL every write transaction starts by bumping the
cluster epoch (:mod:`daemon.store.epoch`):

- the bump's row lock is held until the commit, so the write transactions of
  all daemons run one at a time, in one order, and every decision is taken
  over everything committed before it (no snapshot hides a claim that is not
  yet committed: the lock waits for it);
- the epoch it returns says whether another daemon committed since this one
  last did. If so, the limit state is read back from the store before any write
  of the transaction runs (:meth:`ClusterSync.reload`); if not, memory is
  already exact and the transaction pays one statement.

It is the first lock every write transaction takes, and always the same row,
so no two daemons can deadlock over limits. What is read back costs what is
configured and what runs, never the backlog:

- jobs running per queue (policies' ``max_in_flight``, quotas' ``max_running``);
- budgets: settings, pauses and pools (tokens as of an instant, cost in flight;
  credits are saved too, see ``BudgetGate.shared``), budgets made or removed
  elsewhere, and whether jobs are parked on each;
- queue policies: definitions and the current window's usage;
- quotas: ``enqueue_rate`` pools (written with each debit), and for namespaces
  with ``max_pending`` their waiting jobs, counted (bounded by the quota).

The other queue counts (pending, scheduled, finished: what ``status``, the
metrics and the board show) are counted again every few seconds
(:meth:`ClusterSync.refresh`), a cost that follows the table, off the claim's
path.

**Share mode.** One transaction at a time cluster-wide caps a cluster at one
backend's speed. A transaction whose writes decide no limit
(:mod:`daemon.admission.limit_free`: plain enqueues, claims and completions in
a namespace that nothing limits) holds the epoch row ``FOR SHARE`` instead
(:func:`daemon.store.epoch.share_postgres`), beside other such holders, on
every daemon. An exclusive holder still waits for every share holder to
commit, and they for it, so:

- a share holder reads the epoch under its lock. If it moved since this
  daemon's last look, the limit state is read back then and there (the
  exclusive writers that changed it have all committed) and the transaction
  goes on in share mode only if its first write still decides no limit;
- share holders do not bump the epoch, so each one ticks a sequence once it
  holds the lock. An exclusive holder reads the sequence under its lock and
  reads the state back if a share holder other than this daemon's counted
  since its last look: a limit made over work done in share mode elsewhere
  (a policy on a queue whose jobs another daemon claimed) starts from counts
  that include that work.

``locked=False`` is the unsafe design kept for the test that proves the lock is
needed: every transaction reads the state back, without the lock.
:attr:`ClusterSync.checks` lets a test swap out either share-mode check, to show
each is needed (``SLUICEGATE_TEST_UNCHECKED_SHARE``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from actors import lifecycle as lc
from actors.budgets import Budget, Budgets
from actors.counts import QueueCounts
from daemon.admission.budget_gate import BudgetGate
from daemon.admission.policies import Policies
from daemon.admission.quotas import Quotas
from daemon.store.interface import Committer, Store

log = logging.getLogger("sluicegate.cluster")
#: Set to 1 in a test only: decide from an unlocked read (the over-admitting design).
UNSAFE_ENV = "SLUICEGATE_TEST_UNLOCKED_ADMISSION"
#: Set in a test only to ``epoch`` or ``seq``: that share-mode check swapped out.
UNCHECKED_ENV = "SLUICEGATE_TEST_UNCHECKED_SHARE"
#: The share-mode checks (see the module's docstring).
CHECKS = frozenset({"epoch", "seq"})


def unsafe_unlocked() -> bool:
    """Whether the test-only switch asks for the unlocked design (logged loudly)."""
    if os.environ.get(UNSAFE_ENV) != "1":
        return False
    log.warning("%s=1: limits are decided from unlocked reads and WILL over-admit "
                "across daemons; a test switch, never for production", UNSAFE_ENV)  # fmt: skip
    return True


def share_checks() -> frozenset[str]:
    """The share-mode checks to make: all, unless a test swapped one out (logged loudly)."""
    dropped = os.environ.get(UNCHECKED_ENV, "")
    if dropped not in CHECKS:
        return CHECKS
    log.warning("%s=%s: share-mode transactions skip that check and WILL over-admit "
                "across daemons; a test switch, never for production",
                UNCHECKED_ENV, dropped)  # fmt: skip
    return CHECKS - {dropped}


class ClusterSync:
    """The epoch lock and the reload of limit state, for one daemon of a cluster."""

    def __init__(
        self, *, counts: QueueCounts, budgets: Budgets, gate: BudgetGate, policies: Policies,
        quotas: Quotas, committer: Committer, locked: bool = True,
    ) -> None:  # fmt: skip
        self._counts = counts
        self._budgets = budgets
        self._gate = gate
        self._policies = policies
        self._quotas = quotas
        self.locked = locked
        #: The epoch memory is exact for (None: not yet): of this daemon's last
        #: exclusive commit, or read under a share-mode lock.
        self.epoch: int | None = None
        #: The last share-mode transaction number memory holds the work of: every
        #: one up to it was this daemon's or was read back (None: not yet).
        self.shares: int | None = None
        self._next: tuple[int, int] | None = None
        self._number: int | None = None  # this share-mode transaction's
        #: The share-mode checks made (a test may swap one out: share_checks).
        self.checks = CHECKS
        #: Share-mode transactions committed, and those whose epoch had moved.
        self.shared = 0
        self.shared_reloads = 0
        self._reloaded = False
        self._committer = committer
        self._syncing = False
        #: Set by a refresh: the next transaction counts every queue again first.
        self._recount_due = False
        self.reloads = 0
        #: Set by the cross-daemon doorbell (as on a timer); nothing is published.
        self.on_note: Callable[[int], None] | None = None
        #: Also told when another daemon wrote a limit's settings (the settings
        #: watcher: quota documents are read by it, not by the reload).
        self.on_heard: list[Callable[[], None]] = []

    # -- GroupCommit's hooks: begun (after BEGIN), then flush/committed (Pending) ------

    def begin(self, store: Store, shared: bool = False) -> None:
        """The transaction's first statement: the epoch lock, then a reload if
        another daemon committed since our last look (the module says when)."""
        self._next = self._number = None
        if shared:  # only ever asked when locked (Core sets GroupCommit.shares)
            epoch, self._number = store.epoch.share()
            if "epoch" in self.checks and epoch != self.epoch:
                # Exclusive writers committed since: they have all ended (we hold
                # the row), so what they did to limits is read back exactly.
                self.shared_reloads += 1
                self.reload(store)
                self.epoch = epoch
            return
        if not self.locked:
            self.reload(store)
        else:
            epoch, shares = store.epoch.bump()
            self._next = (epoch, shares)
            moved = self.epoch is None or epoch != self.epoch + 1
            if moved or ("seq" in self.checks and shares != self.shares):
                self.reload(store)
        if self._recount_due:
            # Here, before any write of the transaction: memory then holds every
            # committed move and none of this transaction's, whose effects are
            # applied at its commit. Counted after a write of the same transaction,
            # its moves would be counted twice (a completion twice: one running
            # job too few, and a cap over-admitted).
            self._recount_due = False
            self._counts.load(store.jobs.state_counts())
            self._policies.groups.recount(store)

    def flush(self, store: Store) -> None:
        """Nothing is accumulated: the bump is the transaction's first statement."""

    def committed(self) -> None:
        """Our bump committed: memory is exact as of this epoch (and of the share
        holders counted then); or our share-mode transaction did."""
        if self._next is not None:
            (self.epoch, self.shares), self._next = self._next, None
        elif self._number is not None:
            if self.shares is not None and self._number == self.shares + 1:
                self.shares = self._number  # no other daemon's share holder in between
            self._number = None
            self.shared += 1
        if self._reloaded:
            self._reloaded = False
            self._after_reload()

    # -- looking again without a write of our own --------------------------------------

    def refresh(self) -> None:
        """Every few seconds (daemon.store.pg_notify): a daemon with no writes of
        its own still reads the state back, so work parked by a daemon that died,
        or freed by another, is released here too; and the queue counts of every
        state (``status``, metrics, the board) are counted again, since between
        recounts each daemon sees only its own moves (running jobs excepted:
        they are read back at every reload)."""
        if self._syncing:
            return
        self._syncing = True
        self._recount_due = True
        self._committer.submit(lambda _tx: None, lambda _r, _e: self._synced())

    def heard(self, _at_ms: int) -> None:
        """The cross-daemon doorbell's timer method: a notice of kind "limits" (a
        limit's settings written on another daemon: Doorbell.limits_changed)
        looks again at once, as a refresh does; so do :attr:`on_heard`'s."""
        self.refresh()
        for hook in self.on_heard:
            hook()

    def _synced(self) -> None:
        self._syncing = False

    # -- the reload ------------------------------------------------------------------

    def reload(self, store: Store) -> None:
        """Read every limit's state back from the store (inside the transaction)."""
        self.reloads += 1
        self._reloaded = True
        stored = store.epoch.limits()  # one statement: running, budgets, rates, policies
        self._counts.set_state(lc.RUNNING, {(ns, q): n for ns, q, n in stored.running})
        self._reload_budgets(stored.budgets)
        self._quotas.read_back(store, stored.rates)
        told = {k: (s.last_label, s.reopen_at) for k, s in self._policies.states.items()}
        self._policies.load(stored.policies)
        self._policies.groups.recount(store, running_only=True)
        self._policies.groups.discover(store)
        for key, state in self._policies.states.items():
            if key in told:  # what subscribers were told stands: a reopening still rings
                state.last_label, state.reopen_at = told[key]

    def _reload_budgets(self, rows: list[tuple[Budget, bool]]) -> None:
        budgets = self._budgets
        seen = set()
        for stored, has_parked in rows:
            key = (stored.namespace, stored.key)
            seen.add(key)
            mine = budgets.get(key)
            if mine is None:
                budgets.add(stored)
                mine = stored
            else:
                mine.pool.spec = stored.pool.spec
                mine.pool.restore(stored.pool.raw())
                mine.updated_at, mine.source = stored.updated_at, stored.source
                mine.paused_until, mine.pause_reason = stored.paused_until, stored.pause_reason
                # Promises of released jobs are this daemon's: another may have
                # claimed them since. The debit at claim decides; start afresh.
                mine.reserved.clear()
            # Parked jobs may be another daemon's: what matters is whether any are.
            if has_parked and mine.parked <= 0:
                mine.park(None, 1 - mine.parked)
                self._gate.waiting.add(key)
            elif not has_parked and mine.parked:
                mine.park(None, -mine.parked)
        for key in [k for k in budgets if k not in seen]:
            budgets.remove(*key)

    def _after_reload(self) -> None:
        """After the commit: parked jobs and reopened queues are looked at again."""
        for budget in list(self._budgets.values()):
            self._gate.settings_changed(budget)
        for key in list(self._policies.states):
            self._policies.refresh(key)
