"""A minimal blocking JSON-lines client for the benchmarks: ``socket`` + ``orjson``.

Not the SDK: no retries, no session object, no events machinery. Frames are
encoded with orjson and written with one ``sendall`` (a batch of pipelined
frames is one ``sendall`` too); answers are read with a buffered ``recv`` loop
and split on ``\\n``. Server-push events (frames without an ``id``) are
skipped. Answers to pipelined requests may arrive out of order
(PROTOCOL.md, Socket transport), so callers match them by ``id``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

_NL = orjson.OPT_APPEND_NEWLINE
RECV_BYTES = 262_144


class WireError(Exception):
    """The daemon refused a call, or the connection broke."""


class WireClient:
    """One unix-socket connection speaking PROTOCOL.md's JSON lines."""

    def __init__(self, path: str | Path, timeout: float = 60.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._buf = bytearray()
        self._pos = 0
        self._next_id = 0

    # -- sending ---------------------------------------------------------------

    def frame(self, op: str, args: dict[str, Any]) -> tuple[int, bytes]:
        """A fresh request id and the encoded frame for ``op`` with ``args``."""
        self._next_id += 1
        req_id = self._next_id
        return req_id, orjson.dumps({"id": req_id, "op": op, **args}, option=_NL)

    def send(self, data: bytes) -> None:
        """Write already-encoded frames."""
        self.sock.sendall(data)

    def request(self, op: str, **args: Any) -> int:
        """Send one request; return its id (read the answer with :meth:`read`)."""
        req_id, data = self.frame(op, args)
        self.sock.sendall(data)
        return req_id

    def request_many(self, calls: Iterable[tuple[str, dict[str, Any]]]) -> list[int]:
        """Pipeline several requests in one write; return their ids in order."""
        ids: list[int] = []
        chunks: list[bytes] = []
        for op, args in calls:
            req_id, data = self.frame(op, args)
            ids.append(req_id)
            chunks.append(data)
        self.sock.sendall(b"".join(chunks))
        return ids

    # -- receiving -------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        """The next answer frame (events are skipped)."""
        while True:
            frame = self._next_frame()
            if "id" in frame:
                return frame

    def _next_frame(self) -> dict[str, Any]:
        buf = self._buf
        while True:
            end = buf.find(b"\n", self._pos)
            if end >= 0:
                line = buf[self._pos : end]
                self._pos = end + 1
                return orjson.loads(line)
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            chunk = self.sock.recv(RECV_BYTES)
            if not chunk:
                raise WireError("the daemon closed the connection")
            buf += chunk

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """One request, one answer (nothing else may be in flight)."""
        req_id = self.request(op, **args)
        frame = self.read()
        if frame.get("id") != req_id:
            raise WireError(f"answer to {frame.get('id')!r} while waiting for {req_id}")
        return frame

    def ok(self, op: str, **args: Any) -> dict[str, Any]:
        """:meth:`call`, raising :class:`WireError` on a refusal."""
        frame = self.call(op, **args)
        if not frame.get("ok"):
            raise WireError(f"{op} refused: {frame.get('error')}")
        return frame

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
