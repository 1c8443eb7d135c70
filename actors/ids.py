"""Job ids: 26 characters of Crockford base32 that sort by creation.

128 bits: 48 bits of milliseconds, then 80 random bits (the ULID layout), as
base32 of 16 bytes. Within one millisecond the random part is incremented, so
ids minted by one daemon are strictly increasing.
"""

from __future__ import annotations

from actors import entropy

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_RANDOM_BITS = 80


class IdMint:
    """Mints strictly increasing, time-ordered job ids."""

    def __init__(self) -> None:
        self._last_ms = -1
        self._last_rand = 0
        self._high = -1
        self._prefix = ""

    def mint(self, now_ms: int) -> str:
        """A new id for an instant ``now_ms``; never repeats, never goes backwards."""
        if now_ms <= self._last_ms:
            now_ms = self._last_ms
            rand = self._last_rand + 1
            if rand >> _RANDOM_BITS:  # 2**80 ids in one ms: borrow the next ms
                now_ms += 1
                rand = entropy.randbits(_RANDOM_BITS - 1)
        else:
            # Leave headroom so increments within the millisecond cannot overflow.
            rand = entropy.randbits(_RANDOM_BITS - 1)
        self._last_ms, self._last_rand = now_ms, rand
        value = (now_ms << _RANDOM_BITS) | rand
        # Ids of one millisecond share their first 16 characters (the top 80
        # bits): those are encoded once, and each id encodes only its last 10.
        high = value >> _LOW_BITS
        if high != self._high:
            self._high = high
            self._prefix = "".join([_PAIRS[(high >> shift) & 1023] for shift in _HIGH_SHIFTS])
        low = (value & _LOW_MASK) << 2
        pairs = _PAIRS
        return (
            self._prefix + pairs[low >> 40] + pairs[(low >> 30) & 1023]
            + pairs[(low >> 20) & 1023] + pairs[(low >> 10) & 1023] + pairs[low & 1023]
        )  # fmt: skip


def first_id(at_ms: int) -> str:
    """The smallest id of millisecond ``at_ms``: every id minted earlier sorts below it."""
    return _encode(max(0, at_ms) << _RANDOM_BITS)


# Two characters per 10 bits: the 128-bit value, shifted left by 2, is 13 such
# pairs (what base32 of 16 bytes gives, with its 2 zero padding bits), and a
# table lookup per pair is faster than base64 plus a translation. The alphabet
# is in ASCII order, so the text sorts like the number.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))
_LOW_BITS = 48  # the last 5 pairs: the low 48 bits and the 2 padding bits
_LOW_MASK = (1 << _LOW_BITS) - 1
_HIGH_SHIFTS = tuple(range(70, -1, -10))  # the first 8 pairs: the top 80 bits


def _encode(value: int) -> str:
    value <<= 2
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])
