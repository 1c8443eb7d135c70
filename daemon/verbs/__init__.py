"""Every verb, registered in :data:`daemon.verbs.table.VERBS` on import."""

from daemon.verbs import budgets, dead, fast_args, producing, queues, reading, working  # noqa: F401
from daemon.verbs.table import VERBS, Call, Verb

__all__ = ["VERBS", "Call", "Verb"]
