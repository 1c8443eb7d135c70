"""The HTTP transport: a small ASGI app over the same verb table as the socket.

Routes (PROTOCOL.md, HTTP transport): ``POST /v1/ops/<verb>`` for every verb,
the REST faces ``POST /jobs``, ``GET /jobs/{id}``, ``GET /jobs``,
``GET /api/v1/jobs/{id}/explain``, and
``GET /healthz``, ``GET /metrics``, ``GET /`` (the board), budgets, the quota,
and queue admission policies (``GET /api/v1/admission``, ``GET|PUT|DELETE
/api/v1/admission/{queue}``, PUT bodies at most 16 KiB), and ``GET
/openapi.json`` (:mod:`daemon.openapi`). Bodies and answers are JSON or
msgpack by ``Content-Type``/``Accept`` (:mod:`daemon.transport.http_body`). A refusal
answers its status with ``{"error": message, "code": code, ...details}`` and,
for a 429, a ``Retry-After`` header. The server wraps this app in
:class:`daemon.transport.http_guard.HttpGuard` (security headers, cross-site refusal).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import parse_qs

import msgpack
import orjson
import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from actors.errors import Refused, internal_error, invalid
from daemon.board.app import board_app
from daemon.dispatch import dispatch
from daemon.openapi import openapi_document
from daemon.session import Session
from daemon.transport.http_body import JSON, MSGPACK, UnsupportedMediaType, read_body

if TYPE_CHECKING:
    from daemon.services import Services

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

MAX_BODY = 1_048_576
#: ``PUT /api/v1/admission/{queue}`` bodies (seed 002, Security: 16 KiB).
MAX_POLICY_BODY = 16 * 1024
ADMISSION = "/api/v1/admission"
JOBS_API, EXPLAIN = "/api/v1/jobs/", "/explain"
#: ``POST /api/v1/what-if``: ``what_if``, its body the verb's arguments.
WHAT_IF = "/api/v1/what-if"
#: Budget routes (seed 003): method -> (verb, success status).
_BUDGET_VERBS = {
    "GET": ("budget_get", 200),
    "POST": ("budget_create", 201),
    "PUT": ("budget_put", 200),
    "PATCH": ("budget_patch", 200),
    "DELETE": ("budget_delete", 204),
}
#: ``POST /budgets/{key}/<action>``: a budget's pause and its end.
_BUDGET_ACTIONS = {"pause": "budget_pause", "resume": "budget_resume"}
#: Paths with fixed methods, for 405's ``Allow`` header (prefix routes below).
_ALLOW = {
    "/jobs": "GET, POST", "/healthz": "GET", "/metrics": "GET",
    "/openapi.json": "GET", "/budgets": "GET", "/api/v1/quota": "GET, PUT, DELETE",
    ADMISSION: "GET", WHAT_IF: "POST",
}  # fmt: skip
_ALLOW_PREFIX = {
    "/jobs/": "GET", "/v1/ops/": "POST", "/budgets/": "GET, POST, PUT, PATCH, DELETE",
    ADMISSION + "/": "GET, PUT, DELETE", JOBS_API: "GET",
}  # fmt: skip


class Caller(NamedTuple):
    """Who makes an HTTP request: the session, and (open mode) the client's address."""

    session: Session
    client: str | None


