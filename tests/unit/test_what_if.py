"""``what_if`` through the real core on MockClock: the preview of each kind of change,
its bad inputs, and that it writes nothing (every table's rows and the
connection's change count are the same after every preview)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import trio

from actors.errors import Refused
from actors.window import HOUR_MS
from daemon.config import parse_config
from daemon.core import Core
from daemon.openapi_shapes import PREVIEWED
from daemon.verbs.what_if import PREVIEWS
from tests.unit.harness import WALL0, call, claim_jobs, running_core

HOURLY = {"period": "hour", "tz": "UTC", "start": "00:00"}
#: WALL0 is 22:13:20 UTC: the hourly window ends at 23:00.
WINDOW_END = WALL0 - WALL0 % HOUR_MS + HOUR_MS
SIX_AN_HOUR = {"allocation": 6, "strategy": {"type": "time_based", "duration_ms": HOUR_MS}}


def fingerprint(core: Core) -> tuple[str, int]:
    """Every table's rows, hashed, and how many rows the connection ever changed."""
    conn = core.conn
    digest = hashlib.sha256()
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]  # fmt: skip
    for table in tables:
        digest.update(table.encode())
        for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid'):
            digest.update(repr(row).encode())
    return digest.hexdigest(), conn.total_changes


async def preview(core: Core, **change: Any) -> dict[str, Any]:
    """``what_if`` of ``change``, checking that the store is unchanged after it."""
    before = fingerprint(core)
    answer = await call(core, "what_if", change=change)
    assert fingerprint(core) == before
    assert len(answer["flow"]) == 24
    assert [h["hour_start"] for h in answer["flow"]] == [
        core.clock.now_ms() + k * HOUR_MS for k in range(24)
    ]
    return answer


async def enqueue(core: Core, n: int, **job: Any) -> None:
    jobs = [{"queue": "q", "type": "t", **job} for _ in range(n)]
    await call(core, "enqueue_many", jobs=jobs)


async def test_a_lowered_window_cap_admits_nothing_until_the_boundary(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_claims_per_window=60, window=HOURLY)
        await enqueue(core, 160)
        assert len(await claim_jobs(core, max=100, lease_ms=86_400_000)) == 60
        audit = await call(core, "audit_list")

        lower = await preview(core, op="policy_set", queue="q", max_claims_per_window=50,
                              window=HOURLY)  # fmt: skip
        assert lower["op"] == "policy_set"
        now = lower["now"]
        assert now["admissible_now"] == {"before": 0, "after": 0}
        assert (now["deferred_jobs"], now["released_jobs"]) == (0, 0)
        assert now["head_next_eligible_at"] == WINDOW_END  # exact: the next window
        assert now["shed_next_enqueues"] is False
        assert now["budget_available"] == {"before": None, "after": None}
        # 50 at 23:00, 50 at 00:00 (the hours run from now, 22:13:20).
        assert [h["admitted"] for h in lower["flow"]][:3] == [50, 50, 0]

        raised = await preview(core, op="policy_set", queue="q", max_claims_per_window=100,
                               window=HOURLY)  # fmt: skip
        now = raised["now"]
        assert now["admissible_now"] == {"before": 0, "after": 40}
        assert (now["deferred_jobs"], now["released_jobs"]) == (0, 40)
        assert now["head_next_eligible_at"] == core.clock.now_ms()
        assert [h["admitted"] for h in raised["flow"]][:2] == [100, 0]
        # Nothing was written: the policy, its usage and the audit trail are as they were.
        assert (await call(core, "policy_get", queue="q"))["policy"]["max_claims_per_window"] == 60
        assert await call(core, "audit_list") == audit
        assert len(await claim_jobs(core, max=100)) == 0


