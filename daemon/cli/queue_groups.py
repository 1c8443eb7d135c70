"""The group options of ``sluice queue budget set`` (docs/fairness.md).

``--fairness fifo|round_robin``, ``--weight GROUP=W`` (repeatable),
``--default-weight W``, ``--per-group N`` (``max_in_flight_per_group``),
``--group-limit GROUP=N`` and ``--min-in-flight GROUP=N`` (repeatable). The
CLI refuses itself (exit 2, naming the option) a malformed ``GROUP=N`` or a
group named twice; the daemon checks the rest (a reservation over
``max_in_flight``: exit 1, ``invalid_argument``).
"""

from __future__ import annotations

import argparse
from typing import Any

from actors.group_policy import MAX_GROUP_LIMIT, MAX_WEIGHT
from actors.limits import valid_group
from daemon.cli.context import UsageError
from daemon.cli.jobs import int_range

#: argparse dest -> policy field, for the options of one value
SCALARS = {
    "fairness": "fairness", "default_weight": "default_weight",
    "per_group": "max_in_flight_per_group",
}  # fmt: skip
#: option -> (policy field, least value, greatest value)
MAPS = {
    "--weight": ("weights", 1, MAX_WEIGHT),
    "--group-limit": ("group_limits", 0, MAX_GROUP_LIMIT),
    "--min-in-flight": ("min_in_flight", 0, MAX_GROUP_LIMIT),
}


def add_group_options(parser: argparse.ArgumentParser) -> None:
    """The group options of ``queue budget set``."""
    parser.add_argument("--fairness", choices=("fifo", "round_robin"),
                        help="claim order among the queue's groups (default fifo)")  # fmt: skip
    parser.add_argument("--weight", action="append", metavar="GROUP=W",
                        help="a group's weight under round_robin (repeatable)")  # fmt: skip
    parser.add_argument("--default-weight", type=int_range(1, MAX_WEIGHT), metavar="W",
                        help="the weight of groups not named by --weight (default 1)")  # fmt: skip
    parser.add_argument("--per-group", type=int_range(0, MAX_GROUP_LIMIT), metavar="N",
                        help="max_in_flight_per_group: jobs in flight per group")  # fmt: skip
    parser.add_argument("--group-limit", action="append", metavar="GROUP=N",
                        help="a named group's own in-flight cap (repeatable)")  # fmt: skip
    parser.add_argument("--min-in-flight", action="append", metavar="GROUP=N",
                        help="slots of --max-in-flight reserved for a group, lent while it "
                        "is idle (repeatable)")  # fmt: skip


def group_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The group fields ``set`` sends (none given: none); exit 2 naming the option."""
    fields: dict[str, Any] = {
        field: getattr(args, dest) for dest, field in SCALARS.items()
        if getattr(args, dest) is not None
    }  # fmt: skip
    for option, (field, lo, hi) in MAPS.items():
        pairs = getattr(args, option[2:].replace("-", "_"))
        if pairs:
            fields[field] = group_pairs(option, pairs, lo, hi)
    return fields


def group_pairs(option: str, pairs: list[str], lo: int, hi: int,
           command: str = "queue budget set") -> dict[str, int]:  # fmt: skip
    """``GROUP=N`` options as a map; exit 2 naming ``command`` and ``option``."""
    out: dict[str, int] = {}
    for pair in pairs:
        group, sep, number = pair.rpartition("=")
        if not sep or not (group == "" or valid_group(group)):
            raise UsageError(f"{command}: {option} takes GROUP=N, got {pair!r}")
        if not number.isdigit() or not lo <= int(number) <= hi:
            raise UsageError(f"{command}: {option} {group}=N: N must be {lo}-{hi}, "
                             f"got {number!r}")  # fmt: skip
        if group in out:
            raise UsageError(f"{command}: {option} names group {group!r} twice")
        out[group] = int(number)
    return out


def describe_groups(policy: dict[str, Any]) -> list[str]:
    """The group settings of a policy, as parts of its one-line description."""
    parts = []
    if policy.get("fairness") == "round_robin":
        weights = policy.get("weights") or {}
        named = ", ".join(f"{g}={w}" for g, w in weights.items())
        others = policy.get("default_weight", 1)
        parts.append("round robin" + (f" (weights {named}; others {others})" if named else ""))
    if policy.get("max_in_flight_per_group") is not None:
        parts.append(f"{policy['max_in_flight_per_group']} in flight per group")
    for field, label in (("group_limits", "group limits"), ("min_in_flight", "reserved")):
        if policy.get(field):
            parts.append(f"{label} " + ", ".join(f"{g}={n}" for g, n in policy[field].items()))
    return parts