class Reply:
    """An HTTP answer: status, body object (or raw bytes) and extra headers."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None,
                 raw: bytes | None = None, content_type: str | None = None) -> None:  # fmt: skip
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.raw = raw
        self.content_type = content_type


def refusal_reply(refused: Refused) -> Reply:
    """The HTTP face of a refusal."""
    details = {k: v for k, v in refused.details.items()}
    headers = {}
    if "retry_after" in details:
        headers["retry-after"] = str(details["retry_after"])
    if refused.status == 401:
        headers["www-authenticate"] = "Bearer"
    return Reply(refused.status, {"error": refused.message, "code": refused.code, **details},
                 headers)  # fmt: skip


class HttpApp:
    """The ASGI application."""

    def __init__(self, core: Services) -> None:
        self.core = core
        self.board = board_app(core)  # the operator board: GET / and /board/...
        self._openapi: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"] == "/" or scope["path"].startswith("/board"):
            await self.board(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        accept_msgpack = MSGPACK in headers.get("accept", "")
        try:
            reply = await self._route(scope, receive, headers)
        except Refused as refused:
            reply = refusal_reply(refused)
        except UnsupportedMediaType as exc:
            reply = Reply(exc.status, exc.body())
        except Exception as exc:
            reply = refusal_reply(internal_error(exc))
        if reply is not None:  # None: the client left before the answer
            await send_reply(send, reply, accept_msgpack)

    async def _route(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> Reply | None:
        method, path = scope["method"], scope["path"]
        if path == "/healthz" and method == "GET":
            return await self._healthz()
        if path == "/metrics" and method == "GET":
            return self._metrics(headers)
        if path == "/" and method == "GET":
            return Reply(200, raw=_BOARD, content_type="text/html; charset=utf-8")
        if path == "/openapi.json" and method == "GET":
            return self._openapi_reply()
        caller = self._caller(scope, headers)
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}
        if path.startswith("/v1/ops/") and method == "POST":
            body = await read_body(receive, headers, MAX_BODY)
            op = path[len("/v1/ops/") :]
            result = await _unless_gone(receive, lambda: self._call(caller, op, body))
            return None if result is None else Reply(200, result)
        if path == "/jobs":
            if method == "POST":
                body = await read_body(receive, headers, MAX_BODY)
                return await self._post_jobs(caller, body)
            if method == "GET":
                args: dict[str, Any] = {
                    k: v for k, v in query.items() if k in ("queue", "status", "after", "namespace")
                }
                if "limit" in query:
                    args["limit"] = _int_param("limit", query["limit"])
                return Reply(200, await self._call(caller, "list", args))
        if path.startswith("/jobs/") and method == "GET":
            args = {"job_id": path[len("/jobs/") :]}
            if "namespace" in query:
                args["namespace"] = query["namespace"]
            return Reply(200, (await self._call(caller, "get", args))["job"])
        if path.startswith(JOBS_API) and path.endswith(EXPLAIN) and method == "GET":
            args = {"job_id": path[len(JOBS_API) : -len(EXPLAIN)]}  # GET /api/v1/jobs/{id}/explain
            if "namespace" in query:
                args["namespace"] = query["namespace"]
            return Reply(200, await self._call(caller, "explain", args))
        if path == "/budgets" and method == "GET":
            scoped = {"namespace": query["namespace"]} if "namespace" in query else {}
            return Reply(200, await self._call(caller, "budget_list", scoped))
        if path.startswith("/budgets/") and path.count("/") == 3:
            key, _slash, action = path[len("/budgets/") :].partition("/")
            if method == "POST" and action in _BUDGET_ACTIONS:
                return await self._budget(caller, method, key, query, receive, headers,
                                          _BUDGET_ACTIONS[action])  # fmt: skip
        if path.startswith("/budgets/") and method in _BUDGET_VERBS:
            return await self._budget(caller, method, path[len("/budgets/") :], query, receive,
                                      headers)  # fmt: skip
        if path == "/api/v1/quota" and method in ("GET", "PUT", "DELETE"):
            return await self._quota(caller, method, query, receive, headers)
        if path == ADMISSION and method == "GET":
            scoped = {"namespace": query["namespace"]} if "namespace" in query else {}
            return Reply(200, await self._call(caller, "policy_list", scoped))
        if path.startswith(ADMISSION + "/") and method in ("GET", "PUT", "DELETE"):
            return await self._admission(caller, method, path[len(ADMISSION) + 1 :], query,
                                         receive, headers)  # fmt: skip
        if path == WHAT_IF and method == "POST":
            body = await read_body(receive, headers, MAX_BODY)
            if not isinstance(body, dict):
                raise Refused("bad_frame", "the body must be a JSON object")
            scoped = {"namespace": query["namespace"]} if "namespace" in query else {}
            return Reply(200, await self._call(caller, "what_if", {**body, **scoped}))
        allow = _ALLOW.get(path) or next(
            (methods for prefix, methods in _ALLOW_PREFIX.items() if path.startswith(prefix)), None
        )
        if allow is not None:
            return Reply(405, {"error": f"method {method} not allowed", "code": "invalid_argument"},
                         {"allow": allow})  # fmt: skip
        return Reply(404, {"error": f"no route {path}", "code": "not_found"})

    async def _budget(self, caller: Caller, method: str, key: str, query: dict[str, str],
                      receive: Receive, headers: dict[str, str],
                      action: str | None = None) -> Reply:  # fmt: skip
        """Seed 003's budget routes: the bare budget object, 201 on create, 204 on
        delete; ``action``: ``POST /budgets/{key}/pause|resume``, 200."""
        verb, status = _BUDGET_VERBS[method] if action is None else (action, 200)
        writes = method in ("POST", "PUT", "PATCH")
        body = await read_body(receive, headers, MAX_BODY) if writes else {}
        if not isinstance(body, dict):
            raise Refused("bad_frame", "the body must be a JSON object")
        args = {**body, "key": key}
        if "namespace" in query:
            args["namespace"] = query["namespace"]
        result = await self._call(caller, verb, args)
        return Reply(status, result.get("budget"))

    async def _quota(self, caller: Caller, method: str, query: dict[str, str],
                     receive: Receive, headers: dict[str, str]) -> Reply:  # fmt: skip
        """``GET|PUT|DELETE /api/v1/quota``: the PUT body is the bare document."""
        args: dict[str, Any] = {"namespace": query["namespace"]} if "namespace" in query else {}
        if method == "GET":
            return Reply(200, await self._call(caller, "quota_get", args))
        if method == "DELETE":
            await self._call(caller, "quota_clear", args)
            return Reply(204)
        body = await read_body(receive, headers, MAX_BODY)
        return Reply(200, await self._call(caller, "quota_set", {**args, "quota": body}))

    async def _admission(self, caller: Caller, method: str, queue: str,
                         query: dict[str, str], receive: Receive,
                         headers: dict[str, str]) -> Reply:  # fmt: skip
        """``GET|PUT|DELETE /api/v1/admission/{queue}``: ``{"policy"}``, 204 on delete.

        The PUT body is the policy's fields, read only up to
        :data:`MAX_POLICY_BODY`; a queue the caller may not manage is 404, the
        same as one without a policy.
        """
        args: dict[str, Any] = {"namespace": query["namespace"]} if "namespace" in query else {}
        args["queue"] = queue
        if method == "GET":
            return Reply(200, await self._call(caller, "policy_get", args))
        if method == "DELETE":
            await self._call(caller, "policy_clear", args)
            return Reply(204)
        body = await read_body(receive, headers, MAX_POLICY_BODY)
        if not isinstance(body, dict):
            raise Refused("bad_frame", "the body must be a JSON object")
        if body.get("queue", queue) != queue or "namespace" in body:
            field = "namespace" if "namespace" in body else "queue"
            raise invalid(field, f"the route names the {field}; the body holds the policy's fields")
        return Reply(200, await self._call(caller, "policy_set", {**body, **args}))

    def _caller(self, scope: Scope, headers: dict[str, str]) -> Caller:
        auth = self.core.auth
        if auth.open_mode:
            # Open mode has no token to key the admin write limit by: the address.
            client = scope.get("client")
            return Caller(auth.new_session(), str(client[0]) if client else "local")
        return Caller(auth.check(_bearer(headers)), None)

    async def _call(self, caller: Caller, op: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise Refused("bad_frame", "the body must be a JSON object")
        if op == "hello":
            raise invalid("op", "hello is for the socket; use a bearer token over HTTP")
        return await dispatch(self.core, caller.session, op, dict(body), client=caller.client)

    async def _post_jobs(self, caller: Caller, body: Any) -> Reply:
        if isinstance(body, dict) and "jobs" in body:
            result = await self._call(caller, "enqueue_many", body)
            return Reply(201, result)
        result = await self._call(caller, "enqueue", body)
        job = result.pop("job")
        status = 200 if result["duplicate"] or result["folded"] else 201
        return Reply(status, {**job, **result})

    async def _healthz(self) -> Reply:
        # First: a probe that finds the database away makes the store failing.
        database = {"database": await self.core.database.wire()}
        problems = self.core.health_problems()
        if self.core.draining:
            return Reply(503, {"status": "draining", "problems": ["the daemon is draining"],
                               **database})  # fmt: skip
        unusable = self.core.writer.health.unusable()  # writes fail: cannot serve
        if unusable:
            return Reply(503, {"status": "unavailable", "problems": unusable + problems,
                               **database})  # fmt: skip
        if problems:
            return Reply(200, {"status": "degraded", "problems": problems, **database})
        return Reply(200, {"status": "ok", **database})

    def _metrics(self, headers: dict[str, str]) -> Reply:
        token = self.core.config.daemon.metrics_token
        if token:
            given = _bearer(headers) or ""
            # Digests of equal length, compared in constant time: neither the
            # token nor its length shows in the timing.
            want = hashlib.sha256(token.encode()).digest()
            if not hmac.compare_digest(hashlib.sha256(given.encode()).digest(), want):
                return refusal_reply(Refused("unauthenticated", "a metrics bearer is required"))
        return Reply(200, raw=generate_latest(self.core.metrics.registry),
                     content_type=CONTENT_TYPE_LATEST)  # fmt: skip

    def _openapi_reply(self) -> Reply:
        if self._openapi is None:  # built once: the verb table does not change
            self._openapi = orjson.dumps(openapi_document())
        return Reply(200, raw=self._openapi, content_type=JSON)


def _bearer(headers: dict[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme in any case)."""
    value = headers.get("authorization", "")
    return value[7:].strip() if value[:7].lower() == "bearer " else None


