"""The socket protocol core, sans I/O: bytes in, events out, bytes back.

:class:`LineFramer` splits the byte stream into JSON-lines frames and turns
each into a :class:`Request`, a :class:`BadFrame` or a :class:`FrameTooLarge`.
Parsing never raises: orjson refuses nesting deeper than 1024 levels with a
decode error, and anything else odd becomes ``bad_frame`` too. A frame holding
an integer beyond 64 bits (which orjson would read as a float) is a
:class:`Request` carrying its ``invalid_argument`` refusal in ``refused``
(:mod:`daemon.transport.wide_ints`): it is answered with its id and never run.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from actors.errors import Refused
from daemon.transport.wide_ints import find_wide_int


@attrs.frozen
class Request:
    """A well-formed request frame; one with ``refused`` set is answered with it, never run."""

    id: int | str
    op: Any
    args: dict[str, Any]
    refused: Refused | None = None


@attrs.frozen
class BadFrame:
    """A line that is not a JSON object with a usable id (answered with ``id: null``)."""

    message: str


@attrs.frozen
class FrameTooLarge:
    """A line longer than the frame limit; the connection is closed after it."""

    limit: int


Event = Request | BadFrame | FrameTooLarge


class LineFramer:
    """Splits bytes into frames of at most ``max_frame_bytes``."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no newline
        self._broken = False

    def feed(self, data: bytes) -> list[Event]:
        """Take ``data``; return the frames it completed."""
        if self._broken:
            return []
        self._buf += data
        events: list[Event] = []
        start = 0
        buf = self._buf
        # Resume the search where the last feed stopped: a line trickling in a
        # byte at a time costs linear, not quadratic, scanning.
        scan_from = self._scanned
        while True:
            end = buf.find(b"\n", scan_from)
            if end < 0:
                break
            if end - start > self._max:
                return self._too_large(events)
            line = bytes(buf[start:end])
            start = scan_from = end + 1
            if line.strip():
                events.append(parse(line))
        del buf[:start]
        self._scanned = len(buf)
        if len(buf) > self._max:
            return self._too_large(events)
        return events

    def _too_large(self, events: list[Event]) -> list[Event]:
        self._broken = True
        self._buf.clear()
        events.append(FrameTooLarge(self._max))
        return events


def parse(line: bytes) -> Event:
    """One line to an event."""
    try:
        doc = orjson.loads(line)
    except (orjson.JSONDecodeError, RecursionError, MemoryError) as exc:
        return BadFrame(f"not valid JSON: {_first_line(exc)}")
    if not isinstance(doc, dict):
        return BadFrame("a frame must be a JSON object")
    req_id = doc.pop("id", None)
    if type(req_id) not in (int, str):
        return BadFrame("a request needs an id that is an integer or a string")
    op = doc.pop("op", None)
    wide = find_wide_int(line)
    if wide is not None:  # (a wide id was a float above: a bad frame)
        return Request(req_id, op, doc, wide.refused())
    return Request(req_id, op, doc)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


_OPTS = orjson.OPT_APPEND_NEWLINE


def encode_ok(req_id: int | str, result: dict[str, Any]) -> bytes:
    """A success frame."""
    return orjson.dumps({"id": req_id, "ok": True, **result}, option=_OPTS)


def encode_error(req_id: int | str | None, refused: Refused) -> bytes:
    """A failure frame."""
    return orjson.dumps({"id": req_id, "ok": False, "error": refused.to_wire()}, option=_OPTS)


def encode_event(event: dict[str, Any]) -> bytes:
    """A server-push event frame."""
    return orjson.dumps(event, option=_OPTS)
