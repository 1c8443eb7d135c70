"""Queues: ``queue_configure`` and ``queue_list`` (grant ``manage``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors.limits import MAX_DURATION_MS
from daemon.store.interface import Tx
from daemon.verbs.args import between, name
from daemon.verbs.reading import queue_rows
from daemon.verbs.table import Call, NoArgs, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services


@attrs.frozen
class QueueConfigureArgs:
    queue: str = attrs.field(validator=name)
    # Not positive: the daemon default; else at most MAX_DURATION_MS.
    completed_ttl_ms: int | None = attrs.field(
        default=None, validator=between(-MAX_DURATION_MS, MAX_DURATION_MS)
    )
    dead_ttl_ms: int | None = attrs.field(
        default=None, validator=between(-MAX_DURATION_MS, MAX_DURATION_MS)
    )


def _ttl(value: int | None) -> int | None:
    # Absent or not positive means the daemon default (PROTOCOL.md, Queues).
    return value if value is not None and value > 0 else None


@verb("queue_configure", ("manage",), QueueConfigureArgs, manage=True)
def queue_configure(core: Services, call: Call, a: QueueConfigureArgs) -> Plan:
    """Create a queue or set its retention TTLs."""
    call.scope(a.queue)
    namespace = call.namespace
    core.door.new_queues(namespace, {a.queue})
    core.door.retention(
        namespace, {"completed_ttl_ms": a.completed_ttl_ms, "dead_ttl_ms": a.dead_ttl_ms}
    )

    def write(tx: Tx) -> dict[str, Any]:
        before = tx.store.queues.get(namespace, a.queue)
        queue = tx.store.queues.configure(
            namespace, a.queue, _ttl(a.completed_ttl_ms), _ttl(a.dead_ttl_ms), tx.now_ms
        )
        tx.store.audit.record(
            at=tx.now_ms, actor=call.session.token_name or "open", namespace=namespace,
            target_kind="queue", target=a.queue,
            action="create" if before is None else "update",
            before=None if before is None else
            {"queue": a.queue, "completed_ttl_ms": before[0], "dead_ttl_ms": before[1]},
            after=queue,
        )  # fmt: skip
        tx.after(lambda: core.known_queues.add((namespace, a.queue)))
        return queue

    return Plan(write, lambda queue: {"queue": queue})


@verb("queue_list", ("manage",), NoArgs, manage=True)
def queue_list(core: Services, call: Call, _a: NoArgs) -> Plan:
    """Every queue of the namespace with its counts."""
    rows = queue_rows(core, call)
    return answer_now(
        {
            "queues": [
                {
                    "queue": r["queue"],
                    "scheduled": r["scheduled"],
                    "pending": r["pending"],
                    "running": r["running"],
                    "dead": r["dead"],
                    "policy": None,
                }
                for r in rows
            ]
        }
    )
