"""Reading an HTTP request body for the JSON API: its format, its size cap, its decoding.

- **Format** (:func:`body_format`): ``application/json`` (and ``+json``
  types such as ``application/merge-patch+json``) or ``application/msgpack``
  (``application/x-msgpack``). A body with no ``Content-Type`` is read as JSON,
  as PROTOCOL.md's clients (``curl --data-binary`` aside) have always sent it.
  Anything else, notably the three types an HTML form can send cross-site
  (``application/x-www-form-urlencoded``, ``multipart/form-data``,
  ``text/plain``), is refused 415 ``unsupported_media_type`` before a byte of
  the body is read.
- **Size**: a declared ``Content-Length`` over the cap is refused 413 at once,
  without reading the body; a chunked body is counted as it streams and cut
  the moment it passes the cap. Either way the body is never held whole: what
  is left unread is drained and dropped after the answer by
  :class:`daemon.transport.http_guard.HttpGuard`, so the client still reads its 413.
- **Integers** beyond 64 bits in a JSON body are refused ``invalid_argument``
  naming their path (:mod:`daemon.transport.wide_ints`), never read as floats; msgpack
  cannot carry them at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgpack
import orjson

from actors.errors import Refused
from daemon.transport.wide_ints import find_wide_int

Receive = Callable[[], Awaitable[dict[str, Any]]]
Format = Literal["json", "msgpack"]

JSON = "application/json"
MSGPACK = "application/msgpack"
_MSGPACK_TYPES = frozenset({MSGPACK, "application/x-msgpack"})


class UnsupportedMediaType(Exception):
    """A request body in a format the JSON API does not read (answered 415)."""

    code = "unsupported_media_type"
    status = 415

    def __init__(self, content_type: str) -> None:
        self.content_type = content_type
        super().__init__(
            f"unsupported Content-Type {content_type[:100]!r}: send {JSON} or {MSGPACK}"
        )

    def body(self) -> dict[str, Any]:
        """The HTTP error body."""
        return {"error": str(self), "code": self.code}


def body_format(content_type: str | None) -> Format | None:
    """The format of a body with this ``Content-Type`` header, or None if unsupported.

    No header means JSON. Parameters (``; charset=utf-8``) are ignored; the
    media type is compared case-insensitively.
    """
    if content_type is None:
        return "json"
    media = content_type.split(";", 1)[0].strip().lower()
    if media == JSON or (media.startswith("application/") and media.endswith("+json")):
        return "json"
    if media in _MSGPACK_TYPES:
        return "msgpack"
    return None


def too_large(limit: int) -> Refused:
    """The 413 refusal of a body over ``limit`` bytes."""
    return Refused("payload_too_large", f"body exceeds {limit} bytes", limit="body", max=limit)


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> Any:
    """The request body, decoded; refused before reading as much as ``limit + 1`` bytes.

    Raises :class:`UnsupportedMediaType` for a body format the API does not
    read, ``payload_too_large`` past ``limit`` bytes (as soon as
    ``Content-Length`` or the bytes so far show it), ``bad_frame`` for a body
    that does not decode or a client that left, ``invalid_argument`` for an
    integer beyond 64 bits. An empty body is ``{}``.
    """
    content_type = headers.get("content-type")
    kind = body_format(content_type)
    if kind is None:
        raise UnsupportedMediaType(content_type or "")
    length = headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused("bad_frame", "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)  # the rest is the guard's to drain
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        if kind == "msgpack":
            return msgpack.unpackb(raw, raw=False, strict_map_key=True)
        doc = orjson.loads(raw)
    except Exception as exc:
        raise Refused("bad_frame", f"the body does not decode: {str(exc)[:200]}") from None
    wide = find_wide_int(raw)
    if wide is not None:
        raise wide.refused()
    return doc
