"""Every failpoint (daemon/failpoints.py) at least once under a workload: the
daemon exits at the point (``os._exit``, as a crash), is restarted on the same
state, and the history checker's invariants hold (lost 0, unexpected 0, every
duplicate explained); limits the workload uses are never over-admitted.

Each point is armed as ``name=exit@N`` with a seeded N, twice over (the
restarted daemon is armed again), then the daemon runs unarmed to the drain.
"""

from __future__ import annotations

import random

import pytest

from daemon.failpoints import ENV_VAR, EXIT_STATUS, POINTS
from tests.chaos.history import History, check, over_admitted
from tests.chaos.workload import Workload
from tests.support import RawClient, wait_until

pytestmark = pytest.mark.e2e

SEED = 17
JOBS = 400
EXITS = 2
#: Budget-bound jobs: a while_in_flight budget of this many slots.
SLOTS = 3
RETENTION = '\n[retention]\ncompleted_ttl = "1ms"\ninterval = "1s"\nbatch = 5\n'


def _budgeted(_key: str) -> dict:
    return {"budgets": [{"key": "slots", "cost": 1}]}


def _budget_group(job: dict) -> tuple[str, ...]:
    return (f"queue:{job['queue']}", "budget:slots")


def test_every_failpoint_is_named_here():
    assert set(CASES) == set(POINTS)


#: failpoint -> (extra config, hits before the exit: a range, budget-bound jobs)
CASES = {
    "commit_before": ("", (5, 30), False),
    "commit_after_before_reply": ("", (5, 30), False),
    "claim_after_commit_before_send": ("", (3, 15), False),
    "retention_mid_batch": (RETENTION, (1, 3), False),
    "budget_debit_before_claim": ("", (5, 40), True),
}


@pytest.mark.parametrize("point", sorted(CASES))
def test_a_crash_at_each_failpoint_loses_nothing(point, make_daemon, daemon_store):
    extra, (low, high), budgeted = CASES[point]
    rng = random.Random(f"{SEED}-{point}")
    daemon = make_daemon(extra_config=extra, http=False, start=False)
    history = History()
    armed = {ENV_VAR: f"{point}=exit@{rng.randint(low, high)}"}
    daemon.start(env=armed)
    if budgeted:
        with RawClient(daemon.socket) as c:
            c.ok("budget_create", key="slots", allocation=SLOTS,
                 strategy={"type": "while_in_flight"})  # fmt: skip
    workload = Workload(
        daemon, history, jobs=JOBS, batch=10, claim_max=5,
        job_args=_budgeted if budgeted else None, groups=_budget_group if budgeted else None,
    )  # fmt: skip
    workload.start()
    try:
        for exit_no in range(EXITS):
            wait_until(lambda: daemon.proc.poll() is not None, timeout=60,
                       what=f"{point} hit ({exit_no + 1} of {EXITS})")  # fmt: skip
            assert daemon.proc.returncode == EXIT_STATUS, daemon.log_text()[-2000:]
            assert f"failpoint {point}: exit" in daemon.log_text()
            daemon.kill()  # reaps the process, closes its log
            history.crash()
            last = exit_no == EXITS - 1
            daemon.start(timeout=60, env=None if last else armed)
            history.restart()
        workload.wait_produced(timeout=120)
    finally:
        workload.stop_producing.set()
        workload.drain(timeout=120)
    final = workload.final_state()
    report = check(history.ops, final)
    print(f"failpoint {point} on {daemon_store}: {report.summary()}")
    assert report.crashes == EXITS
    assert report.valid, (report.summary(), sorted(report.lost)[:5], report.unexplained[:2])
    if point == "retention_mid_batch":  # the sweep finished after the restarts
        wait_until(lambda: not [k for k, s in workload.final_state().items() if s == "completed"],
                   timeout=30, what="retention to delete every completed job")  # fmt: skip
    else:
        acked = {op.key for op in history.ops if op.f == "enqueue" and op.type == "ok"}
        assert {final[k] for k in acked} == {"completed"}
    if budgeted:
        assert over_admitted(history.ops, {"budget:slots": SLOTS}) == {}
        with RawClient(daemon.socket) as c:
            state = c.ok("budget_get", key="slots")["budget"]["state"]
        assert (state["in_flight"], state["available"], state["parked"]) == (0, SLOTS, 0)
