"""The HTTP surface made safe, against a real daemon: security headers, cross-site
writes, form bodies, body limits, the header deadline, admin write limits, /metrics."""

from __future__ import annotations

import select
import socket
import time
from typing import Any

import httpx
import pytest

from daemon.transport.http_app import MAX_BODY
from daemon.transport.http_guard import SECURITY_HEADERS
from tests.support import DaemonProcess, token_tables, wait_until

pytestmark = pytest.mark.e2e

JOB = {"queue": "q", "type": "t"}
WIF = {"allocation": 5, "strategy": {"type": "while_in_flight"}}
JSON = {"content-type": "application/json"}
CROSS_SITE = {"error": "cross-site request refused", "code": "forbidden"}


def assert_secured(response: httpx.Response, what: str) -> None:
    for name, value in SECURITY_HEADERS:
        assert response.headers.get(name.decode()) == value.decode(), (what, name)


def pending(daemon: DaemonProcess) -> int:
    """Jobs waiting in the daemon's default namespace (read over the socket)."""
    with daemon.client() as c:
        return sum(q["pending"] for q in c.ok("status")["queues"])


# -- raw HTTP/1.1 ---------------------------------------------------------------------


def raw(daemon: DaemonProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", daemon.port), timeout=10)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response off a raw socket: status, headers, body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of a response"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_by_peer(sock: socket.socket, wait: float) -> bool:
    """True if the daemon closes ``sock`` within ``wait`` seconds (EOF or reset)."""
    readable, _, _ = select.select([sock], [], [], wait)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


# -- 1. security headers ----------------------------------------------------------------


def test_every_answer_carries_the_security_headers(make_daemon):
    daemon = make_daemon('metrics_token = "s3cret"\n')
    form = {"content-type": "application/x-www-form-urlencoded"}
    with daemon.http() as http, daemon.http("s3cret") as scraper:
        answers = {
            "healthz": http.get("/healthz"),
            "metrics 401": http.get("/metrics"),
            "metrics": scraper.get("/metrics"),
            "board": http.get("/"),
            "a board path": http.get("/board/"),
            "openapi": http.get("/openapi.json"),
            "created": http.post("/jobs", json=JOB),
            "no content": http.delete("/api/v1/quota"),
            "no route": http.get("/nope"),
            "no job": http.get("/jobs/nope"),
            "method": http.delete("/healthz"),
            "too large": http.post("/jobs", content=b" " * (MAX_BODY + 1), headers=JSON),
            "form body": http.post("/jobs", content=b"queue=q&type=t", headers=form),
            "invalid": http.post("/jobs", json={"queue": "q"}),
            "cross-site": http.post("/jobs", json=JOB, headers={"sec-fetch-site": "cross-site"}),
        }
        writes = [http.put("/budgets/b", json=WIF) for _ in range(15)]
    answers["rate limited"] = next((r for r in writes if r.status_code == 429), writes[-1])
    statuses = {what: r.status_code for what, r in answers.items()}
    assert statuses == {
        "healthz": 200, "metrics 401": 401, "metrics": 200, "board": 200,
        "a board path": statuses["a board path"], "openapi": 200, "created": 201,
        "no content": 204, "no route": 404, "no job": 404, "method": 405, "too large": 413,
        "form body": 415, "invalid": 422, "cross-site": 403, "rate limited": 429,
    }  # fmt: skip
    for what, response in answers.items():
        assert_secured(response, what)
    assert answers["healthz"].headers["cache-control"] == "no-store"
    assert answers["method"].headers["allow"] == "GET"
    assert "server" not in answers["healthz"].headers  # no version banner


# -- 2. cross-site writes and form bodies ---------------------------------------------


def test_cross_site_writes_are_refused_on_every_route_and_write_nothing(daemon):
    other_origins = [
        {"sec-fetch-site": "cross-site"},
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"origin": daemon.http_url.replace("127.0.0.1", "localhost")},  # another host name
        {"origin": daemon.http_url, "sec-fetch-site": "cross-site"},
    ]
    writes: list[tuple[str, str, Any]] = [
        ("POST", "/jobs", JOB),
        ("POST", "/v1/ops/enqueue", JOB),
        ("PUT", "/budgets/b", WIF),
        ("PUT", "/api/v1/quota", {"max_pending": 0}),
        ("DELETE", "/api/v1/quota", None),
        ("PUT", "/api/v1/admission/q", {"max_in_flight": 0}),
        ("POST", "/board/anything", None),  # the board's forms too
    ]
    with daemon.http() as http:
        for headers in other_origins:
            for method, path, body in writes:
                r = http.request(method, path, json=body, headers=headers)
                assert (r.status_code, r.json()) == (403, CROSS_SITE), (headers, method, path)
        assert pending(daemon) == 0
        assert http.get("/api/v1/quota").json()["quota"] is None
        # Reads are not refused: the browser keeps their answers from the page.
        assert http.get("/healthz", headers=other_origins[0]).status_code == 200
        # The daemon's own pages, and clients that are no browser, write as before.
        same = {"origin": daemon.http_url, "sec-fetch-site": "same-origin"}
        assert http.post("/jobs", json=JOB, headers=same).status_code == 201
        assert http.post("/jobs", json=JOB).status_code == 201
    assert pending(daemon) == 2


