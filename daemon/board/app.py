"""The board's Starlette app: routes, sign-in, CSRF, and the page handlers.

:class:`daemon.transport.http_app.HttpApp` hands it ``GET /`` and every path under
``/board``. Pages are rendered on the server with Jinja2 from
:mod:`daemon.board.views`; the editors are plain HTML forms that post,
redirect, and work without JavaScript; the static script only adds local
times, focus on a returned-to control, and live updates over SSE. No inline
script or style anywhere (the Content-Security-Policy forbids them).

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
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from actors.errors import Refused
from actors.window import WEEKDAYS
from daemon.board import forms, live, present, views
from daemon.board.access import COOKIE, BoardSessions, cookie_header, new_id
from daemon.board.reads import charge, read, write
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.services import Services

HERE = Path(__file__).parent
#: Where sign-in may send the browser back to: the board's own pages.
LOCAL_PATH = re.compile(r"/|/board(/[A-Za-z0-9._:%/-]*)?")
Handler = Callable[[Request], Awaitable[Response]]
#: Notices a redirect may ask a page to show (never text from the request).
NOTICES = {
    "saved": "Policy saved.",
    "cleared": "Policy removed.",
    "budget": "Budget saved.",
    "replayed": "Dead letter replayed.",
    "cancelled": "Nothing changed.",
}


class Board:
    """The board of one daemon: its sessions, its live pulse and its app."""

    def __init__(self, core: Services) -> None:
        self.core = core
        self.sessions = BoardSessions(core)
        self.pulse = live.Pulse(core)
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
        self.env = env
        self.templates = Jinja2Templates(env=env)
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

    # -- plumbing -----------------------------------------------------------------

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

    # -- editors ------------------------------------------------------------------

    async def policy_edit(self, request: Request) -> Response:
        """The policy editor: a full page; saves over a plain form post."""
        ns, queue = request.path_params["ns"], request.path_params["queue"]
        back = f"/board/ns/{quote(ns)}/q/{quote(queue)}"

        async def page(session: Session) -> Response:
            current = views.headers(self.core, session, ns, queue)
            if not current and request.method == "GET":
                read(self.core, session, "status", ns)  # an unknown namespace: its refusal
            policy = current[0]["policy"] if current else None
            values, error, field, status = forms.policy_form(policy), None, None, 200
            if request.method == "POST":
                form = await self._form(request)
                if isinstance(form, Response):
                    return form
                action = form.get("action", "save")
                try:
                    if action == "clear":
                        await self._write(request, session, "policy_clear", ns, queue=queue)
                        return RedirectResponse(f"{back}?notice=cleared#edit-policy", 303)
                    args = forms.policy_args(form)
                    await self._write(request, session, "policy_set", ns, queue=queue, **args)
                    return RedirectResponse(f"{back}?notice=saved#edit-policy", 303)
                except Refused as refused:
                    values, error, field, status = _refill(refused, values, form)
            audit = views.maybe_audit(self.core, session, ns, "queue", queue)
            return self.render(
                request,
                "policy_edit.html",
                {
                    "ns": ns,
                    "queue": queue,
                    "policy": policy,
                    "values": values,
                    "error": error,
                    "field": field,
                    "back": back,
                    "audit": audit,
                },
                status,
                session,
            )

        return await self._guard(request, page, ns)

    async def budget_edit(self, request: Request) -> Response:
        """The budget editor: a full page; saves over a plain form post."""
        ns, key = request.path_params["ns"], request.path_params["key"]
        back = f"/board/ns/{quote(ns)}/budgets"

        async def page(session: Session) -> Response:
            data = views.budget(self.core, session, ns, key)
            values, error, field, status = forms.budget_form(data["budget"]), None, None, 200
            if request.method == "POST":
                form = await self._form(request)
                if isinstance(form, Response):
                    return form
                try:
                    args = forms.budget_args(form)
                    await self._write(request, session, "budget_put", ns, key=key, **args)
                    return RedirectResponse(f"{back}?notice=budget#edit-budget-{quote(key)}", 303)
                except Refused as refused:
                    values, error, field, status = _refill(refused, values, form)
            return self.render(
                request,
                "budget_edit.html",
                {
                    "ns": ns,
                    "key": key,
                    "values": values,
                    "error": error,
                    "field": field,
                    "back": back,
                    **data,
                },
                status,
                session,
            )

        return await self._guard(request, page, ns)

    async def replay(self, request: Request) -> Response:
        """Replay one dead letter (or all of the queue's), then back to the queue."""
        ns, queue = request.path_params["ns"], request.path_params["queue"]

        async def page(session: Session) -> Response:
            form = await self._form(request)
            if isinstance(form, Response):
                return form
            job_id = form.get("job_id", "")
            if job_id:
                await self._write(
                    request, session, "dead_replay", ns, job_ids=[job_id], queue=queue
                )
            else:
                await self._write(request, session, "dead_replay", ns, all=True, queue=queue)
            return RedirectResponse(
                f"/board/ns/{quote(ns)}/q/{quote(queue)}?notice=replayed#dead", 303
            )

        return await self._guard(request, page, ns)

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


def _client(request: Request) -> str | None:
    """The HTTP caller's address (keys the admin write limit in open mode)."""
    return request.client.host if request.client is not None else None


def _refill(
    refused: Refused, values: dict[str, Any], form: dict[str, str]
) -> tuple[dict[str, Any], str, str | None, int]:
    """An editor's form shown again after the verb refused it: the values as
    typed, the message, the field it names and the status. A refusal a form
    cannot help with (forbidden, not found) goes on to the error page."""
    if refused.code not in ("invalid_argument", "conflict", "rate_limited"):
        raise refused
    typed = {**values, **{k: v for k, v in form.items() if k in values}}
    return typed, refused.message, forms.field_of(refused), refused.status
