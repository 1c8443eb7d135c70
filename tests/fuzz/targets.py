"""What every fuzz target shares: the crash rule.

A target is a module of this package with ``one_input(data: bytes) -> None``.
Anything it raises is a crash. The only exception a checked call may raise is
:class:`actors.errors.Refused` with a code of PROTOCOL.md, and its wire form must
encode (a refusal the transport cannot send back would be a crash there), so
targets run the call through :func:`refusal_only`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from actors.errors import STATUS, Refused

T = TypeVar("T")


class Crash(AssertionError):
    """A target's own check failed: an invariant the code under test broke."""


def check(condition: bool, message: str) -> None:
    """Raise :class:`Crash` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise Crash(message)


def refusal_only(call: Callable[[], T]) -> T | Refused:
    """``call()``'s result, or the :class:`Refused` it raised (checked: a documented
    code, a wire form that encodes). Any other exception propagates: a crash."""
    try:
        return call()
    except Refused as refused:
        check(refused.code in STATUS, f"undocumented code {refused.code!r}")
        wire: dict[str, Any] = refused.to_wire()
        orjson.dumps({"id": None, "ok": False, "error": wire})
        return refused