FORM_BODIES = [
    ("application/x-www-form-urlencoded", b"queue=q&type=t"),
    ("multipart/form-data; boundary=b", b'--b\r\nContent-Disposition: form-data; name="queue"'
                                        b"\r\n\r\nq\r\n--b--\r\n"),
    ("text/plain", b'{"queue": "q", "type": "t", "pad": "="}'),  # JSON through a text form
]  # fmt: skip


def test_json_routes_refuse_the_bodies_an_html_form_can_send(daemon):
    routes = [("POST", "/jobs"), ("POST", "/v1/ops/enqueue"), ("PUT", "/budgets/b"),
              ("PUT", "/api/v1/quota"), ("PUT", "/api/v1/admission/q")]  # fmt: skip
    with daemon.http() as http:
        for content_type, body in FORM_BODIES:
            for method, path in routes:
                r = http.request(method, path, content=body, headers={"content-type": content_type})
                assert r.status_code == 415, (content_type, path, r.text)
                assert r.json()["code"] == "unsupported_media_type"
        assert pending(daemon) == 0 and http.get("/budgets").json() == {"budgets": []}
        # No Content-Type at all is JSON, as PROTOCOL.md's clients have always sent it.
        assert http.post("/jobs", content=b'{"queue": "q", "type": "t"}').status_code == 201
        r = http.patch("/budgets/b", json={"allocation": 3},
                       headers={"content-type": "application/merge-patch+json"})  # fmt: skip
        assert r.status_code == 404  # read as JSON: the budget does not exist
    assert pending(daemon) == 1


def test_board_form_posts_are_not_refused_for_their_content_type(daemon):
    form = {"content-type": "application/x-www-form-urlencoded", "origin": daemon.http_url}
    with daemon.http() as http:
        r = http.post("/board/anything", content=b"a=b", headers=form)
    assert r.status_code != 415  # the board (its CSRF token) decides


# -- 3. body limits ---------------------------------------------------------------------


