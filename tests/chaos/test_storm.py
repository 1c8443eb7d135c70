"""The kill -9 storm: producers and workers run while the daemon is SIGKILLed at
seeded random instants and restarted on the same state; then everything is
drained and the history checked (tests/chaos/history.py): lost 0, unexpected 0,
every duplicate explained (a crash or a lease lapse).

CI runs 10 kills during 5,000 jobs on each store. By hand, the long storm::

    SLUICEGATE_CHAOS_KILLS=100 SLUICEGATE_CHAOS_JOBS=100000 \\
        .venv/bin/pytest -n 0 -s tests/chaos/test_storm.py -k "storm_loses and sqlite"

(``and postgres`` for PostgreSQL; ``SLUICEGATE_CHAOS_SEED`` picks the seed, 17 by
default; the figures are printed. docs/reliability.md has the last ones.)
"""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.chaos.history import History, check, in_flight_peaks, over_admitted
from tests.chaos.workload import Workload, storm
from tests.support import RawClient

pytestmark = pytest.mark.e2e

KILLS = int(os.environ.get("SLUICEGATE_CHAOS_KILLS", "10"))
JOBS = int(os.environ.get("SLUICEGATE_CHAOS_JOBS", "5000"))
SEED = int(os.environ.get("SLUICEGATE_CHAOS_SEED", "17"))
#: Queue q0 has a policy of this many in flight (q1 none): never over, kills included.
MAX_IN_FLIGHT = 4


def run_storm(daemon, *, kills: int, jobs: int, seed: int) -> tuple[Workload, dict[str, str]]:
    """The storm on ``daemon``: the workload and the store's final state."""
    rng = random.Random(seed)
    with RawClient(daemon.socket) as c:
        c.ok("policy_set", queue="q0", max_in_flight=MAX_IN_FLIGHT)
    history = History()
    workload = Workload(daemon, history, jobs=jobs)
    workload.start()
    try:
        done = storm(daemon, workload, rng, kills, timeout=60 + jobs / 20)
        workload.wait_produced(timeout=60 + jobs / 50)
    finally:
        workload.stop_producing.set()
        workload.drain(timeout=120 + jobs / 100)
    assert done == kills
    return workload, workload.final_state()


def test_kill_9_storm_loses_nothing_and_explains_every_duplicate(make_daemon, daemon_store):
    daemon = make_daemon(http=False)
    started = time.monotonic()
    workload, final = run_storm(daemon, kills=KILLS, jobs=JOBS, seed=SEED)
    report = check(workload.history.ops, final)
    print(f"storm {daemon_store} seed {SEED}: {KILLS} kills, {JOBS} jobs, "
          f"{time.monotonic() - started:.1f}s: {report.summary()}")  # fmt: skip
    assert report.crashes == KILLS
    assert report.acknowledged >= JOBS
    assert not report.lost, sorted(report.lost)[:10]
    assert not report.unexpected, sorted(report.unexpected)[:10]
    assert not report.unexplained, report.unexplained[:3]
    peak = in_flight_peaks(workload.history.ops)["queue:q0"]
    print(f"q0 in flight at most {peak} of max_in_flight {MAX_IN_FLIGHT}")
    assert over_admitted(workload.history.ops, {"queue:q0": MAX_IN_FLIGHT}) == {}
    # Drained: every acknowledged job ran to completion.
    acked = {op.key for op in workload.history.ops if op.f == "enqueue" and op.type == "ok"}
    assert {final[k] for k in acked} == {"completed"}


@pytest.mark.sqlite_only
def test_the_storm_catches_a_build_that_acknowledges_before_commit(make_daemon, monkeypatch):
    """The broken build (daemon/failpoints.py ``ack_before_commit``) answers each
    transaction's writes, then commits 20 ms later: kills land in between, and
    the checker finds acknowledged jobs lost."""
    monkeypatch.setenv("SLUICEGATE_FAILPOINTS", "ack_before_commit=on")
    daemon = make_daemon(http=False)
    workload, final = run_storm(daemon, kills=6, jobs=800, seed=SEED)
    report = check(workload.history.ops, final)
    print(f"ack_before_commit: {report.summary()}")
    assert report.lost, report.summary()
    assert not report.valid
