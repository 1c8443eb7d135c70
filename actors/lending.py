"""Reservations that lend: the one rule behind a policy's ``min_in_flight`` and a
``while_in_flight`` budget's ``reserve`` (docs/fairness.md).

A capacity (a queue's ``max_in_flight`` slots, a budget's ``allocation``
tokens) reserves part of itself for named groups. A group with work and less
in flight than its reservation is *owed* the difference; the rest of the
capacity is anyone's, and so is a reservation nobody is owed (it is *lent*).

- an owed group may take what is free;
- any other group may take ``cost`` only while what stays free covers what
  every group is owed, so the next units that free up go to the owed groups;
- nothing running is revoked.

Pure: counts in, answers out.
"""

from __future__ import annotations

from collections.abc import Mapping

RESERVED = "reserved_for_other_groups"


def owed(reserved: int, in_flight: int, has_work: bool) -> int:
    """What a group's reservation still claims now (nothing without work)."""
    return max(0, reserved - in_flight) if reserved and has_work else 0


def held_back(own_owed: int, free: int, cost: int, owed_total: int) -> bool:
    """Whether a group owed ``own_owed`` may not take ``cost`` of ``free`` units
    because other groups are owed them (``owed_total``: what every group is owed)."""
    return own_owed <= 0 and free - cost < owed_total


def lent(
    capacity: int, reserved: Mapping[str, int], in_flight: Mapping[str, int]
) -> dict[str, int]:
    """The reserved units other groups are using now, per reserving group.

    A reserving group's *idle* reservation is ``reserved - in_flight`` (when
    positive). The units the groups hold beyond their own reservations add up
    to at most the unreserved capacity plus the idle reservations; what they
    hold beyond the unreserved capacity is lent, and it is counted against the
    idle reservations in the groups' name order (a whole number per group, the
    same answer for the same counts).
    """
    unreserved = capacity - sum(reserved.values())
    beyond = sum(max(0, n - reserved.get(g, 0)) for g, n in in_flight.items())
    over = max(0, beyond - max(0, unreserved))
    out: dict[str, int] = {}
    for group in sorted(reserved):
        idle = max(0, reserved[group] - in_flight.get(group, 0))
        take = min(idle, over)
        if take:
            out[group] = take
            over -= take
    return out
