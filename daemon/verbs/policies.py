"""Queue admission policies (seed 002 REQ-10): ``policy_get``, ``policy_set``,
``policy_clear``, ``policy_list`` and the workers' read-only ``admission_status``.

Management is for a ``manage`` token, or one granted ``set_admission_policy``
/ ``clear_admission_policy`` (never a default grant) for queues in its scope;
a queue the caller may not manage reads as absent (``not_found``). Every write
is audited (target kind ``queue``) and limited per token to 1 a second, burst
10. A policy provisioned by the config file is read-only here (``conflict``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors import lending
from actors import lifecycle as lc
from actors.budget import BudgetSpec, Strategy, TokenPool
from actors.errors import Refused, not_found
from actors.namespace import retry_after_s
from actors.policy import PolicyState, parse_policy
from daemon.store.interface import Tx
from daemon.verbs.args import name
from daemon.verbs.table import ANY, Call, NoArgs, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services

#: Policy writes per token: 1 a second, a burst of 10 (seed 002, Security).
WRITE_RATE = BudgetSpec(1, Strategy("time_based", 1000, 10))
_UNSET: Any = object()


@attrs.frozen
class QueueArgs:
    queue: str = attrs.field(validator=name)


@attrs.frozen
class PolicySetArgs:
    queue: str = attrs.field(validator=name)
    max_in_flight: Any = _UNSET
    max_claims_per_window: Any = _UNSET
    window: Any = _UNSET
    windows: Any = _UNSET
    # The group fields (actors.group_policy; docs/fairness.md).
    fairness: Any = _UNSET
    weights: Any = _UNSET
    default_weight: Any = _UNSET
    max_in_flight_per_group: Any = _UNSET
    group_limits: Any = _UNSET
    min_in_flight: Any = _UNSET
    #: False: shadow mode (docs/rollout.md).
    enforce: Any = _UNSET

    def fields(self) -> dict[str, Any]:
        # Not recursing: a value is the caller's raw document, checked by
        # parse_policy; recursing rebuilds tuples in it (a msgpack ExtType, found
        # by the fuzzer: tests/fuzz/crashers/args-windows-ext-period).
        return {
            k: v
            for k, v in attrs.asdict(self, recurse=False).items()
            if k != "queue" and v is not _UNSET
        }


@attrs.frozen
class StatusArgs:
    queue: str | None = attrs.field(default=None, validator=name)


def _managed(core: Services, call: Call, queue: str) -> PolicyState | None:
    """The queue's policy state if the caller may manage the queue; a queue outside
    its scope is ``not_found``, the same as a queue without a policy."""
    if not call.session.in_scope(queue):
        raise not_found(f"policy of queue {queue!r}")
    return core.policies.get(call.namespace, queue)


def _limit_writes(core: Services, call: Call, now_ms: int) -> None:
    limits: dict[tuple[str, str], TokenPool] = core.policies.write_limits
    key = (call.namespace, call.actor)
    pool = limits.get(key)
    if pool is None:
        pool = limits[key] = TokenPool(WRITE_RATE, now_ms)
    if not pool.debit(1, now_ms):
        at = pool.eligible_at(1, now_ms) or now_ms + 1000
        raise Refused(
            "rate_limited", "policy writes are limited to 1 a second (burst 10) per token",
            limit="policy_writes", retry_after=retry_after_s(at - now_ms),
        )  # fmt: skip


def _read_only(state: PolicyState | None, queue: str) -> None:
    if state is not None and state.source == "config":
        raise Refused("conflict", f"the policy of queue {queue!r} is managed by config file")


@verb("policy_get", ("manage", "set_admission_policy", "clear_admission_policy"), QueueArgs)
def policy_get(core: Services, call: Call, a: QueueArgs) -> Plan:
    """A queue's policy; ``not_found`` when it has none or is not the caller's."""
    state = _managed(core, call, a.queue)
    if state is None:
        raise not_found(f"policy of queue {a.queue!r}")
    return answer_now({"policy": core.policies.describe_policy(state)})


@verb("policy_list", ("manage", "set_admission_policy", "clear_admission_policy"), NoArgs)
def policy_list(core: Services, call: Call, _a: NoArgs) -> Plan:
    """Every policy of the namespace in the caller's scope, by queue."""
    states = [
        s for (ns, queue), s in sorted(core.policies.states.items())
        if ns == call.namespace and call.session.in_scope(queue)
    ]  # fmt: skip
    return answer_now({"policies": [core.policies.describe_policy(s) for s in states]})


