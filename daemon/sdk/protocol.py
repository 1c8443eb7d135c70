"""The client side of the socket protocol, sans I/O: requests out, frames in.

:class:`ClientProtocol` numbers requests, splits the daemon's bytes into
frames and says what each one is: an :class:`Answer` to a request it still
waits for, a :class:`PushEvent` (a doorbell), or a :class:`Fatal` error that
names no request (``frame_too_large``; the daemon closes the connection after
it). Both clients are thin shells around it.

A caller may give up on a request (a timeout, a cancellation) while the daemon
still works on it. If that request was a claim and the daemon answers it with
jobs after all, :meth:`ClientProtocol.feed` reports them as :class:`Orphaned`
and :meth:`ClientProtocol.release_orphans` builds the ``release`` requests
that give them back at once, instead of leaving them running until their
lease lapses.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

import attrs
import orjson

from daemon.sdk.errors import ConnectionLost, SluicegateError, error_from_wire

_CLAIMS = frozenset({"claim_next", "claim"})


@attrs.frozen
class Answer:
    """The daemon's answer to request ``req_id``."""

    req_id: int
    frame: dict[str, Any]

    @property
    def ok(self) -> bool:
        """True for a success frame."""
        return self.frame.get("ok") is True

    def result(self) -> dict[str, Any]:
        """The verb's result (the frame without ``id`` and ``ok``); raise its error."""
        if not self.ok:
            raise error_from_wire(self.frame.get("error") or {})
        return {k: v for k, v in self.frame.items() if k not in ("id", "ok")}


@attrs.frozen
class PushEvent:
    """A server-push event, e.g. ``{"event": "doorbell", "queue", "pending"}``."""

    frame: dict[str, Any]


@attrs.frozen
class Orphaned:
    """Jobs claimed by a request its caller gave up on; release them."""

    jobs: list[dict[str, Any]]


@attrs.frozen
class Fatal:
    """An error that names no request; the connection cannot go on."""

    error: SluicegateError


Incoming = Answer | PushEvent | Orphaned | Fatal


class ClientProtocol:
    """Request numbering, frame splitting and routing state of one connection."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._buf = bytearray()
        #: Requests sent and not answered yet: id -> op.
        self._waiting: dict[int, str] = {}
        #: Requests whose caller gave up: id -> op.
        self._abandoned: dict[int, str] = {}

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered yet (abandoned ones included)."""
        return len(self._waiting) + len(self._abandoned)

    def request(self, op: str, args: Mapping[str, Any]) -> tuple[int, bytes]:
        """Number a request; return its id and the bytes to send."""
        req_id = next(self._ids)
        line = orjson.dumps({**args, "id": req_id, "op": op}, option=orjson.OPT_APPEND_NEWLINE)
        self._waiting[req_id] = op
        return req_id, line

    def abandon(self, req_id: int) -> None:
        """The caller no longer waits for ``req_id``; its answer will be dropped."""
        op = self._waiting.pop(req_id, None)
        if op is not None:
            self._abandoned[req_id] = op

    def salvage(self, answer: Answer, op: str) -> Orphaned | None:
        """Jobs an answer claimed that its caller will not see (it was cancelled)."""
        return _orphans(answer, op)

    def release_orphans(self, jobs: list[dict[str, Any]]) -> bytes:
        """``release`` requests for ``jobs``, sent fire-and-forget (their answers
        are dropped, so they ask for the minimal one)."""
        out = bytearray()
        for job in jobs:
            req_id, line = self.request(
                "release", {"job_id": job["id"], "lease": job["lease"], "answer": "minimal"}
            )
            self.abandon(req_id)
            out += line
        return bytes(out)

    def feed(self, data: bytes) -> list[Incoming]:
        """Take bytes from the daemon; return the frames they completed."""
        self._buf += data
        out: list[Incoming] = []
        start = 0
        while (end := self._buf.find(b"\n", start)) >= 0:
            line = bytes(self._buf[start:end])
            start = end + 1
            if line.strip():
                item = self._frame(line)
                if item is not None:
                    out.append(item)
        del self._buf[:start]
        return out

    def _frame(self, line: bytes) -> Incoming | None:
        try:
            frame = orjson.loads(line)
        except orjson.JSONDecodeError:
            return Fatal(ConnectionLost("the daemon sent a frame that is not JSON"))
        if not isinstance(frame, dict):
            return Fatal(ConnectionLost("the daemon sent a frame that is not an object"))
        if "event" in frame and "id" not in frame:
            return PushEvent(frame)
        req_id = frame.get("id")
        if req_id is None:
            return Fatal(error_from_wire(frame.get("error") or {}))
        if not isinstance(req_id, int):
            return None  # not one of ours: we only send integer ids
        if req_id in self._waiting:
            self._waiting.pop(req_id)
            return Answer(req_id, frame)
        op = self._abandoned.pop(req_id, None)
        if op is not None:
            return _orphans(Answer(req_id, frame), op)
        return None


def _orphans(answer: Answer, op: str) -> Orphaned | None:
    if op not in _CLAIMS or not answer.ok:
        return None
    frame = answer.frame
    if op == "claim":
        jobs = [frame["job"]] if isinstance(frame.get("job"), dict) else []
    else:
        jobs = [item["job"] for item in frame.get("jobs") or [] if isinstance(item, dict)]
    return Orphaned(jobs) if jobs else None


def drop_none(**args: Any) -> dict[str, Any]:
    """Arguments without the ones left out (None)."""
    return {k: v for k, v in args.items() if v is not None}


class JobOptions(TypedDict, total=False):
    """Optional fields of a job to enqueue (PROTOCOL.md, Producing)."""

    priority: int
    delay_ms: int
    ready_at: int
    max_attempts: int
    lease_ms: int
    unique_key: str
    debounce_ms: int
    budgets: list[dict[str, Any]]


def job_spec(queue: str, type: str, payload: Any = None, **options: Unpack[JobOptions]) -> dict:
    """One job for ``enqueue`` or ``enqueue_many`` (options left None are left out)."""
    return drop_none(queue=queue, type=type, payload=payload, **options)
