"""actors/bucket.py: the door's token bucket, exact on virtual milliseconds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.bucket import TokenBucket, retry_after_s

T0 = 1_700_000_000_000


def test_a_fresh_bucket_is_full_and_refills_at_the_rate():
    bucket = TokenBucket(100, 20, T0)
    assert all(bucket.take(1, T0) == 0 for _ in range(100))
    assert bucket.take(1, T0) == 50  # 20 a second: one token every 50 ms
    assert bucket.take(1, T0 + 49) == 1
    assert bucket.take(1, T0 + 50) == 0


def test_a_denial_never_debits_and_zero_is_free():
    bucket = TokenBucket(2, 1, T0)
    assert bucket.take(3, T0) == 60_000  # more than the capacity: never
    assert bucket.tokens(T0) == 2
    assert bucket.take(0, T0) == 0 and bucket.tokens(T0) == 2


def test_raising_keeps_the_count_lowering_clamps_it():
    bucket = TokenBucket(10, 1, T0)
    bucket.take(8, T0)
    bucket.update(100, 1, T0)
    assert bucket.tokens(T0) == 2  # an upgrade hands out no free tokens
    bucket.update(1, 1, T0 + 10_000)
    assert bucket.tokens(T0 + 10_000) == 1


def test_deliveries_after_the_fact_can_go_negative():
    bucket = TokenBucket(10, 10, T0)
    bucket.force(15, T0)
    assert bucket.tokens(T0) == -5
    assert bucket.take(1, T0) == 600  # back above zero, then one more token
    assert bucket.take(1, T0 + 600) == 0


def test_retry_after_is_clamped_to_1_60_seconds():
    assert [retry_after_s(ms) for ms in (0, 1, 1000, 1001, 59_999, 600_000)] == [
        1, 1, 1, 2, 60, 60,
    ]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 50),
    rate=st.sampled_from([0.5, 1, 3, 20, 250.5]),
    steps=st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 7)), max_size=60),
)
def test_never_more_than_capacity_plus_rate_times_t(capacity, rate, steps):
    bucket = TokenBucket(capacity, rate, T0)
    now, taken = T0, []
    for gap, n in steps:
        now += gap
        before = bucket.tokens(now)
        if bucket.take(n, now) == 0:
            taken.append((now, n))
        else:
            assert bucket.tokens(now) == before  # a denial changes nothing
    for i, (start, _n) in enumerate(taken):
        total = 0
        for at, n in taken[i:]:
            total += n
            assert total <= capacity + rate * (at - start) / 1000 + 1e-9
