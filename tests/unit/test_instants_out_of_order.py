"""Decisions at an instant earlier than one the limit has already seen.

On PostgreSQL other tasks run while a transaction's statement is on the wire
(daemon.store.bridge), and the transaction's instant was read before: a read
(``admission_status``, the reopening timer, a board page) may move a limit on
to a later instant, and the transaction's decision then comes at an earlier one.
A limit must give that decision what it would have given before the read:

- a claim window rolled on by a read and back by the decision finds the usage of
  its window, not zero (three daemons over-admitted a second's window by a claim
  this way: tests/e2e/test_cluster_exactness.py);
- a drip debited at an earlier instant never moves its "tokens as of" back, which
  would credit the same milliseconds twice.
"""

from __future__ import annotations

from actors.bucket import TokenBucket
from actors.budget import BudgetSpec, Strategy, TokenPool
from actors.policy import PolicyState, parse_policy

SECOND = 1000
T = 1_796_221_802_000  # a whole second


def _three_a_second() -> PolicyState:
    state = PolicyState("default", "q")
    state.policy = parse_policy({"windows": [{"max_claims": 3, "period": "second", "tz": "UTC"}]})
    return state


def test_a_window_rolled_on_by_a_read_and_back_by_a_claim_keeps_its_usage():
    state = _three_a_second()
    assert state.room(0, T + 19) == 3
    state.charge(3)
    state.committed(3)
    assert state.room(0, T + SECOND + 1) == 3  # a read in the next second
    assert state.room(0, T + 992) == 0  # the claim's instant: this second is full
    assert state.room(0, T + SECOND + 5) == 3  # and the next one is still empty


def test_a_charge_undone_after_the_window_rolled_on_is_taken_back_from_its_window():
    state = _three_a_second()
    state.room(0, T + 500)
    undo = state.charge(2)
    state.room(0, T + SECOND + 1)  # a read rolls on before the transaction rolls back
    undo()
    assert state.room(0, T + 600) == 3
    assert state.room(0, T + SECOND + 2) == 3


def test_only_the_last_windows_left_are_kept():
    state = _three_a_second()
    for i in range(10):
        state.room(0, T + i * SECOND)
        state.charge(1)
        state.committed(1)
    (meter,) = state.meters
    assert sorted(meter.behind) == [T + 7 * SECOND, T + 8 * SECOND]


def test_a_drip_debited_at_an_earlier_instant_credits_no_millisecond_twice():
    # 1 token a second, burst 2: full at T.
    pool = TokenPool(BudgetSpec(1, Strategy("time_based", duration_ms=SECOND, burst=2)), T)
    assert pool.debit(1, T + SECOND)  # still full: 1 left, as of T + 1 s
    # The transaction's instant, read before the debit above was decided:
    assert pool.debit(1, T + 500)
    # Both tokens are gone as of T + 1 s. Had "as of" gone back to T + 500, the
    # half second after it would be credited again.
    assert pool.available(T + SECOND) == 0.0
    assert not pool.can_debit(1, T + 2 * SECOND - 1)


def test_a_bucket_taken_from_at_an_earlier_instant_credits_no_millisecond_twice():
    bucket = TokenBucket(1, 1, T)
    assert bucket.take(1, T) == 0
    assert bucket.take(1, T + SECOND) == 0
    bucket.force(0, T + 500)  # a no-op: touches nothing
    assert bucket.take(1, T + 500) > 0
    bucket.force(1, T + 600)  # a delivery after the fact, at an earlier instant
    assert bucket.tokens(T + 2 * SECOND) == 0.0  # in debt by one, then one refilled
