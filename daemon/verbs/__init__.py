"""Every verb, registered in :data:`daemon.verbs.table.VERBS` on import."""

from daemon.verbs import budgets, dead, producing, queues, quotas, reading, working  # noqa: F401
from daemon.verbs.table import VERBS, Call, Verb

__all__ = ["VERBS", "Call", "Verb"]
