"""The board's Starlette app: its routes, the read-only pages, sign-in and live updates.

:class:`daemon.transport.http_app.HttpApp` hands it ``GET /`` and every path under
``/board``. Pages are rendered on the server with Jinja2 from
:mod:`daemon.board.views`; the editors (:mod:`daemon.board.editors`) are plain
HTML forms that post, redirect, and work without JavaScript; the static script
only adds local times, focus on a returned-to control, and live updates over
SSE. No inline script or style anywhere (the Content-Security-Policy forbids
them). What every handler goes through is :mod:`daemon.board.plumbing`.

Routes::

    GET  /  and /board                         the namespaces
    GET  /board/ns/{ns}                         its queues' headers
    GET  /board/ns/{ns}/q/{queue}               one queue: header, picture, jobs, dead, audit
    GET|POST /board/ns/{ns}/q/{queue}/policy    the policy editor
    POST /board/ns/{ns}/q/{queue}/replay        replay a dead letter
    GET  /board/ns/{ns}/budgets                 budgets and their levels
    GET|POST /board/ns/{ns}/budgets/{key}       the budget editor
    GET  /board/ns/{ns}/quota                   quota usage against each limit
    GET  /board/ns/{ns}/audit                   the audit history
    GET  /board/ns/{ns}/events?queue=           Server-Sent Events
    GET|POST /board/signin, POST /board/signout
    GET  /board/static/...
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from actors.errors import Refused
from daemon.board import live, views
from daemon.board.access import COOKIE, cookie_header
from daemon.board.editors import BoardEditors
from daemon.board.plumbing import HERE
from daemon.board.reads import charge
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.services import Services

#: Where sign-in may send the browser back to: the board's own pages.
LOCAL_PATH = re.compile(r"/|/board(/[A-Za-z0-9._:%/-]*)?")
Handler = Callable[[Request], Awaitable[Response]]


class Board(BoardEditors):
    """The board of one daemon: its sessions, its live pulse and its app."""

    def __init__(self, core: Services) -> None:
        super().__init__(core)
        self.pulse = live.Pulse(core)
        q = "/board/ns/{ns}/q/{queue}"
        self.app = Starlette(
            routes=[
                Route("/", self.overview),
                Route("/board", self.overview),
                Route("/board/", self.overview),
                Route("/board/signin", self.signin, methods=["GET", "POST"]),
                Route("/board/signout", self.signout, methods=["POST"]),
                Route("/board/ns/{ns}", self.namespace),
                Route("/board/ns/{ns}/events", self.events),
                Route("/board/ns/{ns}/budgets", self.budgets),
                Route("/board/ns/{ns}/budgets/{key}", self.budget_edit, methods=["GET", "POST"]),
                Route("/board/ns/{ns}/quota", self.quota),
                Route("/board/ns/{ns}/audit", self.audit),
                Route(q, self.queue),
                Route(q + "/policy", self.policy_edit, methods=["GET", "POST"]),
                Route(q + "/replay", self.replay, methods=["POST"]),
                Mount("/board/static", StaticFiles(directory=HERE / "static"), name="static"),
            ]
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    # -- pages --------------------------------------------------------------------

    async def _page(
        self,
        request: Request,
        template: str,
        data: Callable[[Session], dict[str, Any]],
        ns: str | None = None,
    ) -> Response:
        """A read-only page: ``template`` with what ``data`` reads for the session."""

        async def page(session: Session) -> Response:
            return self.render(request, template, data(session), session=session)

        return await self._guard(request, page, ns)

    async def overview(self, request: Request) -> Response:
        """The namespaces the viewer may see."""
        return await self._page(
            request, "overview.html", lambda s: {"namespaces": views.overview(self.core, s)}
        )

    async def namespace(self, request: Request) -> Response:
        """A namespace's queues, each with its header."""
        ns = request.path_params["ns"]
        return await self._page(
            request, "namespace.html",
            lambda s: {"ns": ns, "headers": views.headers(self.core, s, ns)}, ns,
        )  # fmt: skip

    async def queue(self, request: Request) -> Response:
        """One queue: header, picture, pending (with chips), running, dead, audit."""
        ns, queue = request.path_params["ns"], request.path_params["queue"]
        return await self._page(
            request, "queue.html",
            lambda s: {"ns": ns, "queue": queue, **views.queue_page(self.core, s, ns, queue)}, ns,
        )  # fmt: skip

    async def budgets(self, request: Request) -> Response:
        """The namespace's budgets with their token levels over time."""
        ns = request.path_params["ns"]
        return await self._page(
            request, "budgets.html", lambda s: {"ns": ns, **views.budgets(self.core, s, ns)}, ns
        )

    async def quota(self, request: Request) -> Response:
        """Quota usage against each limit."""
        ns = request.path_params["ns"]
        return await self._page(
            request, "quota.html", lambda s: {"ns": ns, **views.quota(self.core, s, ns)}, ns
        )

    async def audit(self, request: Request) -> Response:
        """The namespace's audit history, newest first."""
        ns = request.path_params["ns"]
        after_text = request.query_params.get("after", "")
        after = int(after_text) if after_text.isdigit() else None
        return await self._page(
            request, "audit.html",
            lambda s: {"ns": ns, "audit": views.audit(self.core, s, ns, after)}, ns,
        )  # fmt: skip

    # -- sign-in --------------------------------------------------------------------

    async def signin(self, request: Request) -> Response:
        """Ask for a token once; keep a session cookie."""
        target = request.query_params.get("next", "/")
        if not LOCAL_PATH.fullmatch(target) or "//" in target or ".." in target:
            target = "/"  # never a redirect anywhere but a board page
        if self.sessions.open_mode:
            return RedirectResponse(target, 303)
        error = None
        status = 200
        if request.method == "POST":
            form = await self._form(request)
            if isinstance(form, Response):
                return form
            try:
                cookie = self.sessions.sign_in(form.get("token", "").strip())
            except Refused:
                error, status = "That token is not known here.", 401
            else:
                response = RedirectResponse(target, 303)
                response.headers.append("set-cookie", cookie_header(cookie))
                return response
        return self.render(request, "signin.html", {"next": target, "error": error}, status)

    async def signout(self, request: Request) -> Response:
        """Forget the session and its cookie."""
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        self.sessions.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse("/board/signin" if not self.sessions.open_mode else "/", 303)
        response.headers.append("set-cookie", cookie_header("", clear=True))
        return response

    # -- live -----------------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        """Server-Sent Events for a namespace page (or one queue's page)."""
        ns = request.path_params["ns"]
        queue = request.query_params.get("queue") or None
        cookie = request.cookies.get(COOKIE)
        session = self.sessions.session(cookie)
        if session is None:
            return Response(status_code=204)  # 204 tells EventSource not to reconnect
        try:
            charge(self.core, session, ns)
            self.fragments(session, ns, queue)  # refusals before the stream starts
        except Refused as refused:
            return Response(refused.message, status_code=refused.status)
        stream = live.stream(
            self.core,
            self.pulse,
            lambda: self.sessions.session(cookie),
            lambda s: self.fragments(s, ns, queue),
        )
        return StreamingResponse(
            stream, media_type="text/event-stream", headers={"cache-control": "no-store"}
        )

    def fragments(
        self, session: Session, ns: str, queue: str | None
    ) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """The live parts of a page, rendered: header counts, and on a queue's
        page its pending and running lists."""
        headers = views.headers(self.core, session, ns, queue)
        counts = self.env.get_template("_counts.html")
        out = {f"live-{h['queue']}": counts.render(h=h) for h in headers}
        if queue is not None and headers:
            h = headers[0]
            pending = views.jobs(self.core, session, ns, queue, "pending")
            running = views.jobs(self.core, session, ns, queue, "running")
            out["pending-list"] = self.env.get_template("_pending.html").render(
                pending=pending, h=h
            )
            out["running-list"] = self.env.get_template("_running.html").render(
                running=running, h=h
            )
        return out, headers


def board_app(core: Services) -> Board:
    """The board for ``core`` (built once per HTTP app)."""
    return Board(core)
