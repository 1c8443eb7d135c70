"""Job ids: 26 characters of Crockford base32 that sort by creation.

128 bits: 48 bits of milliseconds, then 80 random bits (the ULID layout), as
base32 of 16 bytes. Within one millisecond the random part is incremented, so
ids minted by one daemon are strictly increasing.
"""

from __future__ import annotations

import base64
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


# base32 of 16 big-endian bytes is fixed-width and, with an alphabet in ASCII
# order, sorts like the number; Crockford's alphabet avoids i, l, o and u.
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())


def _encode(value: int) -> str:
    return base64.b32encode(value.to_bytes(16, "big"))[:26].translate(_TO_CROCKFORD).decode()
