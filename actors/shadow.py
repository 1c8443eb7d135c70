"""Shadow mode of a limit: the ``enforce`` flag and what a decision is called.

A budget, a queue policy or a namespace quota document with ``enforce:
false`` is *shadowed*: it is evaluated on every decision exactly as if it were
enforcing, its decisions are logged and counted, and it holds nothing back
(docs/rollout.md). Its own counters move as enforcement would move them:

- a **level** (jobs in flight, cost in flight, jobs waiting, jobs running)
  counts what really runs or waits, the jobs let through included, so that a
  shadowed ``max_in_flight`` of 2 with 5 jobs running says 3 too many;
- a **charge** (a window's claims, a ``time_based`` budget's tokens, the
  ``enqueue_rate`` bucket) is taken only by the jobs the limit would have
  admitted: a denial never debits (seed 001), so the jobs let through do not
  skew its later decisions and ``would_block`` counts exactly the jobs that
  enforcement would have held back.

Counted in ``sluicegate_admission_decisions_total{limit, outcome}``, with the
bounded ``limit`` values below and outcome ``allowed``, ``would_block``
(shadowed) or ``blocked`` (enforcing).
"""

from __future__ import annotations

from typing import Any

from actors.errors import invalid

ALLOWED = "allowed"
WOULD_BLOCK = "would_block"
BLOCKED = "blocked"

#: The ``limit`` label's values (never a key, a queue or a namespace).
QUOTA_PENDING = "quota.max_pending"
QUOTA_RATE = "quota.enqueue_rate"
QUOTA_RUNNING = "quota.max_running"
POLICY_WINDOW = "policy.window"
POLICY_IN_FLIGHT = "policy.in_flight"
POLICY_GROUP = "policy.group"
POLICY_PAUSED = "policy.paused"
BUDGET = "budget"

#: A policy queue's deferral reason -> the limit that holds it (a reason not
#: listed, ``admission_unavailable``, is a failure closed, not a limit's decision).
POLICY_LIMITS = {
    "window_exhausted": POLICY_WINDOW,
    "in_flight_full": POLICY_IN_FLIGHT,
    "paused": POLICY_PAUSED,
    "group_in_flight_cap": POLICY_GROUP,
    "reserved_for_other_groups": POLICY_GROUP,
}


def parse_enforce(value: Any, field: str = "enforce") -> bool:
    """The ``enforce`` flag: a boolean; null or absent is the default, ``true``."""
    if value is None:
        return True
    if type(value) is not bool:
        raise invalid(field, f"{field} must be true or false, got {value!r}")
    return value


def over(room: int | None, n: int) -> int:
    """How many of ``n`` jobs a limit with ``room`` left (None: no limit) would hold."""
    return 0 if room is None else max(0, n - room)
