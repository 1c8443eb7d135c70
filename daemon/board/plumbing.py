"""What every board handler goes through: session, door, refusal page, CSRF, rendering.

:class:`BoardPlumbing` holds the board's sessions and its Jinja2 templates,
and gives the handlers of :mod:`daemon.board.editors` and
:mod:`daemon.board.app` their common steps: the signed-in session (else off
to sign in), the door's charge, a refusal shown as a page, a posted form
checked against the browser's CSRF cookie, a write through the dispatcher,
and a page rendered with the CSRF token it needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from actors.errors import Refused
from actors.window import WEEKDAYS
from daemon.board import forms, present
from daemon.board.access import COOKIE, BoardSessions, cookie_header, new_id
from daemon.board.reads import charge, write
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.services import Services

HERE = Path(__file__).parent
#: Notices a redirect may ask a page to show (never text from the request).
NOTICES = {
    "saved": "Policy saved.",
    "cleared": "Policy removed.",
    "budget": "Budget saved.",
    "replayed": "Dead letter replayed.",
    "cancelled": "Nothing changed.",
}


def templates_env() -> jinja2.Environment:
    """The board's Jinja2 environment: its templates, filters and globals."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        zone=present.in_zone,
        utc=present.utc,
        iso=present.iso,
        limit=present.limit,
        word=present.status_word,
    )
    env.globals.update(weekdays=WEEKDAYS, quote=lambda s: quote(str(s), safe=""))
    return env


class BoardPlumbing:
    """The board's sessions and templates, and the steps every handler shares."""

    def __init__(self, core: Services) -> None:
        self.core = core
        self.sessions = BoardSessions(core)
        self.env = templates_env()
        self.templates = Jinja2Templates(env=self.env)

    def _cookie(self, request: Request) -> tuple[str, bool]:
        """The browser's cookie, or a fresh one (True: it must be set)."""
        cookie = request.cookies.get(COOKIE)
        if cookie and 20 <= len(cookie) <= 100:
            return cookie, False
        return new_id(), True

    def render(
        self,
        request: Request,
        name: str,
        context: dict[str, Any],
        status: int = 200,
        session: Session | None = None,
    ) -> Response:
        """A page, with the CSRF token of the browser's cookie."""
        cookie, fresh = self._cookie(request)
        context = {
            **context,
            "csrf": self.sessions.csrf(cookie),
            "viewer": session,
            "open_mode": self.sessions.open_mode,
            "notice": NOTICES.get(request.query_params.get("notice", "")),
        }
        response = self.templates.TemplateResponse(request, name, context, status_code=status)
        response.headers["cache-control"] = "no-store"
        if fresh:
            response.headers.append("set-cookie", cookie_header(cookie))
        return response

    def session_of(self, request: Request) -> Session | None:
        """The signed-in session of the request (open mode: the open session)."""
        return self.sessions.session(request.cookies.get(COOKIE))

    def to_signin(self, request: Request) -> Response:
        """Off to sign in, coming back here afterwards."""
        back = request.url.path
        return RedirectResponse(f"/board/signin?next={quote(back, safe='/')}", status_code=303)

    def refused(self, request: Request, refused: Refused, session: Session | None) -> Response:
        """A refusal as a page (sign-in for ``unauthenticated``)."""
        if refused.code == "unauthenticated":
            return self.to_signin(request)
        response = self.render(request, "error.html", {"refused": refused}, refused.status, session)
        if "retry_after" in refused.details:
            response.headers["retry-after"] = str(refused.details["retry_after"])
        return response

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """The posted form, or the refusal page when its CSRF token does not match
        the browser's cookie (a cross-site or stale form)."""
        form = forms.parse(await request.body())
        if not self.sessions.csrf_ok(request.cookies.get(COOKIE), form.get("csrf")):
            refused = Refused(
                "forbidden",
                "This form has expired or came from another site. "
                "Reload the page and submit it again.",
            )
            return self.refused(request, refused, self.session_of(request))
        return form

    async def _write(
        self, request: Request, session: Session, op: str, ns: str, **args: Any
    ) -> dict[str, Any]:
        """A form's write: through the dispatcher, the caller's address for the
        admin write limit."""
        return await write(self.core, session, op, ns, client=_client(request), **args)

    async def _guard(
        self,
        request: Request,
        handler: Callable[[Session], Awaitable[Response]],
        ns: str | None = None,
    ) -> Response:
        """Run ``handler`` for the signed-in session, charging the door once."""
        session = self.session_of(request)
        if session is None:
            return self.to_signin(request)
        try:
            charge(self.core, session, ns)
            return await handler(session)
        except Refused as refused:
            return self.refused(request, refused, session)


def _client(request: Request) -> str | None:
    """The HTTP caller's address (keys the admin write limit in open mode)."""
    return request.client.host if request.client is not None else None
