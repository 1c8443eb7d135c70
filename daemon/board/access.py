"""Who is looking at the board: the session cookie, sign-in, and CSRF tokens.

Every browser gets one cookie, ``sluicegate_board``: a random id (HttpOnly,
SameSite=Strict, Path=/). It anchors the CSRF token of every form (an HMAC of
the id under a key that lives only in this process), so a form is refused
without the cookie it was rendered for. Signing in maps a fresh id to the
token given (the id is rotated, so an id planted before sign-in is worth
nothing); the token stays in this process's memory only, and is checked again
on every request, so a token removed from the config stops working at the
next reload. Open mode needs no sign-in: every browser is the open session.

Signed-in sessions are bounded: at most :data:`MAX_SESSIONS`, each forgotten
after :data:`IDLE_MS` without a request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from typing import TYPE_CHECKING

from actors.errors import Refused
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.services import Services

COOKIE = "sluicegate_board"
MAX_SESSIONS = 10_000
IDLE_MS = 12 * 3_600_000


def new_id() -> str:
    """A fresh cookie value (32 random bytes)."""
    return secrets.token_urlsafe(32)


def cookie_header(value: str, *, clear: bool = False) -> str:
    """The ``Set-Cookie`` value for the board's cookie."""
    age = "; Max-Age=0" if clear else ""
    return f"{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/{age}"


class BoardSessions:
    """Signed-in board sessions and the CSRF key of this process."""

    def __init__(self, core: Services) -> None:
        self._core = core
        self._key = secrets.token_bytes(32)
        self._tokens: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def csrf(self, cookie: str) -> str:
        """The CSRF token of forms rendered for ``cookie``."""
        return hmac.new(self._key, cookie.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, cookie: str | None, given: str | None) -> bool:
        """True when ``given`` is the CSRF token of ``cookie``."""
        if not cookie or not given:
            return False
        return hmac.compare_digest(self.csrf(cookie), given)

    def session(self, cookie: str | None) -> Session | None:
        """The verb session of the browser with ``cookie``; None when it must sign in."""
        auth = self._core.auth
        if auth.open_mode:
            return auth.new_session()
        if not cookie:
            return None
        entry = self._tokens.get(cookie)
        now = self._core.clock.now_ms()
        if entry is None or now - entry[1] > IDLE_MS:
            self._tokens.pop(cookie, None)
            return None
        try:
            session = auth.check(entry[0])
        except Refused:  # the token was removed from the config
            del self._tokens[cookie]
            return None
        self._tokens[cookie] = (entry[0], now)
        self._tokens.move_to_end(cookie)
        return session

    def sign_in(self, token: str) -> str:
        """Check ``token`` (``unauthenticated`` if wrong); the new cookie value."""
        self._core.auth.check(token)
        cookie = new_id()
        self._tokens[cookie] = (token, self._core.clock.now_ms())
        while len(self._tokens) > MAX_SESSIONS:
            self._tokens.popitem(last=False)
        return cookie

    def sign_out(self, cookie: str | None) -> None:
        """Forget the session of ``cookie``."""
        if cookie:
            self._tokens.pop(cookie, None)

    @property
    def open_mode(self) -> bool:
        """True when the daemon has no tokens: no sign-in."""
        return self._core.auth.open_mode
