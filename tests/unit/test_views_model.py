"""The in-memory views equal the store after every commit (issue 14).

Random sequences of enqueues (delayed, unique, debounced, bound to budgets),
claims by queue and by id, completions, failures, releases, heartbeats,
lapsed leases, replays and budget, policy and quota changes run through the
real core (verbs, admission, the group committer, the timers) on virtual
time. After every commit, each view the daemon decides with is compared with
what the store says:

- the per-queue counts of every state;
- each budget's bound jobs, running holders, in-flight cost, parked jobs
  (per budget and per queue) and, for ``time_based``, its tokens;
- each policy queue's window usage and in-flight adjustment;
- each group-aware queue's jobs pending and in flight per group (its ring);
- each namespace quota's uncommitted reservations (none once committed).

Leaving the transition step out (:class:`daemon.admission.views.Views`)
breaks the comparison: the last test shows it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import lifecycle as lc
from actors.errors import Refused
from daemon.core import Core
from daemon.store.journal import Unreported
from tests.unit.harness import call, db_counts, mem_counts, running_core

NAMESPACES = ("a", "b")
QUEUES = ("q1", "q2")
WIF = {"type": "while_in_flight"}
DRIP = {"type": "time_based", "duration_ms": 10_000}


def check_views(core: Core) -> None:
    """Every in-memory view equals what the store says (raises AssertionError)."""
    assert mem_counts(core) == db_counts(core)
    conn, now = core.conn, core.clock.now_ms()
    bound: dict[tuple[str, str], list[int]] = {}
    holders: dict[tuple[str, str], set[str]] = {}
    for job_id, namespace, state, text in conn.execute(
        "SELECT id, namespace, state, budgets FROM jobs WHERE budgets IS NOT NULL "
        "AND state IN ('scheduled', 'pending', 'running')"
    ):
        for binding in orjson.loads(text):
            key = (namespace, binding["key"])
            bound.setdefault(key, []).append(binding["cost"])
            if state == lc.RUNNING:
                holders.setdefault(key, set()).add(job_id)
    parked = {
        (ns, key): n
        for ns, key, n in conn.execute(
            "SELECT namespace, parked_on, count(*) FROM jobs WHERE parked_on IS NOT NULL "
            "GROUP BY namespace, parked_on"
        )
    }
    stored = {(b.namespace, b.key): b for b in core.store.budgets.load_all()}
    for key, budget in core.budgets.items():
        costs = sorted(bound.get(key, []))
        assert sorted(c for c, n in budget.bound.items() for _ in range(n)) == costs, key
        assert budget.holders == holders.get(key, set()), key
        cost_of = {}
        for job_id in budget.holders:
            (text,) = conn.execute("SELECT budgets FROM jobs WHERE id = ?", (job_id,)).fetchone()
            cost_of[job_id] = next(b["cost"] for b in orjson.loads(text) if b["key"] == key[1])
        assert budget.pool.in_flight == sum(cost_of.values()), key
        assert budget.parked == parked.get(key, 0), key
        if budget.pool.time_based:
            assert budget.pool.available(now) == stored[key].pool.available(now), key
    per_queue: dict[tuple[str, str], dict[str, int]] = {}
    for ns, queue, key, n in core.store.jobs.parked_counts():
        per_queue.setdefault((ns, queue), {})[key] = n
    assert core.budget_gate.parked_by_queue == per_queue
    for (ns, queue), state in core.policies.states.items():
        assert state.in_flight_delta == 0, (ns, queue)
        state.roll(now)
        for meter in state.meters:  # every window of the policy, either form
            assert meter.used == core.store.policies.usage(ns, queue, meter.key, meter.start)
    for (ns, queue), ring in core.policies.groups.rings.items():
        pending: dict[str, int] = {}
        running: dict[str, int] = {}
        for group, status, n in core.store.jobs.group_counts(ns, queue):
            side = pending if status == lc.PENDING else running
            side[group] = side.get(group, 0) + n
        assert (ring.pending, ring.in_flight, ring.unknown) == (pending, running, set()), queue
    for actor in core.namespaces.known():
        assert (actor.pending_extra, actor.running_extra) == (0, 0), actor.namespace


# -- the operations ------------------------------------------------------------------

namespace = st.sampled_from(NAMESPACES)
queue = st.sampled_from(QUEUES)
pick = st.integers(0, 50)
binding = st.none() | st.fixed_dictionaries({
    "key": st.sampled_from(("wif", "drip")),
    "cost": st.integers(1, 2),
})  # fmt: skip

enqueue = st.tuples(st.just("enqueue"), namespace, queue, st.sampled_from((None, 0, 5_000)),
                    binding, st.sampled_from((None, "u1", "u2")), st.booleans())  # fmt: skip
claim_next = st.tuples(st.just("claim_next"), namespace, st.lists(queue, min_size=1, max_size=2),
                       st.integers(1, 3))  # fmt: skip
#: The job traffic, drawn often; limit changes, drawn rarely (one_of draws its
#: branches alike, so the frequent ones are listed more than once).
operation = st.one_of(
    enqueue, enqueue, enqueue, claim_next, claim_next, claim_next,
    st.tuples(st.just("enqueue_many"), namespace, queue, st.integers(1, 4), binding),
    st.tuples(st.just("claim"), pick),
    st.tuples(st.just("complete"), pick), st.tuples(st.just("complete"), pick),
    st.tuples(st.just("complete_many"), st.integers(1, 3)),
    st.tuples(st.just("fail"), pick, st.booleans(), st.sampled_from((None, 0, 3_000))),
    st.tuples(st.just("release"), pick, st.sampled_from((None, 2_000))),
    st.tuples(st.just("heartbeat"), pick),
    st.tuples(st.just("sleep"), st.sampled_from((500, 4_000, 31_000, 400_000, 3_600_000))),
    st.tuples(st.just("replay"), namespace),
    st.tuples(st.just("budget"), namespace, st.sampled_from(("wif", "drip")),
              st.integers(1, 4)),
    st.tuples(st.just("policy"), namespace, queue, st.sampled_from((None, 0, 1, 2)),
              st.sampled_from((None, 1, 3, 4))),  # 4: stacked windows
    st.tuples(st.just("policy_clear"), namespace, queue),
    st.tuples(st.just("enqueue_group"), namespace, queue, st.sampled_from(("g1", "g2")),
              st.sampled_from((None, 0, 5_000)), binding),
    st.tuples(st.just("policy_groups"), namespace, queue, st.sampled_from((None, 1, 2)),
              st.sampled_from((0, 1, 2))),
    st.tuples(st.just("quota"), namespace, st.sampled_from((None, 3, 8)),
              st.sampled_from((None, 1, 2)), st.sampled_from(("reject", "drop"))),
    st.tuples(st.just("quota_clear"), namespace),
)  # fmt: skip


class Model:
    """What the sequence has seen: job ids, and the leases of claimed jobs."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.jobs: list[tuple[str, str]] = []  # (namespace, id)
        self.leases: dict[str, tuple[str, str]] = {}  # id -> (namespace, lease)

    def _job(self, index: int) -> tuple[str, str] | None:
        return self.jobs[index % len(self.jobs)] if self.jobs else None

    def _held(self, index: int) -> tuple[str, str, str] | None:
        if not self.leases:
            return None
        job_id = sorted(self.leases)[index % len(self.leases)]
        ns, lease = self.leases[job_id]
        return ns, job_id, lease

    def _took(self, answer: dict[str, Any]) -> None:
        for item in answer["jobs"]:
            job = item["job"]
            self.leases[job["id"]] = (job["namespace"], job["lease"])

    async def run(self, op: tuple[Any, ...]) -> None:
        core, kind = self.core, op[0]
        if kind == "enqueue":
            _k, ns, q, delay, bound, unique, debounce = op
            args: dict[str, Any] = {"namespace": ns, "queue": q, "type": "t"}
            if delay is not None:
                args["delay_ms"] = delay
            if unique is not None:
                args["unique_key"] = unique
                if debounce:
                    args["debounce_ms"] = 1_000
            if bound is not None:
                args["budgets"] = [_create_with(bound)]
            job = (await call(core, "enqueue", **args))["job"]
            self.jobs.append((ns, job["id"]))
        elif kind == "enqueue_many":
            _k, ns, q, n, bound = op
            one: dict[str, Any] = {"queue": q, "type": "t"}
            if bound is not None:
                one["budgets"] = [_create_with(bound)]
            answer = await call(core, "enqueue_many", namespace=ns, jobs=[one] * n)
            self.jobs += [(ns, r["job"]["id"]) for r in answer["results"]]
        elif kind == "claim_next":
            _k, ns, qs, n = op
            self._took(await call(core, "claim_next", namespace=ns, queues=qs, max=n))
        elif kind == "claim":
            found = self._job(op[1])
            if found is not None:
                job = await call(core, "claim", namespace=found[0], job_id=found[1])
                self._took({"jobs": [job]})
        elif kind in ("complete", "fail", "release", "heartbeat"):
            held = self._held(op[1])
            if held is None:
                return
            ns, job_id, lease = held
            args = {"namespace": ns, "job_id": job_id, "lease": lease}
            if kind == "fail":
                args.update(error="boom", dead=op[2])
                if op[3] is not None:
                    args["retry_in_ms"] = op[3]
            elif kind == "release" and op[2] is not None:
                args["delay_ms"] = op[2]
            if kind != "heartbeat":
                del self.leases[job_id]
            await call(core, kind, **args)
        elif kind == "complete_many":
            for ns in NAMESPACES:
                mine = sorted(i for i, (n, _l) in self.leases.items() if n == ns)[: op[1]]
                if mine:
                    jobs = [{"job_id": i, "lease": self.leases.pop(i)[1]} for i in mine]
                    await call(core, "complete_many", namespace=ns, jobs=jobs)
        elif kind == "sleep":
            await trio.sleep(op[1] / 1000)  # virtual time (autojump clock)
            await trio.testing.wait_all_tasks_blocked()
        elif kind == "replay":
            await call(core, "dead_replay", namespace=op[1], all=True)
        elif kind == "budget":
            _k, ns, key, allocation = op
            strategy = WIF if key == "wif" else DRIP
            await call(core, "budget_put", namespace=ns, key=key, allocation=allocation,
                       strategy=strategy)  # fmt: skip
        elif kind == "policy":
            _k, ns, q, in_flight, claims = op
            fields: dict[str, Any] = {"max_in_flight": in_flight}
            if claims is not None and claims % 2:
                fields.update(max_claims_per_window=claims,
                              window={"period": "hour", "tz": "UTC", "start": "00:00"})  # fmt: skip
            elif claims is not None:  # stacked windows: an hour's and a minute's
                fields["windows"] = [
                    {"max_claims": claims, "period": "hour", "tz": "UTC"},
                    {"max_claims": claims // 2, "period": "minute", "tz": "UTC"},
                ]
            await call(core, "policy_set", namespace=ns, queue=q, **fields)
        elif kind == "policy_clear":
            await call(core, "policy_clear", namespace=op[1], queue=op[2])
        elif kind == "enqueue_group":
            _k, ns, q, group, delay, bound = op
            args = {"namespace": ns, "queue": q, "type": "t", "group": group}
            if delay is not None:
                args["delay_ms"] = delay
            if bound is not None:
                args["budgets"] = [_create_with(bound)]
            self.jobs.append((ns, (await call(core, "enqueue", **args))["job"]["id"]))
        elif kind == "policy_groups":
            _k, ns, q, cap, reserve = op
            await call(core, "policy_set", namespace=ns, queue=q, fairness="round_robin",
                       max_in_flight=3, max_in_flight_per_group=cap,
                       min_in_flight={"g1": reserve})  # fmt: skip
        elif kind == "quota":
            _k, ns, pending, running, excess = op
            doc = {"max_pending": pending, "max_running": running, "on_excess": excess}
            doc = {k: v for k, v in doc.items() if v is not None}
            await call(core, "quota_set", namespace=ns, quota=doc)
        elif kind == "quota_clear":
            await call(core, "quota_clear", namespace=op[1])


def _create_with(bound: dict[str, Any]) -> dict[str, Any]:
    strategy = WIF if bound["key"] == "wif" else DRIP
    return {**bound, "create_with": {"allocation": 3, "strategy": strategy}}


async def _drive(
    tmp: Path, ops: list[tuple[Any, ...]], failures: list[AssertionError], refused: list[str],
    *, step: bool = True,
) -> int:  # fmt: skip
    """Run ``ops`` on a fresh core, checking the views after every commit (the
    first failure stops it); returns how many commits were checked."""
    checked = 0
    async with running_core(tmp) as core:
        if not step:
            core.store.jobs.step = Unreported()  # type: ignore[attr-defined]

        def after_commit() -> None:
            nonlocal checked
            checked += 1
            try:
                check_views(core)
            except AssertionError as exc:
                failures.append(exc)

        core.writer.after_commit.append(after_commit)
        model = Model(core)
        for op in ops:
            try:
                await model.run(op)
            except Refused as refusal:  # an outcome like any other: nothing changed
                refused.append(f"{op[0]}: {refusal.code}")
            if failures:
                return checked
        await trio.testing.wait_all_tasks_blocked()
        after_commit()
    return checked


def _run(ops: list[tuple[Any, ...]], *, step: bool = True, refused: list[str] | None = None
         ) -> int:  # fmt: skip
    """Run ``ops`` (see :func:`_drive`); raises the first failed comparison."""
    failures: list[AssertionError] = []
    with tempfile.TemporaryDirectory() as tmp:
        clock = trio.testing.MockClock(autojump_threshold=0)
        checked = trio.run(
            lambda: _drive(Path(tmp), ops, failures, [] if refused is None else refused,
                           step=step),
            clock=clock,
        )  # fmt: skip
    if failures:
        raise failures[0]
    return checked


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=50))
def test_every_view_equals_the_store_after_every_commit(ops):
    _run(ops)


