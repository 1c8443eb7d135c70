"""What the model found in the daemon, as ordinary tests (issue 17, part 3).

Each test is the shrunk example of :mod:`tests.model.test_model`, written out on
the in-process core (tests/unit's harness) so it runs alone and reads plainly.
Each failed before its fix.
"""

from __future__ import annotations

import trio

from tests.unit.harness import call, claim_jobs, enqueue_job, running_core

WINDOW = {"period": "hour", "tz": "UTC", "start": "00:00"}


async def test_a_claim_that_parks_a_capped_queue_s_row_reads_on(tmp_path, autojump_clock):
    with trio.fail_after(100):
        async with running_core(tmp_path) as core:
            await call(core, "budget_create", key="flight", allocation=1,
                       strategy={"type": "while_in_flight"})  # fmt: skip
            await call(core, "policy_set", queue="q", max_claims_per_window=2, window=WINDOW)
            bound = [{"key": "flight", "cost": 1}]
            first = await enqueue_job(core, budgets=bound)
            await enqueue_job(core, budgets=bound)  # the budget cannot pay it while first runs
            free = await enqueue_job(core)
            (claimed,) = await claim_jobs(core, max=1)
            assert claimed["id"] == first["id"]
            # One claim left in the window: the read is capped at one row, the bound
            # job, which is parked; the unbound job behind it must be taken.
            assert [j["id"] for j in await claim_jobs(core, max=2)] == [free["id"]]
