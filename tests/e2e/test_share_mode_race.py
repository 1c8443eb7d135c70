"""Share mode under a race (issue 15): a limit made while other daemons work in
share mode holds from its first instant, across real daemons on PostgreSQL.

Two daemons and sixteen claimers spread over them claim, hold and complete
jobs of queue ``q``, which nothing limits: both daemons run their writes in
share mode, side by side. Mid-run a queue policy ``max_in_flight`` is set on
``q`` through daemon A. The database's own record of every move into and out
of ``running`` (tests/chaos/pg_nemesis.py's ``RECORDER``), with the policy's
row marked in the same sequence, replayed in order, must show no claim after
the mark that leaves more than the cap in flight. Everything before the mark
committed before the policy (its exclusive lock waited for every share holder),
and everything of the namespace after it is exclusive, so the sequence is the
commit order where it matters.

That each share-mode check is what holds the limit is shown step by step in
tests/unit/test_share_mode.py, each check swapped out in turn. Not here: with
the epoch check swapped out, daemon B over-admits only until it next reads the
state back, which the policy's notice makes it do within milliseconds, so
whether one of its claims falls in between depends on the machine's load (a
CI run under load saw none).
"""

from __future__ import annotations

import random
import threading
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.pg_nemesis import RECORDER
from tests.e2e.test_cluster_exactness import _daemon, _wait

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

CAP = 5
CLAIMERS = 16
BEFORE, AFTER = 300, 400  # claims recorded before the policy, and after it
#: The policy's row, in the moves' sequence.
MARK = (
    """CREATE FUNCTION mark_policy() RETURNS trigger AS $$
    BEGIN
      INSERT INTO moves (id, queue, source, target, at) VALUES ('-', NEW.queue, NULL, 'policy', 0);
      RETURN NEW;
    END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER mark_policy AFTER INSERT ON policies FOR EACH ROW "
    "EXECUTE FUNCTION mark_policy()",
)


def overs_after_the_mark(moves: list[tuple[Any, ...]]) -> tuple[int, list[str]]:
    """Claims after the policy's mark, and those that left more than ``CAP`` in flight."""
    running, marked, claims, overs = 0, False, 0, []
    for _seq, job_id, _queue, source, target, _at, _budgets in moves:
        if target == "policy":
            marked = True
        elif target == "running":
            running += 1
            if marked:
                claims += 1
                if running > CAP:
                    overs.append(f"{running} in flight after claiming {job_id}")
        elif source == "running":
            running -= 1
    return claims, overs


def _claimer(daemon: Any, seed: int, stop: threading.Event, errors: list[Any]) -> None:
    rng = random.Random(seed)
    held: list[dict[str, Any]] = []
    try:
        with closing(daemon.client()) as c:
            while not stop.is_set():
                got = c.ok("claim_next", queues=["q"], max=rng.randint(1, 3), wait_ms=50)
                held += [j["job"] for j in got["jobs"]]
                # Hold some jobs across the next claim: claims race completions.
                while held and (len(held) > 2 or rng.random() < 0.3):
                    job = held.pop(rng.randrange(len(held)))
                    c.ok("complete", job_id=job["id"], lease=job["lease"])
            for job in held:
                c.ok("complete", job_id=job["id"], lease=job["lease"])
    except BaseException as exc:  # reported by the test, never lost in a thread
        errors.append(exc)
        stop.set()


def _run(tmp_path: Path, dsn: str) -> tuple[int, list[str], list[int]]:
    with ExitStack() as stack:
        daemons = []
        for i in range(2):
            daemon = _daemon(tmp_path / f"d{i}", dsn, {})
            stack.callback(daemon.cleanup)
            daemons.append(daemon)
        a = daemons[0]
        for statement in (*RECORDER, *MARK):
            a.sql(statement)
        with closing(a.client()) as c:
            for _ in range(20):
                c.ok("enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 100)
        stop, errors = threading.Event(), []
        threads = [threading.Thread(target=_claimer, args=(daemons[i % 2], i, stop, errors))
                   for i in range(CLAIMERS)]  # fmt: skip
        for t in threads:
            t.start()

        def claims() -> int:
            return a.sql("SELECT count(*) FROM moves WHERE target = 'running'")[0][0]

        try:
            _wait(lambda: claims() >= BEFORE or bool(errors), timeout=60)
            shared = []
            for daemon in daemons:
                with closing(daemon.client()) as c:
                    shared.append(c.ok("status")["daemon"]["cluster"]["shared"])
            with closing(a.client()) as c:
                c.ok("policy_set", queue="q", max_in_flight=CAP)
            after = claims() + AFTER
            _wait(lambda: claims() >= after or bool(errors), timeout=90)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert not errors, errors[:3]
        claimed, overs = overs_after_the_mark(a.sql("SELECT * FROM moves ORDER BY seq"))
        return claimed, overs, shared


def test_a_policy_set_mid_run_holds_at_once_though_both_daemons_worked_in_share_mode(
    tmp_path, pg_dsn
):
    claimed, overs, shared = _run(tmp_path, pg_dsn)
    assert all(n > 0 for n in shared), shared  # both daemons wrote in share mode
    assert claimed >= AFTER
    assert overs == [], overs[:5]
