"""The store's table families besides jobs, as protocols, and the values every
implementation stores alike.

Part of the store interface (:mod:`daemon.store.interface` re-exports every
name here): queues, budgets, policies, settings, audit, usage and retention,
each a narrow protocol an implementation serves with its own dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

# -- values every implementation stores alike ----------------------------------

#: A usage minute, in ms (``usage_minutes`` counts jobs per namespace and minute).
MINUTE_MS = 60_000
#: The role name of the retention leader's lease.
RETENTION = "retention"
#: Settings keys under this prefix are quota documents (never listed as settings).
QUOTA_PREFIX = "quota:"


def quota_key(namespace: str) -> str:
    """The settings key of a namespace's quota (``<len>`` is its byte length)."""
    if namespace == "default":
        return "quota:default"
    return f"quota:ns:{len(namespace.encode())}:{namespace}"


def namespace_of(key: str) -> str | None:
    """The namespace a quota key names (None for another key)."""
    if key == "quota:default":
        return "default"
    if key.startswith("quota:ns:"):
        length, _, namespace = key[len("quota:ns:") :].partition(":")
        if length.isdigit() and int(length) == len(namespace.encode()):
            return namespace
    return None


@runtime_checkable
class QueueStore(Protocol):
    """Known queues and their retention settings."""

    def all_queues(self) -> list[tuple[str, str, int | None, int | None]]:
        """(namespace, queue, completed TTL ms, dead TTL ms) of every queue."""

    def ensure(self, namespace: str, queue: str, now: int) -> None:
        """Record a queue the first time a job names it."""

    def configure(
        self, namespace: str, queue: str, completed_ttl_ms: int | None, dead_ttl_ms: int | None,
        now: int,
    ) -> dict[str, Any]:  # fmt: skip
        """Set a queue's retention TTLs; its settings after."""

    def get(self, namespace: str, queue: str) -> tuple[Any, ...] | None:
        """One queue's settings row."""


@runtime_checkable
class BudgetStore(Protocol):
    """Budgets: settings and persisted pool state."""

    def load_all(self) -> list[Any]:
        """Every budget, as :class:`actors.budget.Budget`."""

    def save(
        self, namespace: str, key: str, *, allocation: int, strategy: dict[str, Any],
        created_at: int, updated_at: int, units: int, as_of_ms: int, in_flight: int,
        source: str, paused_until: int | None = None, pause_reason: str | None = None,
        enforce: bool = True,
    ) -> None:  # fmt: skip
        """Create or replace one budget (its pause and shadow mode too)."""

    def save_pool(self, namespace: str, key: str, state: Any) -> None:
        """Persist a budget's pool state (:class:`actors.budget.PoolState`)."""

    def count(self) -> int:
        """How many budgets, all namespaces together."""

    def bound(self, namespace: str, key: str) -> dict[int, int]:
        """Unfinished jobs bound to one budget, as cost -> jobs."""

    def bound_queues(self, namespace: str, key: str) -> set[str]:
        """The queues with unfinished jobs bound to one budget."""

    def delete(self, namespace: str, key: str) -> None:
        """Remove one budget."""


@runtime_checkable
class PolicyStore(Protocol):
    """Queue admission policies and their per-window usage."""

    def all_policies(self) -> list[tuple[Any, ...]]:
        """(namespace, queue, policy JSON, created_at, updated_at, created_by,
        updated_by, source) of every policy."""

    def save(self, row: tuple[Any, ...]) -> None:
        """Create or replace one policy (a row as :meth:`all_policies` gives)."""

    def delete(self, namespace: str, queue: str) -> None:
        """Remove one policy."""

    def usage(self, namespace: str, queue: str, key: str, window_start: int) -> int:
        """Claims charged to the window ``key`` (a period) starting at ``window_start``."""

    def usage_after(self, namespace: str, queue: str, key: str,
                    window_start: int) -> dict[int, int]:  # fmt: skip
        """Claims charged to each window of ``key`` starting after ``window_start``."""

    def charge(self, namespace: str, queue: str, key: str, window_start: int, n: int) -> None:
        """Add ``n`` claims to a window's usage."""

    def prune(self, namespace: str, queue: str, key: str, before: int) -> None:
        """Forget the usage of windows of ``key`` starting before ``before``."""


