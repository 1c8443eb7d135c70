"""Per-daemon metrics: values that differ between the daemons sharing a database.

Each series carries a ``daemon`` label, the daemon's name (``[daemon] name``,
else the host's name): one value per process, stable across its restarts, so
summing or comparing daemons in one query works and the series count stays
bounded. The roles are fixed by the code (``retention`` today).

- ``sluicegate_leader{role,daemon}``: 1 while this daemon holds the role, else 0;
- ``sluicegate_pg_pool_size``, ``_in_use``, ``_max_size`` ``{daemon}``: the
  PostgreSQL pool's connections (PostgreSQL only);
- ``sluicegate_notify_listening{daemon}``: 1 while the LISTEN connection is up
  (PostgreSQL only; else doorbells from other daemons come by the 1 s poll);
- ``sluicegate_notify_lag_seconds{daemon}`` (a histogram, in
  :class:`~daemon.metrics.Metrics`): publish-to-receipt time of notices.

The gauges read each source's ``statistics()`` at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class RoleStatistics(Protocol):
    """What the leader gauge reads of a role's actor's ``statistics()``."""

    @property
    def leading(self) -> bool:
        """Whether this daemon holds the role now."""


class RoleActor(Protocol):
    """An actor that holds a role on one daemon at a time
    (:class:`actors.retention.RetentionLeader`)."""

    def statistics(self) -> RoleStatistics:
        """A snapshot."""


class PoolStatistics(Protocol):
    """A snapshot of the PostgreSQL pool (:class:`daemon.store.pg_opening.PoolStatistics`)."""

    @property
    def size(self) -> int:
        """Connections open."""

    @property
    def in_use(self) -> int:
        """Connections lent out now."""

    @property
    def max_size(self) -> int:
        """The most the pool opens (``database_pool_size``)."""


class NoticeStatistics(Protocol):
    """A snapshot of the cross-daemon doorbell
    (:class:`daemon.store.pg_notify.NoticeStatistics`)."""

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up."""


class DaemonGauges(Collector):
    """The per-daemon gauges, one collector on the daemon's registry."""

    def __init__(self, daemon: str) -> None:
        self.daemon = daemon
        self._roles: dict[str, RoleActor] = {}
        #: The pool's ``statistics`` (PostgreSQL only).
        self.pool: Callable[[], PoolStatistics] | None = None
        #: The cross-daemon doorbell's ``statistics`` (PostgreSQL only).
        self.notices: Callable[[], NoticeStatistics] | None = None

    def add_role(self, role: str, actor: RoleActor) -> None:
        """Report whether this daemon holds ``role``, from ``actor``."""
        self._roles[role] = actor

    def collect(self) -> Iterator[GaugeMetricFamily]:
        leader = GaugeMetricFamily(
            "sluicegate_leader", "1 while this daemon holds the role, else 0.",
            labels=["role", "daemon"],
        )  # fmt: skip
        for role, actor in sorted(self._roles.items()):
            leader.add_metric([role, self.daemon], int(actor.statistics().leading))
        yield leader
        if self.pool is not None:
            pool = self.pool()
            for name, text, value in (
                ("size", "PostgreSQL connections this daemon's pool holds open.", pool.size),
                ("in_use", "PostgreSQL connections of the pool in use now.", pool.in_use),
                ("max_size", "The most connections the pool opens (database_pool_size).",
                 pool.max_size),
            ):  # fmt: skip
                family = GaugeMetricFamily(f"sluicegate_pg_pool_{name}", text, labels=["daemon"])
                family.add_metric([self.daemon], value)
                yield family
        if self.notices is not None:
            listening = GaugeMetricFamily(
                "sluicegate_notify_listening",
                "1 while the LISTEN connection for other daemons' doorbells is up, else 0 "
                "(then they come by the 1 s poll).",
                labels=["daemon"],
            )
            listening.add_metric([self.daemon], int(self.notices().listening))
            yield listening
