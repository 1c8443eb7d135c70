"""The HTTP guard and body reader, driven in process as an ASGI server would (virtual time)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
import trio

from actors.errors import Refused
from daemon.transport.http_body import UnsupportedMediaType, body_format, read_body
from daemon.transport.http_guard import (
    CONTENT_SECURITY_POLICY,
    DRAIN_SECONDS,
    MAX_DRAIN,
    HttpGuard,
    cross_site,
)

Message = dict[str, Any]


class Peer:
    """The server side of one request: queued body messages in, the app's sends out."""

    def __init__(self, body: list[bytes] | None = None, *, end: bool = True) -> None:
        self.inbox: list[Message] = [
            {"type": "http.request", "body": chunk, "more_body": True} for chunk in body or []
        ]
        if end:
            self.inbox.append({"type": "http.request", "body": b"", "more_body": False})
        self.received = 0
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        if not self.inbox:
            await trio.sleep_forever()  # a client that sends nothing more
        self.received += 1
        return self.inbox.pop(0)

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def status(self) -> int:
        return int(self.sent[0]["status"])

    def headers(self) -> dict[bytes, list[bytes]]:
        out: dict[bytes, list[bytes]] = {}
        for name, value in self.sent[0]["headers"]:
            out.setdefault(name, []).append(value)
        return out

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])

    def ended(self) -> bool:
        return bool(self.sent) and not self.sent[-1].get("more_body", False)


def scope(method: str = "GET", path: str = "/", **headers: str) -> dict[str, Any]:
    return {
        "type": "http", "method": method, "path": path, "scheme": "http",
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }  # fmt: skip


