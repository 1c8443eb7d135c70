"""``reserve = {group: tokens}`` on a ``while_in_flight`` budget (issue 18): the
policy's lending rule (actors/lending.py) on a budget's tokens, through the core."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.errors import Refused
from tests.unit.harness import call, claim_jobs, running_core
from tests.unit.test_group_limits import _drive, check_lending


def _spec(reserve: dict[str, Any], allocation: int = 10) -> dict[str, Any]:
    return {"allocation": allocation,
            "strategy": {"type": "while_in_flight", "reserve": reserve}}  # fmt: skip


async def _enqueue(core: Any, group: str, n: int, cost: int = 1) -> None:
    job = {"queue": "q", "type": "t", "group": group, "budgets": [{"key": "b", "cost": cost}]}
    await call(core, "enqueue_many", jobs=[job] * n)


async def _claim_all(core: Any) -> list[dict]:
    """What eager workers take once released jobs are back (virtual time)."""
    await trio.sleep(0.01)
    out: list[dict] = []
    while jobs := await claim_jobs(core, ["q"], max=100):
        out += jobs
    return out


async def _complete(core: Any, job: dict) -> None:
    await call(core, "complete", job_id=job["id"], lease=job["lease"])


async def test_gold_reserves_four_tokens_of_ten_lent_while_idle(tmp_path, autojump_clock):
    """The policy's worked example on a budget: gold idle, a takes all 10; gold
    gets work: nothing revoked, the next tokens that free up go to gold."""
    with trio.fail_after(30):
        async with running_core(tmp_path) as core:
            await call(core, "budget_create", key="b", **_spec({"gold": 4}))
            await _enqueue(core, "a", 14)
            others = await _claim_all(core)
            assert len(others) == 10  # gold idle: its 4 tokens are lent
            await _enqueue(core, "gold", 6)
            assert await _claim_all(core) == []
            waiting = (await call(core, "list", queue="q", status="pending"))["jobs"]
            an_a = next(j for j in waiting if j["group"] == "a")
            gold: list[dict] = []
            for _ in range(2):
                await _complete(core, others.pop())
                await _complete(core, others.pop())
                admission = (await call(core, "get", job_id=an_a["id"]))["job"]["admission"]
                assert (admission["reason"], admission["exact"]) == (
                    "reserved_for_other_groups", False)  # fmt: skip
                got = await _claim_all(core)
                assert Counter(j["group"] for j in got) == {"gold": 2}  # freed tokens: gold's
                gold += got
            statuses = [(await call(core, "get", job_id=j["id"]))["job"]["status"] for j in others]
            assert statuses == ["running"] * 6  # nothing revoked
            for _ in range(6):  # gold busy: a never passes 6
                await _complete(core, others.pop(0))
                got = await _claim_all(core)
                others += [j for j in got if j["group"] != "gold"]
                gold += [j for j in got if j["group"] == "gold"]
                assert len(others) <= 6 and len(others) + len(gold) == 10


async def test_a_reserving_group_without_work_lends_everything(tmp_path, autojump_clock):
    with trio.fail_after(30):
        async with running_core(tmp_path) as core:
            await call(core, "budget_create", key="b", **_spec({"gold": 4, "silver": 3}))
            await _enqueue(core, "a", 12)
            assert len(await _claim_all(core)) == 10


@pytest.mark.parametrize(
    ("reserve", "field", "words"),
    [
        ({"gold": 6, "b": 5}, "strategy.reserve",
         "strategy.reserve reserves 11 tokens in all, more than allocation 10"),
        ({"gold": -1}, "strategy.reserve.gold", "from 0 to"),
        ({"gold": "4"}, "strategy.reserve.gold", "from 0 to"),
        ([4], "strategy.reserve", "an object {group: tokens}"),
        ({"a\nb": 1}, "strategy.reserve", "a group is"),
    ],
)  # fmt: skip
async def test_bad_reservations_are_refused_naming_the_field(tmp_path, autojump_clock, reserve,
                                                             field, words):  # fmt: skip
    async with running_core(tmp_path) as core:
        for verb in ("budget_create", "budget_put"):
            with pytest.raises(Refused) as err:
                await call(core, verb, key="b", **_spec(reserve))
            assert err.value.code == "invalid_argument" and err.value.details["field"] == field
            assert words in err.value.message
        time_based = {"type": "time_based", "duration_ms": 1000, "reserve": {"gold": 1}}
        with pytest.raises(Refused) as err:
            await call(core, "budget_create", key="b", allocation=5, strategy=time_based)
        assert "while_in_flight budgets only" in err.value.message
        assert (await call(core, "budget_list"))["budgets"] == []  # nothing written


async def test_reserve_reads_back_patches_and_counts_jobs_already_there(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await call(core, "budget_create", key="b", **_spec({}))
        await _enqueue(core, "a", 12)
        assert len(await _claim_all(core)) == 10
        await _enqueue(core, "gold", 2)
        # Set afterwards: the jobs already running and waiting are counted.
        got = await call(core, "budget_patch", key="b",
                         strategy={"reserve": {"gold": 2}})  # fmt: skip
        assert got["budget"]["strategy"] == {"type": "while_in_flight", "reserve": {"gold": 2}}
        with pytest.raises(Refused):
            await call(core, "budget_patch", key="b", allocation=1)
        running = (await call(core, "list", queue="q", status="running"))["jobs"]
        await _complete(core, running[0])
        assert [j["group"] for j in await _claim_all(core)] == ["gold"]


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(seed=st.integers(0, 2**32), reserve=st.integers(1, 6))
def test_lending_property_gold_short_only_while_every_token_is_busy(seed, reserve):
    """As the policy's (test_group_limits.py): never more than 10 tokens in flight;
    gold below min(reserve, its demand) only while all 10 are held, and another
    group gets tokens only when gold is not short; no token idle while work waits."""

    async def setup(core: Any) -> None:
        await call(core, "budget_create", key="b", **_spec({"gold": reserve}))

    for step in _drive(seed, 40, {}, reserve, setup, _enqueue):
        total, pending = check_lending(step, reserve)
        if total < 10:
            assert not +pending, step  # a token idle only when nothing waits


async def test_the_counts_come_back_at_a_restart(tmp_path, autojump_clock):
    """Counts per group and the notes of gold's parked jobs are rebuilt at start."""
    with trio.fail_after(30):
        async with running_core(tmp_path) as core:
            await call(core, "budget_create", key="b", **_spec({"gold": 2}))
            await _enqueue(core, "a", 12)
            assert len(await _claim_all(core)) == 10
            await _enqueue(core, "gold", 3)
            budget = core.budgets[("default", "b")]
            before = (budget.group_cost, budget.group_pending, budget.parked_of)
            assert before[:2] == ({"a": 10}, {"a": 2, "gold": 3})
        async with running_core(tmp_path) as core:
            budget = core.budgets[("default", "b")]
            assert (budget.group_cost, budget.group_pending, budget.parked_of) == before
            running = (await call(core, "list", queue="q", status="running"))["jobs"]
            await _complete(core, running[0])
            assert [j["group"] for j in await _claim_all(core)] == ["gold"]
