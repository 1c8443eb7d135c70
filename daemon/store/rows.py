"""The records the store speaks in: :class:`JobRow`, and its wire form.

A job crosses the store boundary as a frozen ``JobRow`` with named fields
(river's ``JobRow``): the verbs, admission and the core read ``row.state``,
never a column number, and know nothing of how a store lays the row out.

``JobRow`` is a ``NamedTuple``, not an attrs class: measured on this machine
(Python 3.11), making one from a fetched row costs about 0.3 µs against 2.5 µs
for a frozen, slotted attrs class with 22 fields, and a changed copy 0.4 µs
against 4.7 µs (``attrs.evolve``); reading a field costs the same. A claim of
100 jobs makes 200 rows, so that difference would show in the claim's p50.
Being a tuple, a row also compares equal to the same values read back.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import orjson

from actors.bindings import costs_wire


class JobRow(NamedTuple):
    """One job as stored. Instants are integer ms since the epoch; ``payload``,
    ``budgets``, ``result`` and ``dead`` are compact JSON text (or None)."""

    id: str
    namespace: str
    queue: str
    type: str
    payload: str
    priority: int
    state: str
    attempts: int
    max_attempts: int
    lease_ms: int
    ready_at: int
    created_at: int
    updated_at: int
    finished_at: int | None
    lease: str | None
    lease_expires_at: int | None
    unique_key: str | None
    budgets: str | None
    error: str | None
    result: str | None
    dead: str | None
    parked_on: str | None
    #: The job's fairness group (``group`` on the wire): None, or ``''`` in a
    #: queue that counts groups, is the default group.
    grp: str | None = None


#: The fields in stored order.
FIELDS: tuple[str, ...] = JobRow._fields

#: ``as_row(values)``: a JobRow of 23 values in :data:`FIELDS` order (a fetched
#: row or a list), without the keyword-argument call ``JobRow(...)`` costs.
as_row: Any = partial(tuple.__new__, JobRow)


def dumps(value: Any) -> str:
    """Compact JSON text, as stored and as measured for size caps."""
    return orjson.dumps(value).decode()


_UNSET: Any = object()
_parse = orjson.loads


def to_wire(row: JobRow, payload: Any = _UNSET) -> dict[str, Any]:
    """The job object of PROTOCOL.md for one row (``admission`` added by callers).

    ``payload``, when the caller still holds it decoded, saves parsing it again.
    """
    # One unpacking reads the 23 fields for less than 22 named (or indexed)
    # reads of a tuple subclass: the hot path of every answer (bench/inprocess.py).
    (job_id, namespace, queue, job_type, stored, priority, state, attempts, max_attempts,
     lease_ms, ready_at, created_at, updated_at, finished_at, lease, lease_expires_at,
     unique_key, budgets, error, result, dead, _parked_on, grp) = row  # fmt: skip
    bound, costs = ([], []) if budgets is None else costs_wire(budgets)
    return {
        "id": job_id,
        "namespace": namespace,
        "queue": queue,
        "type": job_type,
        "payload": _parse(stored) if payload is _UNSET else payload,
        "priority": priority,
        "status": state,
        "attempts": attempts,
        "max_attempts": max_attempts,
        "lease_ms": lease_ms,
        "ready_at": ready_at,
        "created_at": created_at,
        "updated_at": updated_at,
        "finished_at": finished_at,
        "lease": lease,
        "lease_expires_at": lease_expires_at,
        "budgets": bound,
        "costs": costs,
        "unique_key": unique_key,
        "group": grp or None,  # '': the default group of a queue counting groups
        "error": error,
        "result": None if result is None else _parse(result),
        "dead": None if dead is None else _parse(dead),
        "admission": None,
    }
