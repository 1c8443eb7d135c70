"""Fuzz target: the socket frame parser (:mod:`daemon.transport.framing`,
:mod:`daemon.transport.wide_ints`).

Input: two header bytes, then the byte stream a client sends. The first header
byte picks the frame limit (small ones, so that ``frame_too_large`` is reached;
255 is the default 1 MiB), the second how the stream is cut into reads. Checked:

- :meth:`LineFramer.feed` and :func:`parse` never raise;
- the stream cut into reads gives the same frames as the stream in one read;
- every frame is a :class:`Request` (an id that is an int or a string, a dict of
  arguments without ``id``/``op``), a :class:`BadFrame` or a last
  :class:`FrameTooLarge`, after which the framer takes nothing more;
- each complete line parses to the frame the framer gave for it;
- :func:`find_wide_int` names the same first out-of-range integer as a reference
  walk of the text by the standard library's ``json`` (which keeps integers exact),
  and a refused :class:`Request` carries exactly that ``invalid_argument``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson

from actors.limits import INT_MAX, INT_MIN
from daemon.transport.framing import BadFrame, Event, FrameTooLarge, LineFramer, Request, parse
from daemon.transport.wide_ints import find_wide_int
from tests.fuzz.targets import check, refusal_only

DEFAULT_LIMIT = 1 << 20


def limit_for(byte: int) -> int:
    """The frame limit a header byte picks: 1..254 bytes, or 1 MiB for 255."""
    return DEFAULT_LIMIT if byte == 255 else byte + 1


def cuts(seed: int, size: int) -> list[int]:
    """Read sizes (summing to ``size``) from ``seed``: 0 means one read. Reads are
    1 to ``seed + 1`` bytes, and at most about 64 of them (a bound on the cost per input)."""
    if seed == 0:
        return [size]
    sizes, state, left, least = [], seed, size, size // 64
    while left > 0:
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        step = min(left, max(least, 1 + state % (seed + 1)))
        sizes.append(step)
        left -= step
    return sizes


def normal(event: Event) -> tuple[Any, ...]:
    """An event as comparable values (a :class:`Refused` compares by identity)."""
    if isinstance(event, Request):
        refused = event.refused.to_wire() if event.refused is not None else None
        return ("request", event.id, event.op, event.args, refused)
    if isinstance(event, BadFrame):
        return ("bad", event.message)
    return ("too_large", event.limit)


def frames(limit: int, stream: bytes, sizes: list[int]) -> list[Event]:
    """Feed ``stream`` in reads of ``sizes``; check the framer stays shut after a too-large."""
    framer = LineFramer(limit)
    events: list[Event] = []
    at = 0
    for size in sizes:
        got = framer.feed(stream[at : at + size])
        at += size
        if events and isinstance(events[-1], FrameTooLarge):
            check(got == [], "the framer gave frames after frame_too_large")
        events.extend(got)
    if events and isinstance(events[-1], FrameTooLarge):
        check(framer.feed(b"{}\n") == [], "the framer took input after frame_too_large")
    return events


def one_input(data: bytes) -> None:
    """Check the parser on one input (raises on a bug)."""
    if len(data) < 2:
        return
    limit, stream = limit_for(data[0]), data[2:]
    whole = frames(limit, stream, [len(stream)])
    pieces = frames(limit, stream, cuts(data[1], len(stream)))
    check(
        [normal(e) for e in whole] == [normal(e) for e in pieces],
        "cutting the stream into reads changed the frames",
    )
    for index, event in enumerate(whole):
        check(
            not isinstance(event, FrameTooLarge) or index == len(whole) - 1,
            "frame_too_large was not the last frame",
        )
        if isinstance(event, Request):
            check(type(event.id) in (int, str), f"request id {event.id!r}")
            check(type(event.args) is dict, "arguments are not a dict")
            check("id" not in event.args and "op" not in event.args, "id/op left in args")
    lines = [line for line in stream.split(b"\n")[:-1] if line.strip()]
    for line, event in zip(lines, whole, strict=False):
        if isinstance(event, FrameTooLarge):
            break
        check(normal(parse(line)) == normal(event), "the framer and parse() disagree")
        check_wide(line, event)


def check_wide(line: bytes, event: Event) -> None:
    """:func:`find_wide_int` against the reference, and the request's refusal."""
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    found = refusal_only(lambda: find_wide_int(line))
    expected = reference_wide(line)
    got = None if found is None else (found.path, found.literal)
    check(got == expected, f"find_wide_int gave {got!r}, the reference {expected!r}")
    if isinstance(event, Request):
        check((event.refused is None) == (found is None), "refused iff a wide integer")
        if found is not None and event.refused is not None:
            check(event.refused.to_wire() == found.refused().to_wire(), "another refusal")


class _Int(str):
    """An integer literal as written (the reference never converts long ones)."""


def _wide(literal: str) -> bool:
    digits = literal.lstrip("-")
    if len(digits) > 20:
        return True
    return not INT_MIN <= int(literal) <= INT_MAX


def reference_wide(line: bytes) -> tuple[str, str] | None:
    """The first out-of-range integer in valid JSON ``line``, by path, as ``json`` reads it."""
    doc = json.loads(line.decode("utf-8"), parse_int=_Int, object_pairs_hook=lambda p: ("{", p))
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Int):
            if _wide(value):
                return path, str(value)
        elif isinstance(value, tuple):
            children = [(_join(path, str(k)), v) for k, v in value[1]]
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)]))
    return None


def _join(prefix: str, key: str) -> str:
    if not prefix:
        return key
    return f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"


if __name__ == "__main__":
    from tests.fuzz.run import main

    sys.exit(main(["framing", *sys.argv[1:]]))
