"""The budget gate against a real daemon: both budgets must pay, parked jobs hold
nothing back, and ``kill -9`` cannot over-spend a budget."""

from __future__ import annotations

import pytest

from tests.support import RawClient

pytestmark = pytest.mark.e2e

HOURLY_5 = {"allocation": 5, "strategy": {"type": "time_based", "duration_ms": 3_600_000}}
SLOTS_4 = {"allocation": 4, "strategy": {"type": "while_in_flight"}}


def _claim(c: RawClient, n: int = 100, queue: str = "q") -> list[dict]:
    return [j["job"] for j in c.ok("claim_next", queues=[queue], max=n)["jobs"]]


def _enqueue(c: RawClient, n: int, budgets: list[dict] | None, queue: str = "q") -> list[str]:
    job = {"queue": queue, "type": "t", **({"budgets": budgets} if budgets else {})}
    return [r["job"]["id"] for r in c.ok("enqueue_many", jobs=[job] * n)["results"]]


def test_a_job_bound_to_two_budgets_runs_only_when_both_allow(make_daemon):
    daemon = make_daemon(http=False)
    with daemon.client() as c:
        c.ok("budget_create", key="hourly", **HOURLY_5)
        c.ok("budget_create", key="slots", allocation=2, strategy={"type": "while_in_flight"})
        both = _enqueue(c, 4, [{"key": "hourly"}, {"key": "slots"}])
        got = _claim(c)
        assert [j["id"] for j in got] == both[:2]  # slots stops it at 2
        hourly = c.ok("budget_get", key="hourly")["budget"]["state"]
        assert hourly["in_flight"] == 2 and 2.99 < hourly["available"] < 3.01
        c.ok("complete", job_id=got[0]["id"], lease=got[0]["lease"])
        c.ok("claim_next", queues=["q"], max=1, wait_ms=5000)  # the released one
        slots = c.ok("budget_get", key="slots")["budget"]["state"]
        assert slots == {"available": 0.0, "in_flight": 2, "parked": 1, "next_refill_at": None,
                         "paused_until": None, "pause_reason": None}  # fmt: skip


def test_parked_jobs_do_not_hold_back_the_jobs_behind_them(make_daemon):
    daemon = make_daemon(http=False)
    with daemon.client() as c:
        c.ok("budget_create", key="one", allocation=1, strategy={"type": "while_in_flight"})
        bound = _enqueue(c, 50, [{"key": "one"}])
        free = _enqueue(c, 3, None)
        got = [j["id"] for j in _claim(c)]
        assert got == [bound[0], *free]
        empty = c.ok("claim_next", queues=["q"], max=10)
        assert empty["empty"] is True
        [held] = empty["deferred"]
        assert (held["queue"], held["reason"], held["pending"], held["budget"]) == (
            "q", "budget_exhausted", 49, "one",
        )  # fmt: skip
        job = c.ok("get", job_id=bound[1])["job"]
        assert job["status"] == "pending" and job["admission"]["state"] == "deferred"


def test_kill_9_and_restart_over_spend_no_budget(make_daemon):
    daemon = make_daemon(http=False)
    with daemon.client() as c:
        c.ok("budget_create", key="hourly", **HOURLY_5)
        c.ok("budget_create", key="slots", **SLOTS_4)
        _enqueue(c, 20, [{"key": "hourly"}], queue="drip")
        _enqueue(c, 20, [{"key": "slots"}], queue="pool")
        assert len(_claim(c, 3, "drip")) == 3
        held = _claim(c, 100, "pool")
        assert len(held) == 4
    daemon.kill()
    daemon.start()
    with daemon.client() as c:
        # Two tokens were left in the hour: a restart hands out no fresh burst.
        assert len(_claim(c, 100, "drip")) == 2
        assert _claim(c, 100, "drip") == []
        # The four still running hold their slots across the restart.
        assert _claim(c, 100, "pool") == []
        assert c.ok("budget_get", key="slots")["budget"]["state"]["in_flight"] == 4
        c.ok("complete", job_id=held[0]["id"], lease=held[0]["lease"])
        freed = c.ok("claim_next", queues=["pool"], max=100, wait_ms=5000)["jobs"]
        assert len(freed) == 1
