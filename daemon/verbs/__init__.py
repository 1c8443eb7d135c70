"""Every verb, registered in :data:`daemon.verbs.table.VERBS` on import."""

from daemon.verbs import (  # noqa: F401
    audit,
    budget_pause,
    budgets,
    dead,
    explain,
    periodic,
    policies,
    producing,
    queues,
    quotas,
    reading,
    what_if,
    working,
)
from daemon.verbs.table import VERBS, Call, Verb

__all__ = ["VERBS", "Call", "Verb"]
