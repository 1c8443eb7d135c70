"""actors/ids.py: 26-character Crockford ids, strictly increasing, sorting by creation."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from actors import ids
from actors.ids import IdMint

ALPHABET = set("0123456789abcdefghjkmnpqrstvwxyz")
MS = 1_700_000_000_000


def _in_ms(job_id: str, ms: int) -> bool:
    """True if ``job_id`` encodes millisecond ``ms`` (whatever its random part)."""
    return ids._encode(ms << 80) <= job_id <= ids._encode((ms << 80) | (2**80 - 1))


def test_shape_is_26_characters_of_the_alphabet():
    mint = IdMint()
    for job_id in (mint.mint(MS), mint.mint(MS), mint.mint(0), mint.mint(2**48 - 1)):
        assert len(job_id) == 26
        assert set(job_id) <= ALPHABET


def test_alphabet_is_crockford_base32_in_ascii_order():
    assert len(ids._ALPHABET) == 32
    assert list(ids._ALPHABET) == sorted(ids._ALPHABET)
    assert not set("ilou") & set(ids._ALPHABET)


def test_strictly_increasing_within_one_millisecond():
    mint = IdMint()
    minted = [mint.mint(MS) for _ in range(1000)]
    assert minted == sorted(minted)
    assert len(set(minted)) == 1000
    assert all(_in_ms(i, MS) for i in minted)


def test_strictly_increasing_across_milliseconds():
    mint = IdMint()
    a, b, c = mint.mint(MS), mint.mint(MS + 1), mint.mint(MS + 1000)
    assert a < b < c
    assert _in_ms(a, MS) and _in_ms(b, MS + 1) and _in_ms(c, MS + 1000)


def test_never_goes_backwards_when_the_clock_does():
    mint = IdMint()
    a = mint.mint(MS + 5)
    b = mint.mint(MS)  # wall clock stepped back
    assert b > a
    assert _in_ms(b, MS + 5)


def test_random_part_overflow_borrows_the_next_millisecond():
    mint = IdMint()
    a = mint.mint(MS)
    mint._last_rand = 2**80 - 1
    b = mint.mint(MS)
    assert b > a
    assert _in_ms(b, MS + 1)
    assert mint.mint(MS + 1) > b


U128 = st.integers(min_value=0, max_value=2**128 - 1)


@given(U128, U128)
@settings(max_examples=300)
def test_encoding_is_fixed_width_and_order_preserving(a, b):
    ea, eb = ids._encode(a), ids._encode(b)
    assert len(ea) == len(eb) == 26
    assert set(ea) <= ALPHABET
    assert (a < b) == (ea < eb) and (a == b) == (ea == eb)


def test_ids_of_later_milliseconds_sort_after_across_mints():
    # Two daemons (two mints): order follows the millisecond, whatever the random part.
    for _ in range(200):
        assert IdMint().mint(MS) < IdMint().mint(MS + 1)


@given(
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=200),
    st.integers(min_value=0, max_value=2**47),
)
@settings(max_examples=200)
def test_sorting_by_id_is_sorting_by_creation(steps, start):
    mint = IdMint()
    ms = start
    minted = []
    for step in steps:  # a non-decreasing sequence of milliseconds
        ms += step
        minted.append((mint.mint(ms), ms))
    id_order = [i for i, _ in minted]
    assert sorted(id_order) == id_order
    assert len(set(id_order)) == len(id_order)
    assert all(_in_ms(i, ms) for i, ms in minted)


@given(st.lists(st.integers(min_value=0, max_value=2**48 - 2), min_size=1, max_size=100))
@settings(max_examples=100)
def test_strictly_increasing_whatever_the_instants(instants):
    mint = IdMint()
    minted = [mint.mint(ms) for ms in instants]
    assert all(a < b for a, b in itertools.pairwise(minted))
