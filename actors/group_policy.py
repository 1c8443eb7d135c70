"""The group fields of a queue policy (docs/fairness.md): fairness, weights,
per-group caps and guaranteed minimums.

A job may carry a ``group`` (a customer, a tenant); the default group is
``""``. A policy may then say how a queue's claims are shared among its
groups:

- ``fairness``: ``"fifo"`` (the default: claim order, whatever the group) or
  ``"round_robin"`` (the groups with claimable jobs take turns; ``weights`` and
  ``default_weight`` give each a share of claims in proportion to its weight);
- ``max_in_flight_per_group`` caps every group, ``group_limits`` names others;
- ``min_in_flight`` reserves slots of ``max_in_flight`` for named groups; a
  reservation not in use is lent to any group (:mod:`actors.group_ring`).

Pure model and parsing; the live numbers are :class:`~actors.group_ring.GroupRing`'s.
"""

from __future__ import annotations

from typing import Any

import attrs

from actors.errors import invalid
from actors.limits import GROUP_RULE, valid_group

#: The fields a policy document may carry for groups, in wire order.
GROUP_FIELDS = (
    "fairness", "weights", "default_weight", "max_in_flight_per_group", "group_limits",
    "min_in_flight",
)  # fmt: skip
FAIRNESS = ("fifo", "round_robin")
#: The largest weight, and the most groups a policy's maps may name.
MAX_WEIGHT = 10_000
MAX_NAMED_GROUPS = 1_000
MAX_GROUP_LIMIT = 10_000


@attrs.frozen
class GroupPolicy:
    """A policy's group settings (absent fields: today's behaviour)."""

    fairness: str = "fifo"
    weights: dict[str, int] = attrs.field(factory=dict)
    default_weight: int = 1
    max_in_flight_per_group: int | None = None
    group_limits: dict[str, int] = attrs.field(factory=dict)
    min_in_flight: dict[str, int] = attrs.field(factory=dict)

    @property
    def round_robin(self) -> bool:
        return self.fairness == "round_robin"

    @property
    def counts_groups(self) -> bool:
        """Whether the queue's claims depend on groups at all."""
        return (
            self.round_robin or self.max_in_flight_per_group is not None
            or bool(self.group_limits) or any(self.min_in_flight.values())
        )  # fmt: skip

    def weight(self, group: str) -> int:
        return self.weights.get(group, self.default_weight)

    def cap(self, group: str) -> int | None:
        """The most jobs of ``group`` in flight at once (None: no cap)."""
        return self.group_limits.get(group, self.max_in_flight_per_group)

    def to_dict(self) -> dict[str, Any]:
        """The fields on the wire (every one, defaults included)."""
        return {
            "fairness": self.fairness, "weights": dict(self.weights),
            "default_weight": self.default_weight,
            "max_in_flight_per_group": self.max_in_flight_per_group,
            "group_limits": dict(self.group_limits), "min_in_flight": dict(self.min_in_flight),
        }  # fmt: skip


NO_GROUPS = GroupPolicy()


def _int(field: str, value: Any, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise invalid(field, f"{field} must be an integer from {lo} to {hi}")
    return value


def _group_map(field: str, value: Any, lo: int, hi: int) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(field, f"{field} is an object {{group: integer}}")
    if len(value) > MAX_NAMED_GROUPS:
        raise invalid(field, f"{field} names at most {MAX_NAMED_GROUPS} groups")
    out = {}
    for group, n in value.items():
        if group != "" and not valid_group(group):
            raise invalid(field, f'{field}: a group is {GROUP_RULE}, or "" (the default group)')
        out[group] = _int(f"{field}.{group}", n, lo, hi)
    return dict(sorted(out.items()))


def parse_group_policy(doc: dict[str, Any], max_in_flight: int | None) -> GroupPolicy:
    """The group fields of a policy document; ``invalid_argument`` naming the first bad one."""
    fairness = doc.get("fairness")
    if fairness is None:
        fairness = "fifo"
    if fairness not in FAIRNESS:
        raise invalid("fairness", 'fairness must be "fifo" or "round_robin"')
    default_weight = doc.get("default_weight")
    default_weight = 1 if default_weight is None else default_weight
    default_weight = _int("default_weight", default_weight, 1, MAX_WEIGHT)
    weights = _group_map("weights", doc.get("weights"), 1, MAX_WEIGHT)
    per_group = doc.get("max_in_flight_per_group")
    if per_group is not None:
        per_group = _int("max_in_flight_per_group", per_group, 0, MAX_GROUP_LIMIT)
    limits = _group_map("group_limits", doc.get("group_limits"), 0, MAX_GROUP_LIMIT)
    minimums = _group_map("min_in_flight", doc.get("min_in_flight"), 0, MAX_GROUP_LIMIT)
    if any(minimums.values()):
        if max_in_flight is None:
            raise invalid("min_in_flight", "min_in_flight reserves slots of max_in_flight: set it")
        total = sum(minimums.values())
        if total > max_in_flight:
            raise invalid(
                "min_in_flight",
                f"min_in_flight reserves {total} slots in all, more than max_in_flight "
                f"{max_in_flight}",
            )
    return GroupPolicy(fairness, weights, default_weight, per_group, limits, minimums)
