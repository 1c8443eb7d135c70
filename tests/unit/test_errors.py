"""actors/errors.py: refusals as values, with their HTTP status."""

from __future__ import annotations

import logging

import pytest

from actors.errors import STATUS, Refused, internal_error, invalid, not_found


def test_refused_carries_code_status_and_details():
    r = Refused("queue_full", "full", limit="max_pending", value=3, max=2)
    assert r.status == 429
    assert r.to_wire() == {
        "code": "queue_full",
        "message": "full",
        "status": 429,
        "limit": "max_pending",
        "value": 3,
        "max": 2,
    }
    assert "queue_full" in repr(r)


def test_unknown_code_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown error code"):
        Refused("nope", "x")


def test_every_code_has_an_http_error_status():
    assert all(400 <= s < 600 for s in STATUS.values())


def test_helpers():
    assert invalid("window.tz", "bad").to_wire()["field"] == "window.tz"
    assert not_found("job 'x'").message == "job 'x' not found"


def test_internal_error_logs_a_reference_the_message_repeats(caplog):
    with caplog.at_level(logging.ERROR, logger="sluicegate"):
        r = internal_error(RuntimeError("boom"))
    assert r.code == "internal" and r.status == 500
    ref = r.details["ref"]
    assert ref in r.message
    assert any(ref in rec.getMessage() for rec in caplog.records)
