"""actors/lending.py: what a reservation is owed, who it holds back, what it lends."""

from __future__ import annotations

from actors.lending import held_back, lent, owed


def test_a_group_is_owed_its_reservation_only_while_it_has_work():
    assert owed(4, 1, True) == 3
    assert owed(4, 1, False) == 0
    assert owed(4, 6, True) == 0
    assert owed(0, 0, True) == 0


def test_others_take_only_what_leaves_the_owed_units_free():
    assert not held_back(2, 1, 1, 5)  # owed itself: takes what is free
    assert held_back(0, 4, 1, 4)  # the 4 free are gold's
    assert not held_back(0, 5, 1, 4)
    assert held_back(0, 5, 2, 4)  # a cost of 2 would eat into them


def test_lent_is_what_others_hold_beyond_the_unreserved_capacity():
    # 10 slots, gold reserves 4: a holds 10, so gold's 4 idle slots are lent.
    assert lent(10, {"gold": 4}, {"a": 10}) == {"gold": 4}
    assert lent(10, {"gold": 4}, {"a": 6}) == {}  # within the unreserved 6
    assert lent(10, {"gold": 4}, {"a": 7, "gold": 1}) == {"gold": 1}
    assert lent(10, {"gold": 4}, {"a": 6, "gold": 4}) == {}
    # Two reservations, 3 lent in all: counted in name order.
    assert lent(10, {"b": 2, "gold": 4}, {"a": 7}) == {"b": 2, "gold": 1}
    # Beyond one's own reservation counts as borrowing too.
    assert lent(10, {"b": 2, "gold": 4}, {"b": 5, "a": 4}) == {"gold": 3}