async def test_a_dropping_quota_removes_no_waiting_job_and_sheds_the_next(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await enqueue(core, 50)
        drop = await preview(core, op="quota_set", quota={"max_pending": 30, "on_excess": "drop"})
        now = drop["now"]
        assert (now["deferred_jobs"], now["released_jobs"]) == (0, 0)
        assert now["admissible_now"] == {"before": 50, "after": 50}
        assert now["shed_next_enqueues"] is True and now["next_enqueue"] == "shed"
        assert any("no job already waiting is removed" in a for a in drop["assumptions"])
        reject = await preview(core, op="quota_set", quota={"max_pending": 30})
        assert (reject["now"]["shed_next_enqueues"], reject["now"]["next_enqueue"]) == (
            False, "queue_full",
        )  # fmt: skip
        roomy = await preview(core, op="quota_set", quota={"max_pending": 60, "max_running": 20})
        assert roomy["now"]["next_enqueue"] == "admitted"
        assert roomy["now"]["admissible_now"] == {"before": 50, "after": 20}
        assert roomy["now"]["deferred_jobs"] == 30
        assert (await call(core, "quota_get"))["quota"] is None
        assert (await call(core, "status"))["queues"][0]["pending"] == 50
        # A change of no quota answers what the quota in force says.
        await call(core, "quota_set", quota={"max_pending": 40, "on_excess": "drop"})
        policy = await preview(core, op="policy_set", queue="q", max_in_flight=1)
        assert policy["now"]["next_enqueue"] == "shed" and policy["now"]["shed_next_enqueues"]


async def test_the_flow_of_a_six_an_hour_drip_over_twenty_parked_jobs(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "budget_create", key="b", **SIX_AN_HOUR)
        await enqueue(core, 26, budgets=[{"key": "b"}])
        assert len(await claim_jobs(core, max=100, lease_ms=86_400_000)) == 6  # the burst
        assert core.budgets[("default", "b")].parked == 20
        same = await preview(core, op="budget_put", key="b", **SIX_AN_HOUR)
        now = same["now"]
        assert now["admissible_now"] == {"before": 0, "after": 0}
        assert now["budget_available"] == {"before": 0.0, "after": 0.0}
        # The pool is empty: a token every 10 minutes, at +10 .. +50 in the first hour,
        # six in each of the next two, and the last three at +180, +190 and +200 minutes.
        assert [h["admitted"] for h in same["flow"]] == [5, 6, 6, 3] + [0] * 20
        assert now["head_next_eligible_at"] == core.clock.now_ms() + 600_000
        # Twice the drip (the burst stays 6, the tokens stay 0): one every 5 minutes.
        doubled = await preview(core, op="budget_patch", key="b", allocation=12)
        assert [h["admitted"] for h in doubled["flow"]][:3] == [11, 9, 0]
        assert any("costs 1 token" in a for a in doubled["assumptions"])
        fresh = await preview(core, op="budget_put", key="new", **SIX_AN_HOUR)
        assert fresh["now"]["budget_available"] == {"before": None, "after": 6.0}
        assert "new" not in [b["key"] for b in (await call(core, "budget_list"))["budgets"]]


async def test_six_an_hour_with_one_token_waiting_is_six_in_the_first_hour_then_one_every_10_min(
    tmp_path, autojump_clock
):
    """Issue 19's line as written: a 6-an-hour drip (burst 1, its token there) over
    20 waiting jobs admits exactly 6 in the first hour (at +0, +10, .. +50 min),
    then one every 10 minutes: 6, 6, 6, 2."""
    async with running_core(tmp_path) as core:
        one = {**SIX_AN_HOUR, "strategy": {**SIX_AN_HOUR["strategy"], "burst": 1}}
        await call(core, "budget_create", key="b", **one)
        await enqueue(core, 20, budgets=[{"key": "b"}])
        answer = await preview(core, op="budget_put", key="b", **one)
        assert [h["admitted"] for h in answer["flow"]] == [6, 6, 6, 2] + [0] * 20
        assert answer["now"]["admissible_now"] == {"before": 1, "after": 1}


async def test_a_shadowed_limit_is_previewed_as_holding_nothing(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_claims_per_window=60, window=HOURLY)
        await enqueue(core, 100)
        assert len(await claim_jobs(core, max=100, lease_ms=86_400_000)) == 60
        shadowed = await preview(core, op="policy_set", queue="q", max_claims_per_window=60,
                                 window=HOURLY, enforce=False)  # fmt: skip
        assert shadowed["now"]["admissible_now"] == {"before": 0, "after": 40}
        assert shadowed["flow"][0]["admitted"] == 40
        assert any("shadowed" in a for a in shadowed["assumptions"])


async def test_an_in_flight_cap_drains_at_the_observed_run_time(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await enqueue(core, 3)
        for job in await claim_jobs(core, max=3, lease_ms=86_400_000):
            await trio.sleep(600)  # virtual time (autojump_clock): 10 minutes after the last
            await call(core, "complete", job_id=job["id"], lease=job["lease"])
        await enqueue(core, 20)
        answer = await preview(core, op="policy_set", queue="q", max_in_flight=2)
        assert answer["now"]["admissible_now"] == {"before": 20, "after": 2}
        assert answer["now"]["deferred_jobs"] == 18
        # The median of 10, 20 and 30 minutes: two jobs every 20 minutes, 6 an hour.
        assert [h["admitted"] for h in answer["flow"]][:5] == [6, 6, 6, 2, 0]
        assert any("1200000 ms" in a for a in answer["assumptions"])


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ("quota_set", "invalid_argument", "change"),
        ({}, "invalid_argument", "change.op"),
        ({"op": "enqueue", "queue": "q"}, "invalid_argument", "change.op"),
        ({"op": "quota_set", "quota": {"max_pending": -1}}, "invalid_argument",
         "change.max_pending"),
        ({"op": "quota_set", "quota": {}, "extra": 1}, "invalid_argument", "change.extra"),
        ({"op": "policy_set", "max_in_flight": 2}, "invalid_argument", "change.queue"),
        ({"op": "policy_set", "queue": "q", "max_claims_per_window": 5,
          "window": {"period": "hour", "tz": "Mars/Base", "start": "00:00"}},
         "invalid_argument", "change.window.tz"),
        ({"op": "budget_put", "key": "b", "allocation": 0}, "invalid_argument",
         "change.allocation"),
        ({"op": "budget_put", "key": "b", "allocation": 1, "strategy": {"type": "x"}},
         "invalid_argument", "change.strategy.type"),
        ({"op": "budget_patch", "key": "absent"}, "not_found", None),
        ({"op": "quota_set", "quota": {}, "namespace": "x"}, "invalid_argument",
         "change.namespace"),
        ({"op": "queue_configure", "queue": "q", "dead_ttl_ms": "1"}, "invalid_argument",
         "change.dead_ttl_ms"),
    ],
)  # fmt: skip
async def test_bad_changes_are_refused_as_the_real_verb_refuses_them(
    tmp_path, autojump_clock, change, code, field
):
    async with running_core(tmp_path) as core:
        before = fingerprint(core)
        with pytest.raises(Refused) as refused:
            await call(core, "what_if", change=change)
        assert refused.value.code == code
        assert refused.value.details.get("field") == field
        assert fingerprint(core) == before


