"""Whose turn it is: weighted round robin over a changing set of groups.

Credits as in smooth weighted round robin (nginx's upstream balancer): at
each turn every member's credit grows by its weight, and the member that
takes the turn pays the members' total weight, so a member's credit is how
far its claims lag behind its weighted share. The turn goes to the member
*due soonest* among those owed one (credit > 0): the earliest deadline of its
next share, ``(total - credit) / weight`` turns away (earliest-deadline-first
with release times, the rule of WF2Q). Measured over every run of 40 turns,
a weight of 3 among four weights of 1 stays within 1 of its share this way,
and is off by 1.14 taking the most credit (tests/unit/test_turns.py holds
the first). Ties go to the member that joined first.

Done naively a turn costs one addition per member. Here members of equal
weight gain equally, so their order never changes between turns: each weight
class keeps a heap of its members by *base* credit (credit = base + weight x
turns so far; within a class the most credit is also the earliest due), and
a turn compares the heads of the classes only: it costs
``O(classes + log members)``, so a thousand groups of a few weights cost what
ten do.

A member joins with no credit, so an idle group earns nothing for having
been idle; one that leaves in debt (just served) gets its debt back if it
returns, so draining and refilling between turns skips no one. A member
passed over because it may not be served (at its cap, say) earns nothing
meanwhile either: its credit is held at zero at most.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from fractions import Fraction

from actors.turn_window import TurnWindow

#: Debts of departed members kept at most (a member that drains and refills
#: between two of its turns does not skip the queue).
LEFT_KEPT = 100_000


class Turns:
    """Smooth weighted round robin among members that come and go."""

    def __init__(self) -> None:
        #: Turns taken so far.
        self.turn = 0
        #: The members' total weight (what a turn costs its taker).
        self.total = 0
        #: member -> (weight, base credit, order of joining)
        self._members: dict[str, tuple[int, int, int]] = {}
        #: weight -> heap of (-base, order, member); entries whose base or order
        #: no longer match the member's are stale and dropped when met.
        self._classes: dict[int, list[tuple[int, int, str]]] = {}
        self._joined = 0
        #: Debts of members that left (bounded: cleared when full).
        self._left: dict[str, int] = {}
        #: Members per weight, and the last 40 turns (kept within 1 of each share).
        self._sizes: dict[int, int] = {}
        self.window = TurnWindow()

    def __contains__(self, member: str) -> bool:
        return member in self._members

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def credit(self, member: str) -> int:
        """A member's credit now (0 for one that is not a member)."""
        entry = self._members.get(member)
        return 0 if entry is None else entry[1] + entry[0] * self.turn

    def join(self, member: str, weight: int) -> None:
        """``member`` joins with the credit it left with, at most none (a member
        already in keeps its own)."""
        if member in self._members:
            return
        self._joined += 1
        self.total += weight
        credit = min(0, self._left.pop(member, 0))
        self._set(member, weight, credit - weight * self.turn, self._joined)
        self._resized(weight, 1)

    def leave(self, member: str) -> None:
        """``member`` leaves; a debt (negative credit) is kept for its return."""
        entry = self._members.pop(member, None)
        if entry is not None:
            self.total -= entry[0]
            self._resized(entry[0], -1)
            credit = entry[1] + entry[0] * self.turn
            if credit < 0:
                if len(self._left) >= LEFT_KEPT:
                    self._left.clear()
                self._left[member] = credit

    def _resized(self, weight: int, n: int) -> None:
        """A member of ``weight`` joined (1) or left (-1): the shares change."""
        left = self._sizes.get(weight, 0) + n
        if left > 0:
            self._sizes[weight] = left
        else:
            self._sizes.pop(weight, None)
        self.window.reset(self.total, self._sizes)

    def _set(self, member: str, weight: int, base: int, order: int) -> None:
        self._members[member] = (weight, base, order)
        heapq.heappush(self._classes.setdefault(weight, []), (-base, order, member))

    def next(self, passed_over: Callable[[str], bool]) -> str | None:
        """Take a turn: among the members ``passed_over`` does not refuse and the
        window allows (:mod:`actors.turn_window`), the one due soonest by credit
        (None, and no turn taken, when ``passed_over`` refuses every member)."""
        self.turn += 1
        members, window = self._members, self.window
        forced = window.forced()
        if forced is not None:
            if not passed_over(forced):
                return self._took(forced, [])
            window.reset(self.total, self._sizes)  # the rule cannot be kept: start again
        heads, aside = self._heads(passed_over)
        best = self._choose(heads)
        if best is None and len(aside) < len(members):
            # Every member the window allows is refused: the turn goes as credits
            # say, and the window starts again (then it allows every member).
            window.reset(self.total, self._sizes)
            heads, more = self._heads(passed_over)
            aside += more
            best = self._choose(heads)
        taker = None
        if best is not None:
            _credit, _order, taker, weight = best
            heapq.heappop(self._classes[weight])  # the taker's entry heads its class
        turn = self.turn
        for member in aside:
            weight_a, base, order = members[member]
            self._set(member, weight_a, min(base, -weight_a * turn), order)  # credit <= 0
        if taker is None:
            self.turn -= 1
            return None
        return self._took(taker, aside)

    def _took(self, taker: str, aside: list[str]) -> str:
        # The taker pays for the members that could take the turn: those passed
        # over sit it out, so their weights are not charged to it.
        members = self._members
        weight, base, order = members[taker]
        self._set(taker, weight, base - self.total + sum(members[m][0] for m in aside), order)
        self.window.took(taker, weight)
        return taker

    def _heads(
        self, passed_over: Callable[[str], bool]
    ) -> tuple[list[tuple[int, int, str, int]], list[str]]:
        """Each weight class's first member that ``passed_over`` does not refuse
        and the window allows, as (credit, order, member, weight); and the
        members refused, taken out of their heaps."""
        turn, members, window = self.turn, self._members, self.window
        tight = window.tight()
        heads: list[tuple[int, int, str, int]] = []
        aside: list[str] = []
        held: list[tuple[int, tuple[int, int, str]]] = []
        for weight in list(self._classes):
            heap = self._classes[weight]
            if tight and window.bounds(weight)[0] == 0:
                continue  # no member of this weight may lift the short ones
            while heap:
                neg_base, order, member = heap[0]
                entry = members.get(member)
                if entry is None or entry[1] != -neg_base or entry[2] != order:
                    heapq.heappop(heap)  # stale
                    continue
                if passed_over(member):
                    heapq.heappop(heap)
                    aside.append(member)
                    continue
                if not window.fits(member, weight):
                    held.append((weight, heapq.heappop(heap)))  # back after the turn
                    continue
                heads.append((-neg_base + weight * turn, order, member, weight))
                break
        for weight, item in held:
            heapq.heappush(self._classes[weight], item)
        for weight in [w for w, heap in self._classes.items() if not heap]:
            del self._classes[weight]
        return heads, aside

    def _choose(self, heads: list[tuple[int, int, str, int]]) -> tuple[int, int, str, int] | None:
        """Among the heads of the weight classes, the member due soonest among
        those owed a turn (credit > 0): the least ``(total - credit) / weight``,
        the turns until its next share falls due. Else the most credit."""
        total = self.total
        owed = [h for h in heads if h[0] > 0]
        if owed:
            return min(owed, key=lambda h: (Fraction(total - h[0], h[3]), h[1]))
        return max(heads, key=lambda h: (h[0], -h[1]), default=None)
