"""What the verbs, the transports and the board are handed: the daemon's services.

A :class:`Services` is an interface, not the thing itself: the composition
root (``Core``, in the root module ``core.py``) builds and wires the services and satisfies
it; nothing outside the root imports the root. Each verb reads the services it
needs from it (the store and committer, the admission pipeline, the router,
the read-only registries), so a verb is tested on any object that has them.
Admission services never see it: each is given its narrow dependencies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from actors.budgets import Budgets
    from actors.clock import Clock
    from actors.counts import QueueCounts
    from actors.history import History
    from actors.ids import IdMint
    from actors.namespace import Namespaces
    from actors.router import ClaimRouter
    from daemon.admission.admin_limit import AdminWriteLimiter
    from daemon.admission.budget_gate import BudgetGate
    from daemon.admission.door import Door
    from daemon.admission.doorbell import Doorbell
    from daemon.admission.limit_free import LimitFree
    from daemon.admission.pipeline import Admission
    from daemon.admission.policies import Policies
    from daemon.admission.quotas import Quotas
    from daemon.config import Config
    from daemon.metrics import Metrics
    from daemon.session import Authenticator
    from daemon.store.database import GroupCommit
    from daemon.store.interface import JobRow, Store
    from daemon.store.reachability import Reachability


class Services(Protocol):
    """The daemon's services as the verbs, transports and board use them."""

    #: The running config (replaced at each reload).
    config: Config
    clock: Clock
    auth: Authenticator
    #: The committer: every write runs through it, in group transactions.
    writer: GroupCommit
    store: Store
    #: Whether the database answers (``/healthz``'s ``database`` section).
    database: Reachability
    admission: Admission
    #: Which writes decide no limit (share mode on PostgreSQL).
    limit_free: LimitFree
    door: Door
    quotas: Quotas
    policies: Policies
    budget_gate: BudgetGate
    admin_writes: AdminWriteLimiter
    budgets: Budgets
    namespaces: Namespaces
    counts: QueueCounts
    router: ClaimRouter
    #: Rings waiting claims; on PostgreSQL also the other daemons.
    doorbell: Doorbell
    ids: IdMint
    metrics: Metrics
    history: History
    #: Running jobs' rows by id (the transition step keeps it).
    running: dict[str, JobRow]
    known_queues: set[tuple[str, str]]
    draining: bool
    on_drain: list[Callable[[], None]]

    def job_wire(self, row: JobRow, now_ms: int | None = None) -> dict[str, Any]:
        """The job object of ``row`` with its derived ``admission``."""

    def version_info(self) -> dict[str, object]:
        """The ``daemon`` part of ``status``."""

    def health_problems(self) -> list[str]:
        """What ``/healthz`` reports as degraded."""