def test_a_declared_length_over_the_limit_is_answered_before_the_body_is_sent(daemon):
    request = (b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n")  # fmt: skip
    with raw(daemon) as sock:
        sock.sendall(request % (2 * MAX_BODY))  # not a byte of the body follows
        status, headers, body = read_response(sock)
    assert status == 413 and headers["content-type"] == "application/json"
    assert body == b'{"error":"body exceeds 1048576 bytes","code":"payload_too_large",' \
                   b'"limit":"body","max":1048576}'  # fmt: skip
    # Far past what the daemon would drain: answered, then closed without reading.
    with raw(daemon) as sock:
        sock.sendall(request % (1 << 30))
        assert read_response(sock)[0] == 413
        assert closed_by_peer(sock, 10)


def test_a_chunked_body_is_counted_as_it_streams_and_cut_at_the_limit(daemon):
    chunk = b"x" * 65536
    with raw(daemon) as sock:
        sock.sendall(
            b"POST /v1/ops/enqueue HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for _ in range(MAX_BODY // len(chunk) + 1):  # one chunk past the limit; no last chunk
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, _headers, body = read_response(sock)
    assert status == 413 and b"payload_too_large" in body
    assert pending(daemon) == 0


def test_a_client_sending_its_whole_oversized_body_reads_the_413_and_keeps_going(daemon):
    big = {**JOB, "payload": "x" * (MAX_BODY + 1)}
    with daemon.http() as http:
        for _ in range(3):  # drained each time, so the next request is answered
            assert http.post("/jobs", json=big).status_code == 413
            chunked = iter([b"[" * 65536] * 20)
            assert http.post("/v1/ops/enqueue", content=chunked).status_code == 413
        assert http.post("/jobs", json=JOB).status_code == 201
    assert pending(daemon) == 1


# -- 4. the header deadline -------------------------------------------------------------


def test_a_client_trickling_its_headers_is_cut_off_at_the_deadline(make_daemon):
    daemon = make_daemon('http_header_timeout = "500ms"\n')
    with raw(daemon) as slow, raw(daemon) as silent, daemon.http() as http:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        deadline = time.monotonic() + 5  # ten times the setting; the default is 10 s
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                slow.sendall(b"a")  # a byte at a time: no read ever waits long
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            assert http.get("/healthz").status_code == 200  # others are served meanwhile
            closed = closed_by_peer(slow, 0.1)
        assert closed, "the daemon kept a trickling client past its header deadline"
        assert closed_by_peer(silent, 5)  # one that never sends a byte, too
        assert http.get("/healthz").status_code == 200


# -- 5. admin writes ------------------------------------------------------------------

OPS_A, OPS_B = "tok-ops-a-0123", "tok-ops-b-4567"
TOKENS = token_tables(
    {"name": "ops-a", "token": OPS_A, "namespace": "A", "grants": ["manage"]},
    {"name": "ops-b", "token": OPS_B, "namespace": "B", "grants": ["manage"]},
)


def test_admin_writes_are_limited_per_token_on_both_transports(make_daemon, connect):
    daemon = make_daemon(TOKENS)
    with daemon.http(OPS_A) as a, daemon.http(OPS_B) as b:
        answers = [a.put(f"/budgets/k{i}", json=WIF) for i in range(15)]
        statuses = [r.status_code for r in answers]
        assert statuses[:10] == [200] * 10 and 429 in statuses, statuses
        refused = statuses.index(429)
        r = answers[refused]
        assert r.headers["retry-after"] == "1"
        assert r.json() == {
            "error": "admin write rate limit exceeded: 1/s, burst 10 "
            "(set write_rate on the token or [daemon] admin_write_rate)",
            "code": "rate_limited", "limit": "admin_writes", "rate": "1/s", "burst": 10,
            "retry_after": 1,
        }  # fmt: skip
        assert a.get(f"/budgets/k{refused}").status_code == 404  # nothing written
        assert a.get("/budgets").status_code == 200  # reads are not limited
        assert b.put("/budgets/k0", json=WIF).status_code == 200  # a bucket per token
        # The socket meets the same bucket as HTTP: the token, not the transport.
        c = connect(daemon)
        c.ok("hello", token=OPS_A)
        assert c.error("budget_delete", key="k1")["code"] == "rate_limited"
        # One write a second after that.
        wait_until(lambda: a.delete("/budgets/k1").status_code == 204, timeout=5)


def test_open_mode_limits_http_writes_by_address_and_not_the_socket(daemon, connect):
    with daemon.http() as http:
        statuses = [http.put("/api/v1/admission/q", json={"max_in_flight": i}).status_code
                    for i in range(15)]  # fmt: skip
        assert statuses[:10] == [200] * 10 and 429 in statuses, statuses
    c = connect(daemon)  # a local process, allowed by the socket's permissions
    for i in range(15):
        c.ok("queue_configure", queue=f"q{i}")


# -- 6. the metrics token ---------------------------------------------------------------


def test_metrics_need_the_right_bearer_when_a_token_is_set(make_daemon):
    daemon = make_daemon('metrics_token = "s3cret"\n')
    with daemon.http() as http:
        for auth in (None, "Bearer wrong", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret",
                     "s3cret"):  # fmt: skip
            r = http.get("/metrics", headers={"authorization": auth} if auth else {})
            assert r.status_code == 401, auth
            assert r.json()["code"] == "unauthenticated"
            assert r.headers["www-authenticate"] == "Bearer"
        for auth in ("Bearer s3cret", "bearer s3cret"):
            r = http.get("/metrics", headers={"authorization": auth})
            assert r.status_code == 200 and "sluicegate_waiting_claims" in r.text