def answering(status: int = 200, headers: list[tuple[bytes, bytes]] | None = None,
              reads: bool = False) -> Callable[..., Awaitable[None]]:  # fmt: skip
    """An app that (maybe) reads its body, then answers ``ok``."""

    async def app(_scope: Any, receive: Any, send: Any) -> None:
        if reads:
            while (await receive()).get("more_body"):
                pass
        await send({"type": "http.response.start", "status": status, "headers": headers or []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


# -- headers --------------------------------------------------------------------------


async def test_every_answer_gets_the_security_headers_once_and_the_routes_own_are_replaced():
    own = [(b"x-frame-options", b"SAMEORIGIN"), (b"cache-control", b"max-age=60"),
           (b"content-type", b"text/css")]  # fmt: skip
    peer = Peer()
    await HttpGuard(answering(404, own))(scope(), peer.receive, peer.send)
    headers = peer.headers()
    assert peer.status() == 404 and peer.body() == b"ok"
    assert headers[b"content-security-policy"] == [CONTENT_SECURITY_POLICY.encode()]
    assert headers[b"x-frame-options"] == [b"DENY"]
    assert headers[b"x-content-type-options"] == [b"nosniff"]
    assert headers[b"referrer-policy"] == [b"same-origin"]
    assert headers[b"cache-control"] == [b"max-age=60"]  # a default only
    assert headers[b"content-type"] == [b"text/css"]

    peer = Peer()
    await HttpGuard(answering())(scope(), peer.receive, peer.send)
    assert peer.headers()[b"cache-control"] == [b"no-store"]


async def test_an_exception_before_the_answer_is_a_500_with_the_headers(caplog):
    async def broken(_scope: Any, _receive: Any, _send: Any) -> None:
        raise RuntimeError("boom")

    peer = Peer()
    await HttpGuard(broken)(scope(), peer.receive, peer.send)
    assert peer.status() == 500 and peer.ended()
    body = orjson.loads(peer.body())
    assert body["code"] == "internal" and body["ref"] in body["error"]
    assert peer.headers()[b"x-frame-options"] == [b"DENY"]
    assert "boom" in caplog.text


# -- cross-site writes ----------------------------------------------------------------

SELF = "http://127.0.0.1:7890"


@pytest.mark.parametrize(
    ("method", "headers", "refused"),
    [
        ("POST", {}, False),  # curl, the SDK: no browser headers
        ("POST", {"origin": SELF}, False),
        ("POST", {"origin": "HTTP://127.0.0.1:7890", "sec_fetch_site": "same-origin"}, False),
        ("POST", {"sec_fetch_site": "none"}, False),  # typed by the user
        ("POST", {"sec_fetch_site": "cross-site"}, True),
        ("DELETE", {"sec_fetch_site": "cross-site", "origin": SELF}, True),
        ("PUT", {"origin": "http://evil.example"}, True),
        ("PATCH", {"origin": "http://127.0.0.1:7891"}, True),  # another port: another origin
        ("POST", {"origin": "https://127.0.0.1:7890"}, True),  # another scheme
        ("POST", {"origin": "null"}, True),  # a sandboxed frame, a file: page
        ("GET", {"origin": "http://evil.example", "sec_fetch_site": "cross-site"}, False),
        ("HEAD", {"sec_fetch_site": "cross-site"}, False),
    ],
)
def test_cross_site_is_judged_on_writes_by_origin_and_fetch_site(method, headers, refused):
    request = scope(method, "/jobs", host="127.0.0.1:7890", **headers)
    decoded = [(n.decode(), v.decode()) for n, v in request["headers"]]
    assert cross_site(request, decoded) is refused


def test_own_origin_ignores_default_ports_and_follows_a_proxy():
    def judged(**headers: str) -> bool:
        request = scope("POST", "/jobs", **headers)
        return cross_site(request, [(n.decode(), v.decode()) for n, v in request["headers"]])

    assert not judged(host="sluice.example:80", origin="http://sluice.example")
    proxied = {"x_forwarded_proto": "https", "x_forwarded_host": "sluice.example"}
    assert not judged(host="127.0.0.1:7890", origin="https://sluice.example", **proxied)
    assert judged(host="127.0.0.1:7890", x_forwarded_proto="https", origin=SELF)
    assert judged(origin=SELF)  # no Host to compare with


async def test_a_cross_site_write_never_reaches_the_app():
    reached = []

    async def app(*_args: Any) -> None:
        reached.append(True)

    peer = Peer([b'{"queue":"q"}'])
    request = scope("POST", "/jobs", host="127.0.0.1:7890", origin="http://evil.example",
                    content_length="13")  # fmt: skip
    await HttpGuard(app)(request, peer.receive, peer.send)
    assert not reached and peer.status() == 403 and peer.ended()
    assert orjson.loads(peer.body()) == {"error": "cross-site request refused", "code": "forbidden"}
    assert peer.headers()[b"content-security-policy"]
    assert not peer.inbox  # the unread body was drained after the answer


# -- lingering close ------------------------------------------------------------------


async def test_an_answer_before_the_body_goes_out_at_once_then_the_body_is_drained():
    peer = Peer([b"x" * 1000] * 5)
    request = scope("POST", "/jobs", content_length="5000")
    await HttpGuard(answering(413))(request, peer.receive, peer.send)
    # The whole answer first (more_body held open), then the drain, then the end.
    assert [m.get("more_body", False) for m in peer.sent] == [False, True, False]
    assert peer.body() == b"ok" and peer.received == 6 and not peer.inbox


async def test_the_drain_stops_at_its_time_bound(autojump_clock):
    peer = Peer([b"x"], end=False)  # then the client goes quiet
    start = trio.current_time()
    await HttpGuard(answering(401))(scope("POST", "/jobs", transfer_encoding="chunked"),
                                    peer.receive, peer.send)  # fmt: skip
    assert trio.current_time() - start == DRAIN_SECONDS
    assert peer.ended() and peer.status() == 401


async def test_the_drain_stops_at_its_byte_bound():
    chunk = b"x" * 1_048_576
    peer = Peer([chunk] * 40, end=False)
    await HttpGuard(answering(413))(scope("POST", "/jobs", transfer_encoding="chunked"),
                                    peer.receive, peer.send)  # fmt: skip
    assert peer.ended()
    assert peer.received == MAX_DRAIN // len(chunk) + 1  # one chunk past the bound, no more


async def test_a_declared_length_past_the_drain_bound_is_not_drained_at_all():
    peer = Peer([b"x"] * 3)
    request = scope("POST", "/jobs", content_length=str(MAX_DRAIN + 1))
    await HttpGuard(answering(413))(request, peer.receive, peer.send)
    assert peer.ended() and peer.received == 0


async def test_a_body_read_by_the_app_is_not_drained_again():
    peer = Peer([b"{}"])
    await HttpGuard(answering(reads=True))(scope("POST", "/jobs", content_length="2"),
                                           peer.receive, peer.send)  # fmt: skip
    assert [m.get("more_body", False) for m in peer.sent] == [False, False]


# -- the body reader ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "kind"),
    [
        (None, "json"),
        ("application/json", "json"),
        ("Application/JSON; charset=utf-8", "json"),
        ("application/merge-patch+json", "json"),
        ("application/msgpack", "msgpack"),
        ("application/x-msgpack", "msgpack"),
        ("application/x-www-form-urlencoded", None),
        ("multipart/form-data; boundary=x", None),
        ("text/plain", None),
        ("text/plain; a=application/json", None),
        ("", None),
    ],
)
def test_body_formats(content_type, kind):
    assert body_format(content_type) == kind


async def test_a_form_body_is_refused_before_a_byte_is_read():
    peer = Peer([b"queue=q&type=t"])
    with pytest.raises(UnsupportedMediaType) as info:
        await read_body(peer.receive, {"content-type": "application/x-www-form-urlencoded"}, 100)
    assert peer.received == 0
    assert info.value.body()["code"] == "unsupported_media_type"


async def test_a_declared_length_over_the_limit_is_refused_before_a_byte_is_read():
    peer = Peer([b"x" * 10])
    with pytest.raises(Refused) as info:
        await read_body(peer.receive, {"content-length": "101"}, 100)
    assert peer.received == 0
    assert (info.value.code, info.value.details) == ("payload_too_large",
                                                      {"limit": "body", "max": 100})  # fmt: skip


async def test_a_chunked_body_is_cut_as_soon_as_it_passes_the_limit():
    peer = Peer([b"x" * 40] * 10)
    with pytest.raises(Refused) as info:
        await read_body(peer.receive, {"transfer-encoding": "chunked"}, 100)
    assert info.value.code == "payload_too_large"
    assert peer.received == 3  # 120 bytes: the third chunk crossed the limit


async def test_bodies_decode_as_their_format_and_empty_is_an_empty_object():
    assert await read_body(Peer([b'{"a": 1}']).receive, {}, 100) == {"a": 1}
    packed = Peer([b"\x81\xa1a\x01"]).receive
    assert await read_body(packed, {"content-type": "application/msgpack"}, 100) == {"a": 1}
    assert await read_body(Peer([b"  "]).receive, {}, 100) == {}
    with pytest.raises(Refused) as info:
        await read_body(Peer([b"{nope"]).receive, {}, 100)
    assert info.value.code == "bad_frame"
