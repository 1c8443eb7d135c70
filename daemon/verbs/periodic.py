"""Periodic jobs: ``periodic_list`` (grant ``manage``), and how a fire enqueues.

The entries come from the config file (``[[periodic]]``); a caller sees only
its own namespace's, and only those on queues in its token's scope.
:func:`fire_enqueue` is what the composition root hands the
:class:`~daemon.periodic.PeriodicScheduler`: a fire enqueues through
:func:`~daemon.verbs.producing.enqueue_write`, as actor ``periodic`` in the
entry's namespace, like any producer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from daemon import periodic
from daemon.config import PeriodicConfig
from daemon.session import Session
from daemon.store.interface import Tx
from daemon.verbs.producing import EnqueueArgs, enqueue_write
from daemon.verbs.table import Call, NoArgs, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services


@verb("periodic_list", ("manage",), NoArgs, manage=True)
def periodic_list(core: Services, call: Call, _a: NoArgs) -> Plan:
    """The namespace's periodic entries, their schedules and next fire times."""
    now = core.clock.now_ms()
    entries = [
        periodic.describe(
            entry, periodic.stored(core.store.settings, periodic.settings_key(entry)), now
        )
        for entry in core.config.periodic
        if entry.namespace == call.namespace and call.session.in_scope(entry.queue)
    ]
    return answer_now({"periodic": entries})


def fire_enqueue(core: Services) -> periodic.Enqueue:
    """The enqueue of periodic fires: the entry's job, ready at its slot."""

    def enqueue(entry: PeriodicConfig, slot_ms: int) -> Callable[[Tx], list[dict[str, Any]]]:
        return enqueue_write(core, _call(entry), [_job(entry, slot_ms)])

    return enqueue


def _call(entry: PeriodicConfig) -> Call:
    return Call(Session(namespace=entry.namespace, token_name=periodic.ACTOR), entry.namespace)


def _job(entry: PeriodicConfig, slot_ms: int) -> EnqueueArgs:
    options: dict[str, Any] = {
        k: v
        for k, v in (("priority", entry.priority), ("max_attempts", entry.max_attempts),
                     ("lease_ms", entry.lease_ms))
        if v is not None
    }  # fmt: skip
    return EnqueueArgs(entry.queue, entry.type, entry.payload, ready_at=slot_ms, **options)