@verb("policy_set", ("manage", "set_admission_policy"), PolicySetArgs)
def policy_set(core: Services, call: Call, a: PolicySetArgs) -> Plan:
    """Create or replace a queue's policy; in force at the next claim."""
    policy = parse_policy(a.fields())
    old = _managed(core, call, a.queue)
    _read_only(old, a.queue)
    _limit_writes(core, call, core.clock.now_ms())

    def write(tx: Tx) -> dict[str, Any]:
        state = core.policies.put(tx, call.namespace, a.queue, policy, call.actor)
        return {"policy": core.policies.describe_policy(state)}

    return Plan(write)


@verb("policy_clear", ("manage", "clear_admission_policy"), QueueArgs)
def policy_clear(core: Services, call: Call, a: QueueArgs) -> Plan:
    """Remove a queue's policy; ``not_found`` when it has none."""
    if _managed(core, call, a.queue) is None:
        raise not_found(f"policy of queue {a.queue!r}")
    _read_only(core.policies.get(call.namespace, a.queue), a.queue)
    _limit_writes(core, call, core.clock.now_ms())

    def write(tx: Tx) -> dict[str, Any]:
        if core.policies.get(call.namespace, a.queue) is None:
            raise not_found(f"policy of queue {a.queue!r}")
        core.policies.clear(tx, call.namespace, a.queue, call.actor)
        return {}

    return Plan(write)


@verb("admission_status", ANY, StatusArgs)
def admission_status(core: Services, call: Call, a: StatusArgs) -> Plan:
    """Policy, usage and status of the caller's policy queues (seed 002 REQ-7)."""
    if a.queue is not None:
        call.scope(a.queue)  # out of scope: forbidden, revealing nothing
    now = core.clock.now_ms()
    out = []
    for (ns, queue), state in sorted(core.policies.states.items()):
        if ns != call.namespace or not call.session.in_scope(queue):
            continue
        if a.queue is not None and queue != a.queue:
            continue
        key = (ns, queue)
        status = core.policies.status(key, now)
        assert status is not None
        tight = state.tightest()  # the window fields: the one with the least room
        entry = {
            "queue": queue,
            "policy": core.policies.describe_policy(state),
            "in_flight": core.policies.running(key) + state.in_flight_delta,
            "used": tight.used if tight is not None else None,
            "window_start_at": tight.start if tight is not None else None,
            "window_resets_at": tight.end if tight is not None else None,
            "pending": core.counts.get(key, lc.PENDING),
            "status": status.to_dict(),
            **group_rows(state),
        }  # fmt: skip
        if state.policy is not None and state.policy.windows is not None:
            entry["windows"] = [m.to_dict() for m in state.meters]
        out.append(entry)
    return answer_now({"queues": out})


#: Groups ``admission_status`` lists per queue at most.
MAX_GROUPS_SHOWN = 1000


def group_rows(state: PolicyState) -> dict[str, Any]:
    """``admission_status``'s ``groups`` of a queue (by name, at most
    :data:`MAX_GROUPS_SHOWN`) and ``groups_truncated``: every group with jobs
    pending or in flight, and every group with a reservation (an idle one's is
    lent), each with ``lent``, the reserved slots other groups hold now."""
    ring = state.ring
    if ring is None:
        return {"groups": [], "groups_truncated": False}
    policy = ring.policy
    reserved = {g: n for g, n in policy.min_in_flight.items() if n > 0}
    names = sorted(set(ring.groups()) | reserved.keys())
    capacity = state.policy.max_in_flight if state.policy is not None else None
    lent = lending.lent(capacity, reserved, ring.in_flight) if capacity is not None else {}
    rows = [
        {"group": g or None, "pending": ring.pending.get(g, 0),
         "in_flight": ring.in_flight.get(g, 0), "reserved": reserved.get(g, 0),
         "lent": lent.get(g, 0), "weight": policy.weight(g)}
        for g in names[:MAX_GROUPS_SHOWN]
    ]  # fmt: skip
    return {"groups": rows, "groups_truncated": len(names) > MAX_GROUPS_SHOWN}