@runtime_checkable
class SettingsStore(Protocol):
    """The settings table: quota documents, periodic state, provisioning marks."""

    def get(self, key: str) -> str | None:
        """One setting's text."""

    def put(self, key: str, value: str, now_ms: int) -> None:
        """Create or replace one setting."""

    def delete(self, key: str) -> None:
        """Remove one setting."""

    def quotas(self) -> list[tuple[str, str]]:
        """(key, document text) of every quota document."""

    def list_public(self) -> list[tuple[str, str, int]]:
        """(key, value, updated_at) of every setting shown to operators."""


@runtime_checkable
class AuditStore(Protocol):
    """The audit trail of every quota, budget, policy and queue write."""

    def record(
        self, *, at: int, actor: str, namespace: str, target_kind: str, target: str,
        action: str, before: Any, after: Any,
    ) -> None:  # fmt: skip
        """Append one record."""

    def list_records(
        self, namespace: str, *, target_kind: str | None, target: str | None,
        after: int | None, limit: int, newest_first: bool = False,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Records of ``namespace``, filtered, after the cursor ``after``."""


@runtime_checkable
class UsageStore(Protocol):
    """Usage metering (jobs per namespace and minute/day) and retained bytes."""

    def meter(self, counts: list[tuple[str, int, int]]) -> None:
        """Add (namespace, minute, jobs) to the per-minute usage."""

    def roll_up(self, keep_before_minute: int, keep_after_day: int) -> None:
        """Roll minutes into days; drop minutes and days past keeping."""

    def month_totals(self, start_ms: int, end_ms: int) -> dict[str, int]:
        """Jobs per namespace between two instants (a calendar month)."""

    def announced_level(self, namespace: str, month: str) -> int:
        """The highest usage level already announced for ``month``."""

    def announce_level(self, namespace: str, month: str, level: int) -> None:
        """Record that ``level`` was announced."""

    def retained_window(
        self, namespace: str, queue: str, after: str, limit: int
    ) -> tuple[str | None, int, int]:
        """(last id, rows, bytes) of one window of a queue's retained rows."""


@runtime_checkable
class RetentionStore(Protocol):
    """The retention leader: its lease, TTL windows, oldest rows, deletes."""

    def hold_lease(self, role: str, holder: str, now: int, expires_at: int) -> bool:
        """Take or renew ``role`` for ``holder`` unless another holds it unexpired."""

    def release_lease(self, role: str, holder: str) -> None:
        """Give ``role`` up, if ``holder`` has it."""

    def lease_holder(self, role: str) -> tuple[str, int] | None:
        """(holder, expires_at) of ``role``."""

    def window(
        self, state: str, namespace: str, queue: str, after: str, below: str, limit: int
    ) -> list[tuple[str, str, int | None]]:
        """(id, state, finished_at) of up to ``limit`` rows of a queue in id order."""

    def oldest(
        self, state: str, namespace: str, queues: Sequence[str], limit: int
    ) -> list[tuple[str, str]]:
        """(id, queue) of a namespace's oldest finished rows in ``state``."""

    def delete(self, state: str, ids: Sequence[str]) -> int:
        """Delete finished rows (never a live one); how many went."""


@runtime_checkable
class EpochStore(Protocol):
    """The cluster's admission epoch (PostgreSQL shared by several daemons)."""

    def bump(self) -> tuple[int, int]:
        """Lock the epoch row to the commit and advance it: the new epoch, and how
        many share-mode transactions had begun (``cluster_shares``)."""

    def share(self) -> tuple[int, int]:
        """Hold the epoch row in share mode to the commit: the epoch, and this
        transaction's number among the share-mode ones."""

    def limits(self) -> Any:
        """Every limit's state, in one read (:class:`daemon.store.epoch.LimitState`)."""

    def heartbeat(self, daemon: str, now: int, lapse_ms: int) -> int:
        """Say ``daemon`` is alive; how many daemons are."""

    def leave(self, daemon: str) -> None:
        """``daemon`` stops."""

    def save_rate(self, namespace: str, state: tuple[int, int, int], now: int) -> None:
        """Write a namespace's ``enqueue_rate`` pool."""

    def retained(self) -> dict[str, int]:
        """The retention leader's last retained bytes per namespace."""

    def save_retained(self, totals: dict[str, int], now: int) -> None:
        """Write the retained bytes the leader measured."""

    def waiting(self, namespace: str) -> int:
        """A namespace's scheduled and pending jobs."""
