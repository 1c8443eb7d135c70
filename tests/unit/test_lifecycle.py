"""actors/lifecycle.py: the transition table, and retry backoff."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import lifecycle as lc
from actors.lifecycle import TRANSITIONS, IllegalTransition, arrival_state, backoff_ms, check

EVENTS = sorted({event for event, _ in TRANSITIONS} | {"teleport"})
ALL = list(itertools.product(EVENTS, lc.STATES, lc.STATES))
ALLOWED = [(e, s, t) for (e, s), targets in TRANSITIONS.items() for t in sorted(targets)]
ILLEGAL = [x for x in ALL if x not in set(ALLOWED)]


def test_table_names_only_known_states():
    for (_event, source), targets in TRANSITIONS.items():
        assert source in lc.STATES
        assert targets and targets <= set(lc.STATES)


@pytest.mark.parametrize(("event", "source", "target"), ALLOWED)
def test_every_allowed_transition_returns_its_target(event, source, target):
    assert check(event, source, target) == target


@pytest.mark.parametrize(("event", "source", "target"), ILLEGAL)
def test_every_other_transition_is_illegal(event, source, target):
    with pytest.raises(IllegalTransition, match=f"{event}: {source} -> {target}"):
        check(event, source, target)


def test_final_states_only_leave_by_replay():
    leaving = {(e, s) for (e, s) in TRANSITIONS if s in (lc.COMPLETED, lc.DEAD)}
    assert leaving == {("replay", lc.DEAD)}


def test_live_states():
    assert frozenset({lc.SCHEDULED, lc.PENDING, lc.RUNNING}) == lc.LIVE


def test_arrival_state():
    assert arrival_state(1001, 1000) == lc.SCHEDULED
    assert arrival_state(1000, 1000) == lc.PENDING
    assert arrival_state(999, 1000) == lc.PENDING


def _nominal(attempts: int) -> int:
    return min(lc.BACKOFF_CAP_MS, lc.BACKOFF_BASE_MS * 2 ** (attempts - 1))


class _Edge(random.Random):
    """An rng that always picks the low or the high end."""

    def __init__(self, high: bool) -> None:
        super().__init__()
        self.high = high

    def randint(self, a: int, b: int) -> int:
        return b if self.high else a


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0))
@settings(max_examples=300)
def test_backoff_is_between_half_and_the_full_nominal_delay(attempts, seed):
    nominal = _nominal(min(attempts, 40))
    value = backoff_ms(attempts, random.Random(seed))
    assert nominal // 2 <= value <= nominal


def test_backoff_bounds_are_reached():
    assert backoff_ms(1, _Edge(high=False)) == 500
    assert backoff_ms(1, _Edge(high=True)) == 1_000
    assert backoff_ms(3, _Edge(high=False)) == 2_000
    assert backoff_ms(3, _Edge(high=True)) == 4_000


def test_backoff_nominal_doubles_then_is_capped():
    highs = [backoff_ms(n, _Edge(high=True)) for n in range(1, 60)]
    lows = [backoff_ms(n, _Edge(high=False)) for n in range(1, 60)]
    assert highs == sorted(highs) and lows == sorted(lows)
    assert highs[:5] == [1_000, 2_000, 4_000, 8_000, 16_000]
    assert max(highs) == lc.BACKOFF_CAP_MS
    assert highs[-1] == lc.BACKOFF_CAP_MS and lows[-1] == lc.BACKOFF_CAP_MS // 2
    first_capped = highs.index(lc.BACKOFF_CAP_MS)
    assert highs[first_capped - 1] < lc.BACKOFF_CAP_MS
    assert all(h == lc.BACKOFF_CAP_MS for h in highs[first_capped:])


def test_backoff_huge_attempt_counts_stay_capped():
    for attempts in (31, 100, 10**6):
        assert lc.BACKOFF_CAP_MS // 2 <= backoff_ms(attempts) <= lc.BACKOFF_CAP_MS


def test_backoff_spreads_out():
    rng = random.Random(1)
    assert len({backoff_ms(5, rng) for _ in range(50)}) > 10


def test_sources_are_the_states_the_table_lets_an_event_leave_for_a_target():
    assert lc.sources("promote", lc.PENDING) == (lc.SCHEDULED,)
    assert lc.sources("fold", lc.SCHEDULED) == (lc.SCHEDULED, lc.PENDING)
    assert lc.sources("claim", lc.RUNNING) == (lc.PENDING,)
    assert lc.sources("promote", lc.RUNNING) == ()
    for event, target in itertools.product(EVENTS, lc.STATES):
        for source in lc.sources(event, target):
            assert check(event, source, target) == target
