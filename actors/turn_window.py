"""The last 40 turns, kept within 1 of every member's weighted share.

A member of weight ``w`` among members weighing ``W`` in all is owed
``share = 40 * w / W`` of any 40 consecutive turns. Credits alone (smooth
weighted round robin, :mod:`actors.turns`) keep the *cumulative* count of
each member within about 1 of its share of all turns, so a run of 40, the
difference of two cumulative counts, may be off by nearly 2 (weights 3, 5, 1,
3, 3, 2, 2, 1, 5, 6 reach 1.74). This window adds the rule that makes it 1:

- every member's count in the last 40 turns stays within
  ``[lo, hi] = [max(0, ceil(share - 1)), floor(share + 1)]``;
- once 40 turns are recorded, the next turn replaces the oldest, ``b``: it may
  go to ``b`` again (the counts stay as they are, so this is always
  possible), or to a member below ``hi`` when ``b`` stays at ``lo`` or above
  without it; when ``b`` would drop below ``lo``, it *must* go to ``b``;
- while fewer than 40 are recorded (after the members changed), a turn may go
  to a member below ``hi``, and must go to one below ``lo`` when the turns
  left in the first 40 are just enough to lift every member to its ``lo``.

Such counts exist since the shares add up to 40 (sum of ``lo`` <= 40 <= sum
of ``hi``), and the rule never leaves no choice, so every run of 40 turns
taken while the members stay the same is within 1 of each share (strictly
below 1 when the share is not a whole number). Among the members the rule
allows, credits choose, so the long run follows the weights. The record
starts again when a member joins or leaves (the shares change) and when a
caller refuses every member the rule allows (a cap, a reservation): then the
turn goes as credits say and the 40 after it are kept within 1 again.

Only members with turns in the record have counts: at most 40, whatever the
number of members; the total ``lo`` of the others comes from the number of
members of each weight.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping

#: The run of turns kept within 1 of every share.
WINDOW = 40


class TurnWindow:
    """The members' counts in the last :data:`WINDOW` turns since the members changed."""

    def __init__(self, length: int = WINDOW) -> None:
        self.length = length
        #: The members' total weight the bounds are of.
        self.total = 0
        self._takers: deque[str] = deque()
        self._seen: Counter[str] = Counter()
        self._weight: dict[str, int] = {}
        #: Turns still needed, in the first ``length``, to lift members to ``lo``.
        self._short = 0

    def reset(self, total: int, sizes: Mapping[int, int]) -> None:
        """Start again for members weighing ``total`` in all, ``sizes[w]`` of weight ``w``."""
        self.total = total
        self._takers.clear()
        self._seen.clear()
        self._weight.clear()
        self._short = sum(n * self.bounds(w)[0] for w, n in sizes.items()) if total else 0

    def bounds(self, weight: int) -> tuple[int, int]:
        """``(lo, hi)``: the counts a member of ``weight`` may have in a full window."""
        share, total = self.length * weight, self.total
        return max(0, -((total - share) // total)), (share + total) // total

    @property
    def full(self) -> bool:
        return len(self._takers) >= self.length

    def forced(self) -> str | None:
        """The member the next turn must go to (the oldest in a full window, when
        it would drop below its ``lo``), or None."""
        if not self.full:
            return None
        oldest = self._takers[0]
        return oldest if self._seen[oldest] - 1 < self.bounds(self._weight[oldest])[0] else None

    def tight(self) -> bool:
        """While filling: whether the next turn must lift a member below its ``lo``."""
        n = len(self._takers)
        return n < self.length and self._short > self.length - n - 1

    def fits(self, member: str, weight: int) -> bool:
        """Whether ``member`` may take the next turn (when none is forced)."""
        seen = self._seen.get(member, 0)
        lo, hi = self.bounds(weight)
        if self.full:
            return seen < hi or member == self._takers[0]
        return seen < hi and (seen < lo or not self.tight())

    def took(self, member: str, weight: int) -> None:
        """``member`` took a turn."""
        seen = self._seen
        if self.full:
            oldest = self._takers.popleft()
            seen[oldest] -= 1
            if not seen[oldest]:
                del seen[oldest]
                del self._weight[oldest]
        elif seen.get(member, 0) < self.bounds(weight)[0]:
            self._short -= 1
        self._takers.append(member)
        seen[member] += 1
        self._weight[member] = weight
