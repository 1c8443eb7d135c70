"""The implementation of :mod:`daemon.store.interface` over a connection:
SQLite's, or PostgreSQL's :class:`~daemon.store.postgres.PgConnection` (the
same statements; the few that differ are bound per dialect, see :class:`_Bound`).

Each part of :class:`SqliteStore` is the named statements of one module
(:mod:`~daemon.store.jobs`, :mod:`~daemon.store.queues`, ...) with the
daemon's one connection bound as their first argument. The binding is a
``functools.partial``, a C call: the interface costs the hot path no Python
frame. The transaction around them is :class:`~daemon.store.database.GroupCommit`'s.
"""

from __future__ import annotations

import sqlite3
from functools import partial
from types import ModuleType
from typing import Any

from daemon.store import audit, budgets, epoch, jobs, policies, queues, retention, settings, usage
from daemon.store.interface import (
    AuditStore,
    BudgetStore,
    EpochStore,
    JobStore,
    PolicyStore,
    QueueStore,
    RetentionStore,
    SettingsStore,
    Store,
    UsageStore,
)
from daemon.store.journal import Journal


def _members(protocol: type) -> list[str]:
    """The operations a protocol names (its public methods)."""
    return [
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and callable(value)
    ]


class _Bound:
    """One module's statements with the connection bound: an implementation of
    ``protocol`` (every operation it names, nothing more).

    On PostgreSQL (a :class:`~daemon.store.postgres.PgConnection`, whose
    ``dialect`` is ``"postgres"``) an operation ``name`` that the module also
    defines as ``name_postgres`` is bound to that one: the few statements that
    differ choose once, here, not on every call.
    """

    def __init__(self, conn: Any, module: ModuleType, protocol: type) -> None:
        suffix = "_" + getattr(conn, "dialect", "sqlite")
        for name in _members(protocol):
            fn = getattr(module, name + suffix, None) or getattr(module, name)
            setattr(self, name, partial(fn, conn))


class SqliteStore(Store):
    """The daemon's SQLite database, as :class:`~daemon.store.interface.Store`."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        #: The connection; only this package's SQLite code and white-box tests use it.
        self.conn = conn
        parts: dict[str, tuple[ModuleType, Any]] = {
            "jobs": (jobs, JobStore),
            "queues": (queues, QueueStore),
            "budgets": (budgets, BudgetStore),
            "policies": (policies, PolicyStore),
            "settings": (settings, SettingsStore),
            "audit": (audit, AuditStore),
            "usage": (usage, UsageStore),
            "retention": (retention, RetentionStore),
            "epoch": (epoch, EpochStore),
        }
        for name, (module, protocol) in parts.items():
            setattr(self, name, _Bound(conn, module, protocol))
        #: Every move of a job is reported to the transition step.
        self.jobs: Journal = Journal(self.jobs)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
