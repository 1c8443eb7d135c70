"""The board's writes: the policy and budget editors and the dead-letter replay.

Each is a plain HTML form that posts and redirects, and works without
JavaScript. A post is checked against the browser's CSRF cookie, written
through the dispatcher as the signed-in session (the admin write limit keyed
by the caller's address), and on success redirects back with a notice. A
refusal the form can help with (a bad field, a conflict, the write limit)
shows the form again with the values as typed and the field marked; any
other goes to the error page. The policy and budget editors have a second
submit, "Preview": the form's change goes to ``what_if`` instead (nothing is
written) and the page shows what it would do, the form kept as typed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from actors.errors import Refused
from daemon.board import forms, views
from daemon.board.plumbing import BoardPlumbing
from daemon.board.reads import read
from daemon.session import Session


class BoardEditors(BoardPlumbing):
    """The board's form handlers; :class:`~daemon.board.app.Board` routes to them."""

    async def policy_edit(self, request: Request) -> Response:
        """The policy editor: a full page; saves over a plain form post."""
        ns, queue = request.path_params["ns"], request.path_params["queue"]
        back = f"/board/ns/{quote(ns)}/q/{quote(queue)}"

        async def page(session: Session) -> Response:
            current = views.headers(self.core, session, ns, queue)
            if not current and request.method == "GET":
                read(self.core, session, "status", ns)  # an unknown namespace: its refusal
            policy = current[0]["policy"] if current else None

            async def save(form: dict[str, str]) -> Response:
                if form.get("action", "save") == "clear":
                    await self._write(request, session, "policy_clear", ns, queue=queue)
                    return RedirectResponse(f"{back}?notice=cleared#edit-policy", 303)
                args = {**forms.policy_args(form), **forms.kept_group_fields(policy)}
                await self._write(request, session, "policy_set", ns, queue=queue, **args)
                return RedirectResponse(f"{back}?notice=saved#edit-policy", 303)

            def context() -> dict[str, Any]:
                audit = views.maybe_audit(self.core, session, ns, "queue", queue)
                return {"ns": ns, "queue": queue, "policy": policy, "back": back, "audit": audit}

            def preview(form: dict[str, str]) -> dict[str, Any]:
                change = {"op": "policy_set", "queue": queue, **forms.policy_args(form)}
                return read(self.core, session, "what_if", ns, change=change)

            values = forms.policy_form(policy)
            return await self._edit(request, session, "policy_edit.html", values, save, context,
                                    preview)  # fmt: skip

        return await self._guard(request, page, ns)

    async def budget_edit(self, request: Request) -> Response:
        """The budget editor: a full page; saves over a plain form post."""
        ns, key = request.path_params["ns"], request.path_params["key"]
        back = f"/board/ns/{quote(ns)}/budgets"

        async def page(session: Session) -> Response:
            data = views.budget(self.core, session, ns, key)

            async def save(form: dict[str, str]) -> Response:
                args = forms.budget_args(form)
                await self._write(request, session, "budget_put", ns, key=key, **args)
                return RedirectResponse(f"{back}?notice=budget#edit-budget-{quote(key)}", 303)

            def context() -> dict[str, Any]:
                return {"ns": ns, "key": key, "back": back, **data}

            def preview(form: dict[str, str]) -> dict[str, Any]:
                change = {"op": "budget_put", "key": key, **forms.budget_args(form)}
                return read(self.core, session, "what_if", ns, change=change)

            values = forms.budget_form(data["budget"])
            return await self._edit(request, session, "budget_edit.html", values, save, context,
                                    preview)  # fmt: skip

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

    async def _edit(
        self,
        request: Request,
        session: Session,
        template: str,
        values: dict[str, Any],
        save: Callable[[dict[str, str]], Awaitable[Response]],
        context: Callable[[], dict[str, Any]],
        preview: Callable[[dict[str, str]], dict[str, Any]] | None = None,
    ) -> Response:
        """An editor's page with ``values`` in its form. A post goes to ``save``,
        which writes it and answers the redirect; a refusal the form can help
        with shows the form again as typed, the field it names marked.
        ``context`` is read for the page once any write is done. A post with
        ``action=preview`` goes to ``preview`` instead: its ``what_if`` answer is
        shown beside the form as typed."""
        error, field, status, shown = None, None, 200, None
        if request.method == "POST":
            form = await self._form(request)
            if isinstance(form, Response):
                return form
            try:
                if preview is not None and form.get("action") == "preview":
                    shown = preview(form)
                    values = _typed(values, form)
                else:
                    return await save(form)
            except Refused as refused:
                values, error, field, status = _refill(refused, values, form)
        page = {"values": values, "error": error, "field": field, "preview": shown, **context()}
        return self.render(request, template, page, status, session)


def _refill(
    refused: Refused, values: dict[str, Any], form: dict[str, str]
) -> tuple[dict[str, Any], str, str | None, int]:
    """An editor's form shown again after the verb refused it: the values as
    typed, the message, the field it names and the status. A refusal a form
    cannot help with (forbidden, not found) goes on to the error page."""
    if refused.code not in ("invalid_argument", "conflict", "rate_limited"):
        raise refused
    return _typed(values, form), refused.message, forms.field_of(refused), refused.status


def _typed(values: dict[str, Any], form: dict[str, str]) -> dict[str, Any]:
    """The editor's values as the form typed them."""
    return {**values, **{k: v for k, v in form.items() if k in values}}
