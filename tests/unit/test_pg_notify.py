"""The cross-daemon doorbell's notices (daemon/store/pg_notify.py): no server needed."""

from __future__ import annotations

from daemon.store.pg_notify import PAYLOAD_MAX, parse, payloads


def test_rings_round_trip_and_our_own_are_skipped():
    rings = {("ns", "q"): 3, ("other", "images"): 1}
    (payload,) = payloads("me", rings)
    assert parse(payload, "someone-else") == [(("ns", "q"), 3), (("other", "images"), 1)]
    assert parse(payload, "me") == []


def test_many_queues_are_split_under_the_payload_limit():
    rings = {("ns", f"queue-{i:04d}"): i for i in range(2000)}
    notices = payloads("d1", rings)
    assert len(notices) > 1
    assert all(len(n.encode()) <= PAYLOAD_MAX for n in notices)
    got = [ring for n in notices for ring in parse(n, "d2")]
    assert got == list(rings.items())


def test_malformed_lines_are_ignored():
    assert parse("x\ty\nd1\tns\tq\tnot-a-number\nd1\tns\tq\t2", "me") == [(("ns", "q"), 2)]


def test_timer_instants_travel_as_lines_without_a_namespace():
    (payload,) = payloads("a", {("", "lease"): 1_700_000_001_000, ("ns", "q"): 2})
    assert parse(payload, "b") == [(("", "lease"), 1_700_000_001_000), (("ns", "q"), 2)]
