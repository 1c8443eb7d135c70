"""The SDK's errors: one class per outcome, built from the wire's error codes.

Every refusal from the daemon becomes a :class:`SluicegateError` subclass that
carries the machine code, the message, the HTTP status and the details, so a
caller branches on the class (or ``code``) and never on message text. Codes the
SDK does not know yet map by their status (a new 429 code is still
:class:`RateLimited`, so the retry layer still treats it as retryable).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SluicegateError(Exception):
    """A call the daemon refused, or a connection that could not carry it.

    ``retry_after`` (seconds) is set when the daemon said when to try again.
    ``details`` holds every other field of the wire error (``field``,
    ``limit``, ``value``, ``max``, ``job_status`` ...).
    """

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None = None,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details: dict[str, Any] = dict(details or {})
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """True for a 429: the same call may succeed later (seed 001)."""
        return self.status == 429

    @property
    def field(self) -> str | None:
        """The argument an ``invalid_argument`` names."""
        return self.details.get("field")

    @property
    def limit(self) -> str | None:
        """The limit a door or quota refusal names."""
        return self.details.get("limit")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, status={self.status})"


class BadFrame(SluicegateError):
    """``bad_frame``: the daemon could not read a frame (a client bug)."""


class InvalidArgument(SluicegateError):
    """``invalid_argument``: a malformed argument; ``field`` names it."""


class Unauthenticated(SluicegateError):
    """``unauthenticated``: no token, or a wrong one."""


class Forbidden(SluicegateError):
    """``forbidden``: not granted, or outside the token's scope. Retrying will not help."""


class NotFound(SluicegateError):
    """``not_found``: absent, or not the caller's to see."""


class Conflict(SluicegateError):
    """``conflict``: the thing is in a state that does not allow the call."""


class LeaseLost(SluicegateError):
    """``lease_lost``: the lease lapsed and the job was taken over or reaped."""


class Deferred(SluicegateError):
    """``deferred``: ``claim`` of a job that admission holds back."""


class TooLarge(SluicegateError):
    """A frame or payload over a size cap (413)."""


class FrameTooLarge(TooLarge):
    """``frame_too_large``: the daemon closes the connection after it."""


class PayloadTooLarge(TooLarge):
    """``payload_too_large``: a job payload over ``max_item_bytes``."""


class RateLimited(SluicegateError):
    """Any 429: the same call may succeed later; the SDK retries it."""


class QueueFull(RateLimited):
    """``queue_full``: ``max_pending`` reached with ``on_excess = "reject"``."""


class TooManyWaiters(RateLimited):
    """``too_many_waiters``: every waiting-claim slot is taken."""


class QuotaExceeded(SluicegateError):
    """``quota_exceeded`` (403): a cap retrying will not lift."""


class Unavailable(SluicegateError):
    """A 503: the daemon cannot serve this now (``unavailable``: the store cannot
    write, or the daemon is at its connection cap)."""


class QuotaUnavailable(Unavailable):
    """``quota_unavailable``: the namespace's quota cannot be read (fail closed)."""


class ShuttingDown(Unavailable):
    """``shutting_down``: the daemon is draining."""


class InternalError(SluicegateError):
    """``internal``: a daemon bug; the message carries the log reference."""


class ConnectionLost(SluicegateError):
    """The connection closed before the answer came (code ``connection_lost``)."""

    def __init__(self, message: str) -> None:
        super().__init__("connection_lost", message)


#: The wire's error codes (PROTOCOL.md, Errors) and their classes.
CODES: dict[str, type[SluicegateError]] = {
    "bad_frame": BadFrame,
    "invalid_argument": InvalidArgument,
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "conflict": Conflict,
    "lease_lost": LeaseLost,
    "deferred": Deferred,
    "frame_too_large": FrameTooLarge,
    "payload_too_large": PayloadTooLarge,
    "queue_full": QueueFull,
    "rate_limited": RateLimited,
    "too_many_waiters": TooManyWaiters,
    "quota_exceeded": QuotaExceeded,
    "quota_unavailable": QuotaUnavailable,
    "shutting_down": ShuttingDown,
    "unavailable": Unavailable,
    "internal": InternalError,
}

#: Codes the SDK does not know yet: the class of their status.
STATUSES: dict[int, type[SluicegateError]] = {
    400: BadFrame,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: InvalidArgument,
    429: RateLimited,
    500: InternalError,
    503: Unavailable,
}


def error_from_wire(error: Mapping[str, Any]) -> SluicegateError:
    """The typed exception for a wire ``error`` object."""
    code = str(error.get("code", "unknown"))
    status = error.get("status")
    status = status if isinstance(status, int) else None
    message = str(error.get("message", ""))
    details = {k: v for k, v in error.items() if k not in ("code", "message", "status")}
    retry_after = details.get("retry_after")
    if not isinstance(retry_after, int | float) or isinstance(retry_after, bool):
        retry_after = None
    cls = CODES.get(code) or STATUSES.get(status or 0, SluicegateError)
    return cls(code, message, status, details, retry_after)
