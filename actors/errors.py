"""Refusals: the error codes of the wire contract, as values.

A verb that cannot do what it was asked raises :class:`Refused` with a code from
:data:`STATUS`; the transports translate it once, at their boundary, into a
socket failure frame or an HTTP error body. Nothing is written by a refused call.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

log = logging.getLogger("sluicegate")

#: Every error code of PROTOCOL.md with its HTTP status.
STATUS: dict[str, int] = {
    "bad_frame": 400,
    "invalid_argument": 422,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "lease_lost": 409,
    "deferred": 409,
    "frame_too_large": 413,
    "payload_too_large": 413,
    "queue_full": 429,
    "rate_limited": 429,
    "too_many_waiters": 429,
    "quota_exceeded": 403,
    "quota_unavailable": 503,
    "shutting_down": 503,
    # The store cannot write (disk full, I/O error), or the daemon is at its
    # connection cap: the same call may succeed later.
    "unavailable": 503,
    "internal": 500,
}


class Refused(Exception):
    """A call refused with a protocol error ``code``, a message and details."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        if code not in STATUS:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    @property
    def status(self) -> int:
        """The HTTP status of this refusal."""
        return STATUS[self.code]

    def to_wire(self) -> dict[str, Any]:
        """The socket ``error`` object: code, message, status and details."""
        return {"code": self.code, "message": self.message, "status": self.status, **self.details}

    def __repr__(self) -> str:
        return f"Refused({self.code!r}, {self.message!r}, {self.details!r})"


def invalid(field: str, message: str) -> Refused:
    """An ``invalid_argument`` refusal naming ``field``."""
    return Refused("invalid_argument", message, field=field)


def not_found(what: str) -> Refused:
    """A ``not_found`` refusal; the same text whether absent or not the caller's."""
    return Refused("not_found", f"{what} not found")


#: Classifiers of exceptions that are outcomes, not bugs: each returns the
#: refusal for an exception it knows, else None. The store registers one (a full
#: disk answers ``unavailable``), so this module needs no store of its own.
OUTCOMES: list[Callable[[BaseException], Refused | None]] = []


def internal_error(exc: BaseException) -> Refused:
    """Log a bug with a short reference and return the ``internal`` refusal naming it.

    An exception one of :data:`OUTCOMES` knows is that outcome instead (not logged
    as a bug).
    """
    for outcome in OUTCOMES:
        refused = outcome(exc)
        if refused is not None:
            return refused
    ref = secrets.token_hex(4)
    log.error("internal error ref=%s: %r", ref, exc, exc_info=exc)
    return Refused("internal", f"internal error (ref {ref}); see the daemon log", ref=ref)
