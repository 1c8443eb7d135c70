"""Job ids: 26 characters of Crockford base32 that sort by creation (ULID layout).

48 bits of milliseconds, then 80 random bits; within one millisecond the random
part is incremented, so ids minted by one daemon are strictly increasing.
"""

from __future__ import annotations

import secrets

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_RANDOM_BITS = 80


class IdMint:
    """Mints strictly increasing, time-ordered job ids."""

    def __init__(self) -> None:
        self._last_ms = -1
        self._last_rand = 0

    def mint(self, now_ms: int) -> str:
        """A new id for an instant ``now_ms``; never repeats, never goes backwards."""
        if now_ms <= self._last_ms:
            now_ms = self._last_ms
            rand = self._last_rand + 1
            if rand >> _RANDOM_BITS:  # 2**80 ids in one ms: borrow the next ms
                now_ms += 1
                rand = secrets.randbits(_RANDOM_BITS - 1)
        else:
            # Leave headroom so increments within the millisecond cannot overflow.
            rand = secrets.randbits(_RANDOM_BITS - 1)
        self._last_ms, self._last_rand = now_ms, rand
        return _encode((now_ms << _RANDOM_BITS) | rand)


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