async def test_a_retention_change_leaves_admission_as_it_is(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_in_flight=3)
        await enqueue(core, 5)
        answer = await preview(core, op="queue_configure", queue="q", dead_ttl_ms=60_000)
        assert answer["now"]["admissible_now"] == {"before": 3, "after": 3}
        assert (answer["now"]["deferred_jobs"], answer["now"]["released_jobs"]) == (0, 0)
        assert "queue_configure changes retention only" in " ".join(answer["assumptions"])
        # No completion seen: the 3 that start hold their slots all day.
        assert [h["admitted"] for h in answer["flow"]][:2] == [3, 0]
        await call(core, "quota_set", quota={"max_queues": 1})
        with pytest.raises(Refused) as refused:  # as queue_configure itself would refuse
            await call(core, "what_if", change={"op": "queue_configure", "queue": "new"})
        assert refused.value.code == "quota_exceeded"


async def test_a_quota_the_config_file_manages_is_refused_as_quota_set_refuses_it(
    tmp_path, autojump_clock
):
    config = parse_config({"quotas": {"default": {"max_pending": 10}}}, "test.toml")
    async with running_core(tmp_path, config=config) as core:
        change = {"op": "quota_set", "quota": {"max_pending": 5}}
        with pytest.raises(Refused) as previewed:
            await call(core, "what_if", change=change)
        with pytest.raises(Refused) as written:
            await call(core, "quota_set", quota={"max_pending": 5})
        assert (previewed.value.code, previewed.value.message) == (
            written.value.code, written.value.message,
        )  # fmt: skip
        assert previewed.value.code == "conflict"


def test_the_openapi_document_lists_every_previewed_verb():
    assert tuple(PREVIEWS) == PREVIEWED
