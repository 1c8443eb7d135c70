"""Periodic jobs: ``periodic_list`` (grant ``manage``).

The entries come from the config file (``[[periodic]]``); a caller sees only
its own namespace's, and only those on queues in its token's scope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon import periodic
from daemon.verbs.table import Call, NoArgs, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.core import Core


@verb("periodic_list", ("manage",), NoArgs, manage=True)
def periodic_list(core: Core, call: Call, _a: NoArgs) -> Plan:
    """The namespace's periodic entries, their schedules and next fire times."""
    now = core.clock.now_ms()
    entries = [
        periodic.describe(entry, periodic.stored(core.conn, periodic.settings_key(entry)), now)
        for entry in core.config.periodic
        if entry.namespace == call.namespace and call.session.in_scope(entry.queue)
    ]
    return answer_now({"periodic": entries})
