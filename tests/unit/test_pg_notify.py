"""The cross-daemon doorbell's notices (daemon/store/pg_notify.py): no server needed."""

from __future__ import annotations

import trio

from daemon.store.pg_notify import (
    CHANNEL,
    PAYLOAD_MAX,
    CrossDaemonDoorbell,
    parse,
    payloads,
    sent_at,
)


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


def test_each_notice_carries_its_sending_time_and_older_parsers_skip_it():
    rings = {("ns", f"queue-{i:04d}"): 1 for i in range(2000)}
    notices = payloads("d1", rings, sent_us=1_700_000_000_123_456)
    assert len(notices) > 1
    for notice in notices:
        assert len(notice.encode()) <= PAYLOAD_MAX
        assert sent_at(notice) == 1_700_000_000_123_456
        assert notice.split("\n", 1)[0] == "d1\t1700000000123456"
    # The time line has two fields: a parser that wants four skips it.
    assert [ring for n in notices for ring in parse(n, "d2")] == list(rings.items())
    assert sent_at(payloads("d1", {("ns", "q"): 1})[0]) is None  # an older daemon's
    assert payloads("d1", {}, sent_us=5) == []


def test_the_receiver_measures_the_lag_of_every_notice_and_rings_the_others():
    lags: list[float] = []
    rings: list[tuple[tuple[str, str], int]] = []
    now = {"us": 1_000_000_000}
    bell = CrossDaemonDoorbell(
        None, lambda: None, ring=lambda key, n: rings.append((key, n)),
        waiting_keys=list, some_waiting=trio.Event, lag=lags.append,
        wall_us=lambda: now["us"],
    )  # fmt: skip
    (theirs,) = payloads("other", {("ns", "q"): 2}, sent_us=now["us"] - 1500)
    (ours,) = payloads(bell.daemon_id, {("ns", "q"): 9}, sent_us=now["us"] - 250)
    (skewed,) = payloads("ahead", {("ns", "r"): 1}, sent_us=now["us"] + 10_000)
    for notice in (theirs, ours, skewed):
        bell._received(None, 0, CHANNEL, notice)
    assert lags == [0.0015, 0.00025, 0.0]  # a clock ahead of ours: never negative
    assert rings == [(("ns", "q"), 2), (("ns", "r"), 1)]  # our own rings skipped
    stats = bell.statistics()
    assert (stats.received, stats.listening) == (2, False)
