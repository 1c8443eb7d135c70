"""The safety wrapper around the daemon's whole ASGI app: the JSON API and the board.

One wrapper, so that every route, every error and every page of the board
mounted inside gets the same treatment without a route having to remember:

1. **Security headers** (:data:`SECURITY_HEADERS`) on every response. A
   route's own value of one of them is replaced, so the policy lives here
   only; ``Cache-Control: no-store`` is a default a route may override (the
   board's static files).
2. **Cross-site writes refused**: a ``POST``, ``PUT``, ``PATCH`` or
   ``DELETE`` that a browser marks ``Sec-Fetch-Site: cross-site``, or whose
   ``Origin`` is not the request's own origin, is answered 403 ``forbidden``
   ("cross-site request refused") before the app sees it. Non-browser clients
   send neither header and pass.
3. **Lingering close**: when the app answers before it has read the request
   body (a 413, a 401, a refusal), the answer goes out at once and the
   unread body is then read and dropped, up to :data:`MAX_DRAIN` bytes and
   :data:`DRAIN_SECONDS`, before the response ends. Closing with unread bytes
   would make TCP reset the connection, and a client still sending would see
   the reset instead of the answer.
4. An exception escaping the app before it answered becomes a 500
   ``internal`` with the headers above (logged with a reference).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
import trio

from actors.errors import internal_error

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The board uses no inline script or style and no third-party origin: a
#: script injected into a page runs nowhere, a page cannot be framed
#: (clickjacking), and forms post only to the daemon.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),  # frame-ancestors for browsers without CSP 2
    (b"x-content-type-options", b"nosniff"),  # a JSON body is never run as a script
    (b"referrer-policy", b"same-origin"),  # no URL (queue names, ids) leaves the site
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),  # no cross-site embedding of answers
)
_REPLACED = frozenset(name for name, _value in SECURITY_HEADERS)
DEFAULT_HEADERS: tuple[tuple[bytes, bytes], ...] = ((b"cache-control", b"no-store"),)
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS_SITE = "cross-site request refused"
#: An unread body is drained after the answer up to this many bytes...
MAX_DRAIN = 16 * 1_048_576
#: ...and for at most this long; past either the connection is just closed.
DRAIN_SECONDS = 5.0
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _normal_origin(scheme: str, host: str) -> str:
    """``scheme://host[:port]`` in lower case, without the scheme's default port."""
    scheme, host = scheme.strip().lower(), host.strip().lower()
    port = _DEFAULT_PORTS.get(scheme)
    if port is not None and host.endswith(":" + port) and not host.endswith("]"):
        host = host[: -len(port) - 1]
    return f"{scheme}://{host}"


def own_origin(scope: Scope, headers: list[tuple[str, str]]) -> str | None:
    """The origin a same-origin browser would send: the scheme and the ``Host``.

    A reverse proxy's ``X-Forwarded-Proto`` and ``X-Forwarded-Host`` win when
    present: a cross-site page cannot make a browser send those (they are not
    CORS-safelisted, and the daemon answers no preflight), so trusting them
    can only make a same-origin request match, never a cross-site one.
    """
    first = {}
    for name, value in headers:
        first.setdefault(name, value)
    scheme = first.get("x-forwarded-proto", scope.get("scheme") or "http").split(",")[0]
    host = first.get("x-forwarded-host", first.get("host"))
    if not host:
        return None
    return _normal_origin(scheme, host.split(",")[0])


def cross_site(scope: Scope, headers: list[tuple[str, str]]) -> bool:
    """True if this request changes state and a browser says it comes from elsewhere."""
    if scope.get("method") not in UNSAFE_METHODS:
        return False
    origins = [v for n, v in headers if n == "origin"]
    fetch_site = [v.strip().lower() for n, v in headers if n == "sec-fetch-site"]
    if "cross-site" in fetch_site:
        return True
    if not origins:
        return False
    if len(origins) > 1:
        return True
    own = own_origin(scope, headers)
    scheme, sep, host = origins[0].partition("://")
    return own is None or not sep or _normal_origin(scheme, host) != own


def _has_body(headers: list[tuple[str, str]]) -> bool:
    for name, value in headers:
        if name == "transfer-encoding" or (name == "content-length" and value.strip() != "0"):
            return True
    return False


def _declared_length(headers: list[tuple[str, str]]) -> int | None:
    for name, value in headers:
        if name == "content-length" and value.strip().isdigit():
            return int(value)
    return None


class _Exchange:
    """One request/response pair as the guard sees it."""

    def __init__(self, receive: Receive, send: Send, headers: list[tuple[str, str]]) -> None:
        self._receive = receive
        self._send = send
        self.body_done = not _has_body(headers)
        self.declared = _declared_length(headers)
        self.started = False
        self.complete = False
        self.end_held = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" or not message.get("more_body"):
            self.body_done = True
        return message

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.started = True
            message = {**message, "headers": _secured(message.get("headers", []))}
        elif kind == "http.response.body" and not message.get("more_body"):
            self.complete = True
            if not self.body_done:
                # Hold the end: the body goes out now, the unread request body
                # is drained, then the response ends (see finish()).
                self.end_held = True
                message = {**message, "more_body": True}
        await self._send(message)

    async def reply(self, status: int, body: dict[str, Any]) -> None:
        """Answer from the guard itself (JSON)."""
        raw = orjson.dumps(body)
        await self.send({
            "type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(raw)).encode())],
        })  # fmt: skip
        await self.send({"type": "http.response.body", "body": raw})

    async def finish(self) -> None:
        """End a response whose end was held, after draining the unread body."""
        if not self.end_held:
            return
        if self.declared is None or self.declared <= MAX_DRAIN:
            with trio.move_on_after(DRAIN_SECONDS):
                drained = 0
                while not self.body_done and drained <= MAX_DRAIN:
                    drained += len((await self.receive()).get("body", b""))
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


def _secured(headers: Any) -> list[tuple[bytes, bytes]]:
    kept = [(bytes(n), bytes(v)) for n, v in headers if bytes(n).lower() not in _REPLACED]
    present = {n.lower() for n, _v in kept}
    defaults = [(n, v) for n, v in DEFAULT_HEADERS if n not in present]
    return kept + list(SECURITY_HEADERS) + defaults


class HttpGuard:
    """ASGI middleware: security headers, cross-site refusal, lingering close."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in scope["headers"]]
        exchange = _Exchange(receive, send, headers)
        if cross_site(scope, headers):
            await exchange.reply(403, {"error": CROSS_SITE, "code": "forbidden"})
        else:
            try:
                await self.app(scope, exchange.receive, exchange.send)
            except Exception as exc:
                refused = internal_error(exc)
                if exchange.started:
                    if not exchange.complete:
                        raise  # mid-answer: nothing better than closing
                else:
                    await exchange.reply(refused.status, {
                        "error": refused.message, "code": refused.code, **refused.details,
                    })  # fmt: skip
        await exchange.finish()
