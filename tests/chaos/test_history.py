"""The history checker on hand-made histories: each category it counts is found,
and what the contract allows is not counted against it."""

from __future__ import annotations

from tests.chaos.history import (
    COMPLETE,
    FAIL,
    FAIL_JOB,
    INFO,
    OK,
    History,
    check,
    in_flight_peaks,
    over_admitted,
    superseded_completions,
)


class Clock:
    """A settable clock for hand-made histories (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _job(key: str, job_id: str, lease: str, expires_ms: int, queue: str = "q") -> dict:
    return {"id": job_id, "namespace": "default", "queue": queue, "payload": {"k": key},
            "attempts": 1, "lease": lease, "lease_expires_at": expires_ms}  # fmt: skip


def _acked(h: History, key: str, job_id: str, process: str = "p1") -> None:
    h.enqueued(h.enqueue(process, key, "q"), OK, {"id": job_id})


def test_a_clean_history_is_valid_and_counts_what_happened():
    h = History(Clock())
    _acked(h, "a", "J1")
    _acked(h, "b", "J2")
    for key, job_id in (("a", "J1"), ("b", "J2")):
        job = _job(key, job_id, "L" + job_id, 1_000_000 + 5000)
        h.claimed("w1", job)
        h.finished(h.finish("w1", COMPLETE, job), OK)
    report = check(h.ops, final={"a": "completed", "b": "completed"})
    assert report.valid, report.summary()
    assert (report.acknowledged, report.delivered) == (2, 2)
    assert not report.lost and not report.unexpected and not report.duplicates


def test_an_acknowledged_enqueue_never_seen_again_is_lost():
    h = History(Clock())
    _acked(h, "a", "J1")
    _acked(h, "b", "J2")
    h.claimed("w1", _job("a", "J1", "L1", 1_005_000))
    report = check(h.ops, final={"a": "completed"})
    assert report.lost == {"b"} and not report.valid
    # Present in the final state (not delivered yet): not lost.
    assert not check(h.ops, final={"a": "completed", "b": "pending"}).lost


def test_a_delivery_that_no_enqueue_invoked_or_that_definitely_failed_is_unexpected():
    h = History(Clock())
    h.enqueued(h.enqueue("p1", "refused", "q"), FAIL, error="unavailable")
    h.claimed("w1", _job("ghost", "J9", "L9", 1_005_000))
    h.claimed("w1", _job("refused", "J8", "L8", 1_005_000))
    report = check(h.ops, final={"other": "pending"})
    assert report.unexpected == {"ghost", "refused", "other"} and not report.valid


def test_an_indeterminate_enqueue_seen_later_is_recovered_and_one_never_seen_is_not_lost():
    h = History(Clock())
    h.enqueued(h.enqueue("p1", "maybe", "q"), INFO, error="connection lost")
    h.enqueued(h.enqueue("p1", "never", "q"), INFO, error="connection lost")
    h.claimed("w1", _job("maybe", "J1", "L1", 1_005_000))
    report = check(h.ops)
    assert report.recovered == {"maybe"} and report.indeterminate == 2
    assert not report.lost and report.valid


def test_a_second_delivery_under_a_live_lease_without_a_crash_is_an_unexplained_duplicate():
    clock = Clock()
    h = History(clock)
    _acked(h, "a", "J1")
    h.claimed("w1", _job("a", "J1", "L1", expires_ms=1_005_000))
    clock.now = 1002.0  # before the first lease's expiry (1005 s)
    h.claimed("w2", _job("a", "J1", "L2", expires_ms=1_007_000))
    report = check(h.ops)
    assert len(report.unexplained) == 1 and not report.valid
    assert report.unexplained[0].second.process == "w2"


def test_a_second_delivery_after_a_lease_lapse_a_crash_or_a_fail_is_explained():
    clock = Clock()
    h = History(clock)
    for key in ("lapse", "crash", "retry"):
        _acked(h, key, "J" + key)
    lapse, crash, retry = (
        _job(k, "J" + k, "L1" + k, 1_005_000) for k in ("lapse", "crash", "retry")
    )
    for job in (crash, retry):
        h.claimed("w1", job)
    h.finished(h.finish("w1", FAIL_JOB, retry), OK)
    clock.now = 1001.0
    h.claimed("w2", {**retry, "lease": "L2retry"})
    h.crash()
    h.restart()
    h.claimed("w2", {**crash, "lease": "L2crash"})
    h.claimed("w1", lapse)  # after the restart: only its lease's lapse explains the next
    clock.now = 1005.0  # the lease's expiry
    h.claimed("w2", {**lapse, "lease": "L2lapse"})
    report = check(h.ops)
    assert report.valid, report.summary()
    assert {d.key: d.explained_by for d in report.duplicates} == {
        "retry": "fail", "crash": "crash", "lapse": "lease_lapse",
    }  # fmt: skip


def test_a_delivery_after_an_acknowledged_completion_is_never_explained():
    clock = Clock()
    h = History(clock)
    _acked(h, "a", "J1")
    job = _job("a", "J1", "L1", 1_005_000)
    h.claimed("w1", job)
    h.finished(h.finish("w1", COMPLETE, job), OK)
    h.crash()
    clock.now = 1010.0  # even after a crash and past the lease
    h.claimed("w2", {**job, "lease": "L2"})
    assert len(check(h.ops).unexplained) == 1


def test_in_flight_peaks_count_from_claim_ok_to_the_first_of_complete_invoke_and_expiry():
    clock = Clock()
    h = History(clock)
    a, b, c = (_job(k, "J" + k, "L" + k, 1_010_000) for k in "abc")
    h.claimed("w1", a)  # t=1000: 1 in flight
    clock.now = 1001.0
    h.claimed("w2", b)  # 2
    clock.now = 1002.0
    h.finish("w1", COMPLETE, a)  # a leaves at its invoke: 1
    clock.now = 1003.0
    h.claimed("w1", c)  # 2
    assert in_flight_peaks(h.ops) == {"queue:q": 2}
    assert over_admitted(h.ops, {"queue:q": 2}) == {}
    assert over_admitted(h.ops, {"queue:q": 1}) == {"queue:q": 2}


def test_a_delivery_whose_lease_lapsed_leaves_flight_at_its_expiry():
    clock = Clock()
    h = History(clock)
    h.claimed("w1", _job("a", "J1", "L1", expires_ms=1_001_000))  # worker stopped, never settles
    clock.now = 1001.0  # exactly at the expiry: the takeover does not overlap
    h.claimed("w2", _job("a", "J1", "L2", expires_ms=1_011_000))
    assert in_flight_peaks(h.ops) == {"queue:q": 1}
    clock.now = 1000.5
    h.claimed("w3", _job("b", "J2", "L3", expires_ms=1_011_000, queue="q"))
    assert in_flight_peaks(h.ops) == {"queue:q": 2}


def test_a_heartbeat_pushes_the_lease_that_a_takeover_must_outlast():
    clock = Clock()
    h = History(clock)
    job = _job("a", "J1", "L1", expires_ms=1_001_000)
    h.claimed("w1", job)
    clock.now = 1000.5
    h.heartbeat("w1", job, expires_at=1_003_000)
    clock.now = 1002.0  # past the claim's expiry, not the heartbeat's
    h.claimed("w2", {**job, "lease": "L2", "lease_expires_at": 1_012_000})
    report = check(h.ops)
    assert len(report.unexplained) == 1
    assert in_flight_peaks(h.ops) == {"queue:q": 2}
    clock.now = 1003.0
    h2 = History(clock)
    h2.claimed("w1", job)
    h2.heartbeat("w1", job, expires_at=1_003_000, time_ms=1_000_500)
    h2.claimed("w2", {**job, "lease": "L2"})
    assert [d.explained_by for d in check(h2.ops).duplicates] == ["lease_lapse"]


def test_a_completion_acknowledged_after_a_takeover_is_superseded_and_one_refused_is_not():
    clock = Clock()
    h = History(clock)
    _acked(h, "a", "J1")
    _acked(h, "b", "J2")
    first_a, first_b = _job("a", "J1", "L1", 1_001_000), _job("b", "J2", "L3", 1_001_000)
    h.claimed("A", first_a)
    h.claimed("A", first_b)
    late_a, late_b = h.finish("A", COMPLETE, first_a), h.finish("A", COMPLETE, first_b)
    clock.now += 2  # both leases lapsed: B takes both over and completes them
    for job in (_job("a", "J1", "L2", 1_010_000), _job("b", "J2", "L4", 1_010_000)):
        h.claimed("B", job)
        h.finished(h.finish("B", COMPLETE, job), OK)
    h.finished(late_a, OK)  # the old lease honoured: what a paused daemon must not do
    h.finished(late_b, FAIL, error="lease_lost")
    assert [(op.key, op.lease) for op in superseded_completions(h.ops)] == [("a", "L1")]
    # The checker alone explains both second deliveries by the lapse.
    assert [d.explained_by for d in check(h.ops).duplicates] == ["lease_lapse"] * 2