async def _unless_gone(
    receive: Receive, call: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any] | None:
    """``await call()``, cancelled if the client disconnects first (then None).

    A long poll (``claim_next`` with ``wait_ms``) of a client that left must stop
    waiting: else it takes the next job for nobody, to sit running until its
    lease lapses. Only once the request body has been read.
    """
    gone = False
    result: dict[str, Any] | None = None
    refused: Refused | None = None

    async def watch(scope: trio.CancelScope) -> None:
        nonlocal gone
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # the server stopped delivering events: stop watching
            return
        gone = True
        scope.cancel()

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, scope)
            try:
                result = await call()
            except Refused as exc:  # keep it out of the nursery's exception group
                refused = exc
            nursery.cancel_scope.cancel()
    if gone:
        return None
    if refused is not None:
        raise refused
    return result


def _int_param(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise invalid(name, f"{name} must be an integer") from None


async def send_reply(send: Send, reply: Reply, accept_msgpack: bool = False) -> None:
    """Send ``reply`` as the ASGI response (msgpack when the client accepts it)."""
    if reply.raw is not None:
        body, ctype = reply.raw, reply.content_type or "application/octet-stream"
    elif reply.body is None or reply.status == 204:
        body, ctype = b"", None
    elif accept_msgpack:
        body, ctype = msgpack.packb(reply.body, use_bin_type=True), MSGPACK
    else:
        body, ctype = orjson.dumps(reply.body), JSON
    headers = [(b"content-length", str(len(body)).encode())]
    if ctype:
        headers.append((b"content-type", ctype.encode()))
    headers += [(k.encode(), v.encode()) for k, v in reply.headers.items()]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer the ASGI lifespan protocol: nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


_BOARD = b"""<!doctype html><html><head><meta charset="utf-8"><title>Sluicegate</title></head>
<body><h1>Sluicegate</h1><p>The operator board arrives with its own issue. Meanwhile:
<a href="/healthz">/healthz</a>, <a href="/metrics">/metrics</a>,
<a href="/jobs">/jobs</a>.</p></body></html>"""
