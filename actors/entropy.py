"""Random bytes for job ids and lease tokens, drawn from the OS a page at a time.

``os.urandom`` is a system call (``getrandom``), and every claim used to make
two of them: one for the job id's random part, one for the lease token. Reading
a page and slicing it hands out the same CSPRNG bytes, each byte once, for a
fraction of the cost. A forked child starts from an empty page, so a parent and
its child never hand out the same bytes.
"""

from __future__ import annotations

import os

PAGE_BYTES = 4096


class _Pool:
    """A page of OS randomness, handed out front to back, each byte once."""

    def __init__(self) -> None:
        self.page = b""
        self.at = 0

    def reset(self) -> None:
        self.page, self.at = b"", 0

    def take(self, n: int) -> bytes:
        at = self.at
        end = at + n
        if end > len(self.page):
            self.page = os.urandom(max(PAGE_BYTES, n))
            at, end = 0, n
        self.at = end
        return self.page[at:end]


_pool = _Pool()
os.register_at_fork(after_in_child=_pool.reset)


def token_bytes(n: int) -> bytes:
    """``n`` random bytes (as :func:`secrets.token_bytes`)."""
    return _pool.take(n)


def token_hex(n: int) -> str:
    """``n`` random bytes as ``2 n`` hex digits (as :func:`secrets.token_hex`)."""
    return _pool.take(n).hex()


def randbits(k: int) -> int:
    """A random integer of ``k`` bits (as :func:`secrets.randbits`)."""
    nbytes = (k + 7) // 8
    return int.from_bytes(_pool.take(nbytes), "big") >> (nbytes * 8 - k)
