"""The board's bounded in-memory history."""

from __future__ import annotations

from actors import history
from actors.history import MINUTE_MS, History


class _Pool:
    def __init__(self, level: float) -> None:
        self.level = level

    def available(self, _now_ms: int) -> float:
        return self.level


class _Budget:
    def __init__(self, level: float) -> None:
        self.pool = _Pool(level)


def test_claims_per_minute_buckets_and_gaps():
    h = History()
    t = 1_000 * MINUTE_MS
    h.claimed(("ns", "q"), 2, t)
    h.claimed(("ns", "q"), 3, t + 59_999)
    h.claimed(("ns", "q"), 1, t + 2 * MINUTE_MS)
    assert h.claims_per_minute(("ns", "q"), t + 2 * MINUTE_MS, 4) == [0, 5, 0, 1]
    assert h.claims_per_minute(("ns", "other"), t, 3) == [0, 0, 0]


def test_series_are_bounded(monkeypatch):
    monkeypatch.setattr(history, "MAX_SERIES", 3)
    h = History()
    for i in range(10):
        h.claimed(("ns", f"q{i}"), 1, 0)
    assert h.claims_per_minute(("ns", "q0"), 0, 1) == [0]
    assert h.claims_per_minute(("ns", "q9"), 0, 1) == [1]
    for minute in range(history.MINUTES + 50):
        h.claimed(("ns", "q9"), 1, minute * MINUTE_MS)
    assert len(h._claims[("ns", "q9")]) == history.MINUTES


def test_budget_levels_are_sampled_at_most_every_interval():
    h = History()
    budgets = {("ns", "b"): _Budget(5.0)}
    h.sample(budgets.items(), 0)
    budgets[("ns", "b")].pool.level = 3.0
    h.sample(budgets.items(), history.SAMPLE_MS - 1)  # too soon: skipped
    h.sample(budgets.items(), history.SAMPLE_MS)
    assert h.levels(("ns", "b"), 0) == [(0, 5.0), (history.SAMPLE_MS, 3.0)]
    assert h.levels(("ns", "b"), 1) == [(history.SAMPLE_MS, 3.0)]


def test_run_times_count_completions_only_and_are_bounded(monkeypatch):
    monkeypatch.setattr(history, "RUNS", 3)
    runs = history.Durations()
    for i, ms in enumerate((50, 10, 30, 20, 40)):
        runs.claimed([f"j{i}"], 1000)
        runs.left([(f"j{i}", ("ns", "q"))], 1000 + ms, completed=True)
    assert runs.median(("ns", "q")) == (30, 3)  # the last three: 30, 20, 40
    runs.claimed(["failed"], 0)
    runs.left([("failed", ("ns", "q"))], 10_000, completed=False)
    runs.left([("never-claimed", ("ns", "q"))], 10_000, completed=True)  # claimed before a start
    assert runs.median(("ns", "q")) == (30, 3)
    assert runs.median(("ns", "other")) is None


def test_a_claim_of_many_times_each_job_and_the_started_map_stays_bounded(monkeypatch):
    monkeypatch.setattr(history, "MAX_RUNNING", 2)
    runs = history.Durations()
    runs.claimed(["a", "b", "c"], 1000)  # c is past the bound: never timed
    left = [("a", ("ns", "q")), ("b", ("ns", "q")), ("c", ("ns", "q"))]
    runs.left(left, 1300, completed=True)
    assert runs.median(("ns", "q")) == (300, 2)