def test_a_known_busy_sequence_checks_many_commits():
    """A fixed sequence through every kind of operation: the check runs after each
    of its commits (so the property above is not vacuous)."""
    ops = [
        ("budget", "a", "wif", 1), ("quota", "a", 8, 2, "drop"),
        ("policy", "a", "q1", 2, 3),
        ("enqueue", "a", "q1", None, {"key": "wif", "cost": 1}, None, False),
        ("enqueue", "a", "q1", None, {"key": "wif", "cost": 1}, None, False),
        ("enqueue_many", "a", "q1", 4, None), ("enqueue", "a", "q2", 5_000, None, "u1", True),
        ("claim_next", "a", ["q1", "q2"], 3), ("heartbeat", 0), ("fail", 0, True, None),
        ("complete", 0), ("sleep", 31_000), ("claim_next", "a", ["q1", "q2"], 3),
        ("release", 0, 2_000), ("sleep", 400_000), ("replay", "a"),
        ("claim_next", "a", ["q1", "q2"], 3), ("complete_many", 3), ("quota_clear", "a"),
        ("policy_clear", "a", "q1"),
    ]  # fmt: skip
    refused: list[str] = []
    assert _run(ops, refused=refused) >= 15
    assert refused == []


def test_a_known_sequence_of_groups_checks_the_rings():
    """Groups: jobs enqueued before and after a group policy, claims, a cap,
    failures back to scheduled, a release, a replay: the rings stay equal to
    the store after each commit."""
    ops = [
        ("enqueue", "a", "q1", None, None, None, False),
        ("enqueue_group", "a", "q1", "g1", None, {"key": "wif", "cost": 1}),
        ("policy_groups", "a", "q1", 1, 1),
        ("enqueue_group", "a", "q1", "g2", None, None), ("enqueue_many", "a", "q1", 3, None),
        ("enqueue_group", "a", "q1", "g1", 5_000, None), ("claim_next", "a", ["q1", "q2"], 3),
        ("fail", 0, False, 3_000), ("release", 0, None), ("claim_next", "a", ["q1"], 3),
        ("complete", 0), ("sleep", 4_000), ("fail", 0, True, None), ("replay", "a"),
        ("claim_next", "a", ["q1"], 3), ("policy_groups", "a", "q1", None, 2),
        ("claim_next", "a", ["q1"], 3), ("policy_clear", "a", "q1"),
    ]  # fmt: skip
    refused: list[str] = []
    assert _run(ops, refused=refused) >= 15
    assert refused == []


def test_leaving_out_the_transition_step_fails_the_check():
    """Without the transition step, nothing updates the views after a commit:
    the check finds the counts (and the rest) stale at the first enqueue."""
    ops = [("enqueue", "a", "q1", None, None, None, False), ("claim_next", "a", ["q1"], 1)]
    assert _run(ops) > 0  # with the step: equal after every commit
    with pytest.raises(AssertionError):
        _run(ops, step=False)
