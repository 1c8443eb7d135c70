"""Shadow mode of budgets, queue policies and quotas (``enforce: false``) through
the real core on MockClock: a burst goes through, ``would_block`` counts exactly
the jobs enforcement would have held, and switching to enforcing holds the next."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from actors.errors import Refused
from daemon.admission import policy_provision
from daemon.config import parse_config
from daemon.core import Core
from daemon.verbs.budgets import provision
from tests.unit.harness import call, running_core

DAY = {"period": "day", "tz": "UTC", "start": "00:00"}
LONG = 86_400_000  # a day-long lease: nothing lapses in these tests


def decisions(core: Core, limit: str, outcome: str) -> float:
    sample = core.metrics.registry.get_sample_value
    labels = {"limit": limit, "outcome": outcome}
    return sample("sluicegate_admission_decisions_total", labels) or 0


async def enqueue(core: Core, n: int, **extra: Any) -> None:
    await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t", **extra}] * n)


async def claim_one_by_one(core: Core, n: int) -> int:
    got = 0
    for _ in range(n):
        answer = await call(core, "claim_next", queues=["q"], lease_ms=LONG)
        got += len(answer["jobs"])
    return got


async def refused(coro: Any) -> Refused:
    with pytest.raises(Refused) as info:
        await coro
    return info.value


async def test_a_shadowed_window_lets_the_burst_through_and_counts_the_rest(
    tmp_path, autojump_clock, caplog
):
    caplog.set_level(logging.INFO, logger="sluicegate.limits")
    async with running_core(tmp_path) as core:
        made = await call(core, "policy_set", queue="q", max_claims_per_window=3, window=DAY,
                          enforce=False)  # fmt: skip
        assert made["policy"]["enforce"] is False
        await enqueue(core, 11)
        assert await claim_one_by_one(core, 10) == 10
        assert decisions(core, "policy.window", "would_block") == 7
        assert decisions(core, "policy.window", "allowed") == 3
        line = "limits namespace=default limit=policy.window queue=q jobs=1 would_block=true"
        assert caplog.text.count(line) == 7
        status = (await call(core, "admission_status", queue="q"))["queues"][0]
        assert status["used"] == 3  # a denial never charges the window
        assert status["status"]["state"] == "admitted"  # a shadow holds nothing back
        # Enforcing from now: the same window, already used up, holds the next claim.
        await call(core, "policy_set", queue="q", max_claims_per_window=3, window=DAY)
        answer = await call(core, "claim_next", queues=["q"])
        assert answer["empty"] and answer["deferred"][0]["reason"] == "window_exhausted"
        assert decisions(core, "policy.window", "blocked") == 1
        audit = (await call(core, "audit_list", target_kind="queue"))["records"]
        flip = [r for r in audit if r["action"] == "set_policy"][-1]
        assert flip["before"]["enforce"] is False and "enforce" not in flip["after"]


async def test_a_shadowed_in_flight_cap_counts_one_claim_of_many(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_in_flight=2, enforce=False)
        await enqueue(core, 5)
        answer = await call(core, "claim_next", queues=["q"], max=5, lease_ms=LONG)
        assert len(answer["jobs"]) == 5
        assert answer["jobs"][0]["admission"]["in_flight"] == 5  # a level: what runs
        assert decisions(core, "policy.in_flight", "would_block") == 3


@pytest.mark.parametrize(
    "strategy", [{"type": "while_in_flight"}, {"type": "time_based", "duration_ms": 3_600_000}]
)
async def test_a_shadowed_budget_lets_the_burst_through(tmp_path, autojump_clock, strategy):
    async with running_core(tmp_path) as core:
        made = await call(core, "budget_create", key="b", allocation=3, strategy=strategy,
                          enforce=False)  # fmt: skip
        assert made["budget"]["enforce"] is False
        await enqueue(core, 11, budgets=[{"key": "b"}])
        assert await claim_one_by_one(core, 10) == 10
        assert decisions(core, "budget", "would_block") == 7
        assert decisions(core, "budget", "allowed") == 3
        state = (await call(core, "budget_get", key="b"))["budget"]["state"]
        assert state["in_flight"] == 10 and state["parked"] == 0
        # time_based: only the 3 it would have admitted took tokens (none left);
        # while_in_flight: 10 run, 7 over the allocation.
        assert state["available"] == (0 if strategy["type"] == "time_based" else -7)
        (waiting,) = (await call(core, "list", status="pending"))["jobs"]
        assert waiting["admission"]["state"] == "admitted"  # it holds nothing back
        patched = await call(core, "budget_patch", key="b", enforce=True)
        assert "enforce" not in patched["budget"]
        answer = await call(core, "claim_next", queues=["q"])
        assert answer["empty"] and answer["deferred"][0]["reason"] == "budget_exhausted"
        assert decisions(core, "budget", "blocked") == 1


async def test_shadowing_a_budget_lets_its_parked_jobs_go(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "budget_create", key="b", allocation=1,
                   strategy={"type": "while_in_flight"})  # fmt: skip
        await enqueue(core, 4, budgets=[{"key": "b"}])
        assert await claim_one_by_one(core, 4) == 1  # three parked
        assert (await call(core, "budget_get", key="b"))["budget"]["state"]["parked"] == 3
        await call(core, "budget_patch", key="b", enforce=False)
        assert await claim_one_by_one(core, 3) == 3
        audit = (await call(core, "audit_list", target_kind="budget"))["records"]
        assert audit[-1]["after"]["enforce"] is False and "enforce" not in audit[-1]["before"]


async def test_a_shadowed_quota_writes_everything_and_counts_the_excess(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "quota_set", quota={"max_pending": 3, "max_running": 2,
                                             "enforce": False})  # fmt: skip
        for _ in range(10):
            await enqueue(core, 1)
        assert decisions(core, "quota.max_pending", "would_block") == 7
        assert decisions(core, "quota.max_pending", "allowed") == 3
        assert len((await call(core, "claim_next", queues=["q"], max=5))["jobs"]) == 5
        assert decisions(core, "quota.max_running", "would_block") == 3
        quota = (await call(core, "quota_get"))["quota"]
        assert quota["enforce"] is False
        await call(core, "quota_set", quota={"max_pending": 3, "max_running": 2})
        assert "enforce" not in (await call(core, "quota_get"))["quota"]
        assert (await refused(enqueue(core, 1))).code == "queue_full"
        assert (await call(core, "claim_next", queues=["q"]))["deferred"][0]["reason"] == (
            "running_full"
        )
        assert decisions(core, "quota.max_pending", "blocked") == 1
        audit = (await call(core, "audit_list", target_kind="namespace"))["records"]
        assert audit[-1]["before"]["enforce"] is False and "enforce" not in audit[-1]["after"]


async def test_a_shadowed_rate_charges_only_what_it_would_admit(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "quota_set", quota={"enqueue_rate": "3/h", "on_excess": "drop",
                                             "enforce": False})  # fmt: skip
        answer = await call(core, "enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 10)
        assert not any(r["shed"] for r in answer["results"])
        assert decisions(core, "quota.enqueue_rate", "would_block") == 7
        await call(core, "quota_set", quota={"enqueue_rate": "3/h", "on_excess": "drop"})
        answer = await call(core, "enqueue", queue="q", type="t")
        assert answer["shed"]  # the bucket is spent: the next is held (shed)


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("policy_set", {"queue": "q", "max_in_flight": 1, "enforce": "no"}),
        ("budget_create", {"key": "b", "allocation": 1,
                           "strategy": {"type": "while_in_flight"}, "enforce": "no"}),
        ("budget_patch", {"key": "b", "enforce": 0}),
        ("quota_set", {"quota": {"max_pending": 1, "enforce": "no"}}),
    ],
)  # fmt: skip
async def test_a_bad_enforce_is_refused_and_nothing_written(tmp_path, autojump_clock, op, args):
    async with running_core(tmp_path) as core:
        if op == "budget_patch":
            await call(core, "budget_create", key="b", allocation=1,
                       strategy={"type": "while_in_flight"})  # fmt: skip
        before = (await call(core, "audit_list"))["records"]
        error = await refused(call(core, op, **args))
        assert (error.code, error.details["field"]) == ("invalid_argument", "enforce")
        assert (await call(core, "audit_list"))["records"] == before


async def test_the_config_file_provisions_shadowed_limits(tmp_path, autojump_clock):
    config = parse_config(
        {
            "quotas": {"default": {"max_pending": 1, "enforce": False}},
            "budgets": {"default": {"b": {"allocation": 1, "enforce": False,
                                          "strategy": {"type": "while_in_flight"}}}},
            "policies": {"default": {"q": {"max_in_flight": 1, "enforce": False}}},
        },
        "t.toml",
    )  # fmt: skip
    async with running_core(tmp_path, config=config) as core:
        for write in (
            provision(core, config.budget_specs),
            core.quotas.provision(),
            policy_provision.provision(core.policies, config.policy_tables),
        ):
            await core.writer.write(write)
        assert (await call(core, "quota_get"))["quota"]["enforce"] is False
        assert (await call(core, "budget_get", key="b"))["budget"]["enforce"] is False
        assert (await call(core, "policy_get", queue="q"))["policy"]["enforce"] is False
        await enqueue(core, 3, budgets=[{"key": "b"}])
        assert len((await call(core, "claim_next", queues=["q"], max=3))["jobs"]) == 3
        assert decisions(core, "budget", "would_block") == 2
        assert decisions(core, "policy.in_flight", "would_block") == 2
        # on_excess = reject refuses a call as a unit: all three would have been held.
        assert decisions(core, "quota.max_pending", "would_block") == 3


def test_a_bad_enforce_in_the_config_file_names_the_field():
    from daemon.config import ConfigError

    with pytest.raises(ConfigError) as info:
        parse_config({"budgets": {"ns": {"b": {"allocation": 1, "enforce": "no",
                                               "strategy": {"type": "while_in_flight"}}}}},
                     "t.toml")  # fmt: skip
    assert "budgets.ns.b.enforce" in str(info.value)


async def test_a_shadowed_group_cap_holds_no_group_back(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "policy_set", queue="q", max_in_flight_per_group=1, enforce=False)
        await enqueue(core, 3, group="a")
        assert await claim_one_by_one(core, 3) == 3
        assert decisions(core, "policy.group", "would_block") == 2


async def test_a_shadowed_quota_shadows_its_door_limits_not_the_hard_ones(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        bucket = {"capacity": 1, "refill_per_s": 0.001}
        await call(core, "quota_set", quota={"request_rate": bucket, "max_item_bytes": 6,
                                             "enforce": False})  # fmt: skip
        for _ in range(3):
            await call(core, "status")
        sample = core.metrics.registry.get_sample_value
        labels = {"limit": "request_rate", "outcome": "would_block"}
        assert sample("sluicegate_door_decisions_total", labels) == 2  # the first had a token
        too_big = await refused(call(core, "enqueue", queue="q", type="t", payload={"a": 1}))
        assert too_big.code == "payload_too_large"  # hard, even in shadow mode
