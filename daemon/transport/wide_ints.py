"""Integers too wide for 64 bits in JSON text: found, named, refused.

orjson reads an integer literal outside ``-2**63 .. 2**64 - 1`` as the nearest
float, without a word: ``12345678901234567890123`` would be stored as
``1.2345678901234568e+22``. The daemon never stores a different number than
was sent, so the transports look for such a literal in the text orjson has just
parsed and refuse the request as ``invalid_argument`` naming the value's path
(``payload.n``, ``jobs[2].payload.ids[0]``). docs/protocol.md records the rule.

:func:`find_wide_int` costs one regex search on ordinary text: only text holding
a run of 19 digits (where every wide integer has at least as many) is walked,
token by token and without recursion, so any depth orjson accepts is fine.
msgpack cannot encode an integer beyond 64 bits at all.
"""

from __future__ import annotations

import re

import attrs
import orjson

from actors.errors import Refused, invalid
from actors.limits import INT_MAX, INT_MIN

# The cheap first test: a run of 19 digits somewhere (no integer that fits in 64
# bits is longer). Digits mapped to "0" and every other byte to a space, then one
# substring search: both C loops, about 13 times faster than the regex ``\d{19}``
# on a 100-job enqueue_many (which matches digit by digit).
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_NINETEEN = b"0" * 19
_TOKEN = re.compile(
    rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # a string
    rb"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"  # a number
    rb"|[\[\]{}:,]"
)


@attrs.frozen
class WideInt:
    """An integer literal outside :data:`INT_MIN`..:data:`INT_MAX` at ``path``."""

    path: str
    literal: str

    def refused(self, prefix: str = "") -> Refused:
        """The ``invalid_argument`` refusal naming the value (under ``prefix``)."""
        field = _join(prefix, self.path) if prefix else self.path
        shown = self.literal if len(self.literal) <= 40 else self.literal[:37] + "..."
        return invalid(
            field,
            f"{field} is an integer outside the 64-bit range {INT_MIN}..{INT_MAX}, "
            f"got {shown}: it would not round-trip exactly; send it as a string",
        )


def find_wide_int(text: bytes) -> WideInt | None:
    """The first integer in valid JSON ``text`` that does not fit 64 bits, if any."""
    # find(), not ``in``: bytes.__contains__ first tries its argument as an
    # integer, and raising (then clearing) that TypeError is most of its cost.
    if text.translate(_DIGITS).find(_NINETEEN) < 0:
        return None
    # One frame per open container: [key or index, expecting a key].
    stack: list[list[object]] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        first = token[:1]
        if first == b"{":
            stack.append([None, True])
        elif first == b"[":
            stack.append([0, False])
        elif first in (b"}", b"]"):
            stack.pop()
        elif first == b",":
            top = stack[-1]
            if isinstance(top[0], int):
                top[0] += 1  # type: ignore[operator]
            else:
                top[1] = True
        elif first == b":":
            stack[-1][1] = False
        elif first == b'"':
            if stack and stack[-1][1]:
                stack[-1][0] = orjson.loads(token)
        elif len(token) >= 19 and b"." not in token and b"e" not in token.lower():
            value = int(token)
            if not INT_MIN <= value <= INT_MAX:
                return WideInt(_path(stack), token.decode())
    return None


def _path(stack: list[list[object]]) -> str:
    path = ""
    for key, _ in stack:
        path = f"{path}[{key}]" if isinstance(key, int) else _join(path, str(key))
    return path


def _join(prefix: str, part: str) -> str:
    if not prefix:
        return part
    return f"{prefix}{part}" if part.startswith("[") else f"{prefix}.{part}"
