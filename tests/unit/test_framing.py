"""daemon/transport/framing.py: the sans-IO socket protocol core. Parsing never raises."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.errors import Refused
from daemon.transport.framing import (
    BadFrame,
    FrameTooLarge,
    LineFramer,
    Request,
    encode_error,
    encode_event,
    encode_ok,
    parse,
)

LIMIT = 1024


def test_a_line_split_across_feeds():
    framer = LineFramer(LIMIT)
    assert framer.feed(b'{"id": 1, "op": "enq') == []
    assert framer.feed(b'ueue", "queue": ') == []
    assert framer.feed(b'"q"}\n') == [Request(1, "enqueue", {"queue": "q"})]
    assert framer.feed(b"") == []


def test_several_lines_in_one_feed_and_a_partial_tail():
    framer = LineFramer(LIMIT)
    events = framer.feed(b'{"id": 1, "op": "a"}\n{"id": "x", "op": "b", "n": 2}\n{"id": 3,')
    assert events == [Request(1, "a", {}), Request("x", "b", {"n": 2})]
    assert framer.feed(b' "op": "c"}\n') == [Request(3, "c", {})]


def test_byte_at_a_time():
    framer = LineFramer(LIMIT)
    data = b'{"id": 7, "op": "get", "job_id": "\xc3\xa9"}\n'
    events = []
    for i in range(len(data)):
        events += framer.feed(data[i : i + 1])
    assert events == [Request(7, "get", {"job_id": "\u00e9"})]


def test_blank_lines_are_ignored():
    framer = LineFramer(LIMIT)
    assert framer.feed(b"\n\n   \n\t\r\n") == []
    assert framer.feed(b'\n{"id": 1, "op": "x"}\n\n') == [Request(1, "x", {})]


def test_crlf_line_endings_are_accepted():
    assert LineFramer(LIMIT).feed(b'{"id": 1, "op": "x"}\r\n') == [Request(1, "x", {})]


@pytest.mark.parametrize(
    "line", [b"[1, 2]", b'"text"', b"42", b"null", b"true", b"not json", b"{", b'{"id": 1,}']
)
def test_not_a_json_object_is_a_bad_frame(line):
    (event,) = LineFramer(LIMIT).feed(line + b"\n")
    assert isinstance(event, BadFrame)


@pytest.mark.parametrize(
    "doc", [{}, {"op": "x"}, {"id": None}, {"id": 1.5}, {"id": True}, {"id": [1]}, {"id": {}}]
)
def test_a_missing_or_invalid_id_is_a_bad_frame(doc):
    event = parse(orjson.dumps(doc))
    assert event == BadFrame("a request needs an id that is an integer or a string")


def test_an_integer_beyond_64_bits_is_a_request_carrying_its_refusal():
    line = b'{"id": 7, "op": "enqueue", "payload": {"n": 12345678901234567890123}}'
    event = parse(line)
    assert isinstance(event, Request) and event.id == 7 and event.op == "enqueue"
    assert event.refused is not None and event.refused.code == "invalid_argument"
    assert event.refused.details == {"field": "payload.n"}
    fits = b'{"id": 7, "op": "x", "n": 18446744073709551615, "m": -9223372036854775808}'
    assert parse(fits) == Request(7, "x", {"n": 2**64 - 1, "m": -(2**63)})


def test_an_id_beyond_64_bits_is_a_bad_frame():
    event = parse(b'{"id": 12345678901234567890123, "op": "x"}')
    assert event == BadFrame("a request needs an id that is an integer or a string")


def test_missing_op_is_a_request_for_dispatch_to_refuse():
    assert parse(b'{"id": 1}') == Request(1, None, {})
    assert parse(b'{"id": 1, "op": 5}') == Request(1, 5, {})


@pytest.mark.parametrize(
    "line",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b'{"id": 1, "op": "x", "p": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
)
def test_deep_nesting_is_a_bad_frame_and_never_raises(line):
    event = parse(line)
    assert isinstance(event, BadFrame)
    (framed,) = LineFramer(len(line) + 1).feed(line + b"\n")
    assert isinstance(framed, BadFrame)


@pytest.mark.parametrize(
    "line",
    [b"\xff\xfe", b'{"id": 1, "n": NaN}', b'{"id": 1, "n": 1e400}', b'{"id": "\xed\xa0\x80"}'],
)
def test_odd_bytes_are_bad_frames(line):
    assert isinstance(parse(line), BadFrame)


@given(st.binary(max_size=300))
@settings(max_examples=300)
def test_any_bytes_give_events_never_an_exception(data):
    framer = LineFramer(128)
    for event in framer.feed(data) + framer.feed(b"\n"):
        assert isinstance(event, Request | BadFrame | FrameTooLarge)


def test_over_size_without_newline_is_too_large_and_nothing_after():
    framer = LineFramer(LIMIT)
    assert framer.feed(b"x" * LIMIT) == []  # at the limit: still waiting for the newline
    assert framer.feed(b"x") == [FrameTooLarge(LIMIT)]
    assert framer.feed(b'\n{"id": 1, "op": "a"}\n') == []
    assert framer.feed(b'{"id": 2, "op": "a"}\n') == []


def test_over_size_line_with_newline_keeps_earlier_frames_only():
    framer = LineFramer(LIMIT)
    events = framer.feed(b'{"id": 1, "op": "a"}\n' + b"x" * (LIMIT + 1) + b'\n{"id": 2}\n')
    assert events == [Request(1, "a", {}), FrameTooLarge(LIMIT)]
    assert framer.feed(b'{"id": 3, "op": "a"}\n') == []


def test_a_line_of_exactly_the_limit_is_accepted():
    doc = b'{"id": 1, "op": "x", "p": "'
    line = doc + b"y" * (LIMIT - len(doc) - 2) + b'"}'
    assert len(line) == LIMIT
    (event,) = LineFramer(LIMIT).feed(line + b"\n")
    assert isinstance(event, Request)


class _CountingBuffer(bytearray):
    """Counts the bytes the framer scans for newlines."""

    scanned = 0

    def find(self, sub, start=0, *args):  # type: ignore[override]
        _CountingBuffer.scanned += len(self) - start
        return super().find(sub, start, *args)


def test_trickled_line_is_scanned_in_linear_time():
    framer = LineFramer(1_048_576)
    framer._buf = _CountingBuffer()
    _CountingBuffer.scanned = 0
    n = 20_000
    for _ in range(n):
        framer.feed(b"x")
    framer.feed(b"\n")
    assert _CountingBuffer.scanned <= 4 * n


def test_encode_ok_is_one_line():
    frame = encode_ok(5, {"job": {"payload": "a\nb"}, "empty": False})
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    assert orjson.loads(frame) == {"id": 5, "ok": True, "job": {"payload": "a\nb"}, "empty": False}


def test_encode_error_is_one_line():
    frame = encode_error(None, Refused("bad_frame", "line\nbreak"))
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    assert orjson.loads(frame) == {
        "id": None, "ok": False,
        "error": {"code": "bad_frame", "message": "line\nbreak", "status": 400},
    }  # fmt: skip


def test_encode_event_is_one_line():
    frame = encode_event({"event": "doorbell", "queue": "q", "pending": 1})
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    assert orjson.loads(frame)["event"] == "doorbell"


def test_encoded_frames_parse_back():
    framer = LineFramer(LIMIT)
    data = encode_ok("a", {"x": 1}) + encode_event({"event": "e"})
    assert framer.feed(data) == [
        Request("a", None, {"ok": True, "x": 1}),
        BadFrame("a request needs an id that is an integer or a string"),
    ]
