"""The state machine: rules drive the real Core, the reference model checks it.

Each rule calls a verb on the Core (through :class:`~tests.model.driver.CoreDriver`),
asks the model what must have happened, and compares: a refusal the model
predicts must come, with its code; a success it does not predict is a
:class:`~tests.model.reference.Violation`. A claim's choice of jobs is the
core's; the model checks that every job it took was claimable and admitted by
every limit (policy, quota, budgets) at that instant, then applies it.

After every step, :meth:`ModelMachine.agrees` reads the store and the Core's
memory and checks the invariants: one state per job and the model's; a lease
exactly on running jobs, the model's, with the model's expiry; attempts as
the model counts them and never lower than before (a replay's reset to 0
excepted: documented); counts by state from the store, from memory and from
the model equal; every budget's in-flight cost and tokens, and the policy's
in-flight count and window usage, equal the model's. "At most one live lease
per job": the store holds one lease column, which the invariant checks, and
every lease ever handed out stays in :attr:`ModelMachine.leases`, so
``complete``, ``fail`` and ``heartbeat`` with a lapsed or superseded lease are
tried, and must be refused ``lease_lost``.

Liveness is checked where the model can say it exactly: an empty ``claim_next``
while an unbound, ready job of its queues is admitted by every limit is a
violation. (For a bound job the budget gate's reservations and parking order,
which the model does not follow, decide; its safety is checked at each claim.)

Ids and lease tokens come from a seeded generator (:class:`~tests.model.driver.SeededEntropy`): the
ids' random part breaks ties in claim order, and an example must replay the
same way for hypothesis to shrink it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.errors import Refused
from daemon.dispatch import dispatch
from tests.model.driver import CoreDriver, ModelStore
from tests.model.reference import (
    DEAD,
    POLICY_QUEUE,
    QUEUES,
    RUNNING,
    Job,
    Model,
    Policy,
    Pool,
    Violation,
)
from tests.model.stores import SqliteExample

NS = "default"
#: The drip budget's token: 10 s of units (one token per 10 s at allocation 1).
DRIP_MS = 10_000
BINDINGS = st.sampled_from(
    [(), (("flight", 1),), (("flight", 2),), (("drip", 1),), (("flight", 1), ("drip", 1))]
)
JOB = st.tuples(
    st.sampled_from(QUEUES), BINDINGS, st.integers(1, 3), st.sampled_from([0, 0, 0, 3_000])
)
LEASE_MS = st.sampled_from([2_000, 5_000, 30_000])


def expect(code: str | None, thunk: Any) -> dict[str, Any] | None:
    """Run ``thunk``: its answer when ``code`` is None, else it must refuse ``code``."""
    try:
        answer = thunk()
    except Refused as refused:
        event(f"refused {refused.code}")
        if refused.code != code:
            raise Violation(f"refused {refused.code} ({refused}), model expects {code}") from None
        return None
    event(f"refused {code}" if code else "answered")
    if code is not None:
        raise Violation(f"answered {answer!r}, model expects refusal {code}")
    return answer


class ModelMachine(RuleBasedStateMachine):
    """The Core on a fresh store (SQLite unless told) against :class:`Model`."""

    def __init__(self, store: Callable[[Path], ModelStore] = SqliteExample) -> None:
        """``store`` makes the example's store from its temp dir (:mod:`tests.model.stores`)."""
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="sluicegate-model-"))
        try:
            self.core = CoreDriver(store(self.dir))
        except BaseException:  # no teardown follows a failed __init__
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        now = self.core.now_ms()
        pools = {
            "flight": Pool("flight", allocation=2),
            "drip": Pool("drip", allocation=1, duration_ms=DRIP_MS, burst=2),
        }
        for pool in pools.values():
            self.core.verb("budget_create", key=pool.key, **_spec(pool))
            pool.units, pool.as_of = pool.cap_units, now
        self.model = Model(now=now, pools=pools)
        #: Every lease ever handed out, live or not (stale ones must be refused).
        self.leases: list[tuple[str, str]] = []
        self.attempts_seen: dict[str, int] = {}

    def teardown(self) -> None:
        self.core.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- producing --------------------------------------------------------------

    def _job_args(self, spec: tuple[str, tuple[tuple[str, int], ...], int, int]) -> dict:
        queue, bindings, max_attempts, delay = spec
        args: dict[str, Any] = {"queue": queue, "type": "t", "max_attempts": max_attempts}
        if bindings:
            args["budgets"] = [{"key": k, "cost": c} for k, c in bindings]
        if delay:
            args["delay_ms"] = delay
        return args

    def _enqueued(self, spec: tuple, job: dict[str, Any]) -> None:
        queue, bindings, max_attempts, delay = spec
        new = Job(
            job["id"], queue, bindings, max_attempts, state="", ready_at=self.model.now + delay
        )
        self.model.enqueue(new)
        if job["status"] != new.state:
            raise Violation(f"enqueued {job['id']} is {job['status']}, model says {new.state}")

    def _refusal(self, specs: list[tuple]) -> str | None:
        """What an enqueue of ``specs`` must be refused with, or None: the
        namespace's depth is checked first (quota admission), then each binding."""
        if self.model.depth_refuses(len(specs)):
            return "queue_full"
        for _queue, bindings, _attempts, _delay in specs:
            if any(c > self.model.pools[k].max_cost() for k, c in bindings):
                return "invalid_argument"
        return None

    @rule(spec=JOB)
    def enqueue(self, spec: tuple) -> None:
        code = self._refusal([spec])
        answer = expect(code, lambda: self.core.verb("enqueue", **self._job_args(spec)))
        if answer is not None:
            self._enqueued(spec, answer["job"])

    @rule(specs=st.lists(JOB, min_size=1, max_size=4))
    def enqueue_many(self, specs: list[tuple]) -> None:
        code = self._refusal(specs)
        jobs = [self._job_args(s) for s in specs]
        answer = expect(code, lambda: self.core.verb("enqueue_many", jobs=jobs))
        if answer is not None:
            for spec, result in zip(specs, answer["results"], strict=True):
                self._enqueued(spec, result["job"])

    @precondition(lambda self: any(j.state == DEAD for j in self.model.jobs.values()))
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        dead = sorted(j.id for j in self.model.jobs.values() if j.state == DEAD)
        job_id = data.draw(st.sampled_from(dead))
        code = "queue_full" if self.model.depth_refuses(1) else None
        answer = expect(code, lambda: self.core.verb("dead_replay", job_ids=[job_id]))
        if answer is not None:
            self.model.replay(job_id)
            self.attempts_seen[job_id] = 0

    # -- working ----------------------------------------------------------------

    @rule(
        queues=st.sampled_from([["a"], ["b"], ["a", "b"]]),
        most=st.integers(1, 3),
        lease_ms=LEASE_MS,
    )
    def claim(self, queues: list[str], most: int, lease_ms: int) -> None:
        answer = self.core.verb("claim_next", queues=queues, max=most, lease_ms=lease_ms)
        for item in answer["jobs"]:
            job = item["job"]
            self.model.claim(job["id"], job["lease"], job["lease_expires_at"], lease_ms)
            self.leases.append((job["id"], job["lease"]))
        event(f"claim took {len(answer['jobs'])}")
        if answer["jobs"]:
            return
        for job in self.model.jobs.values():
            if job.queue in queues and self.model.claimable(job):
                event(f"empty claim: held by {self.model.admits(job) or 'no limit'}")
        # Liveness, where the model can say it exactly: an unbound pending job that
        # every limit admits must be claimable.
        for job in self.model.jobs.values():
            free = job.queue in queues and not job.budgets and self.model.claimable(job)
            if free and self.model.admits(job) is None:
                raise Violation(f"claim_next {queues} was empty; {job.id} was claimable")

    @rule(queues=st.sampled_from([["a", "b"], ["b", "a"]]), most=st.integers(1, 3),
          lease_ms=LEASE_MS)  # fmt: skip
    def claim_more(self, queues: list[str], most: int, lease_ms: int) -> None:
        """Claims drive everything else: a second rule makes them likelier."""
        self.claim(queues, most, lease_ms)

    def _lease(self, data: st.DataObject) -> tuple[str, str]:
        return data.draw(st.sampled_from(self.leases))

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        job_id, lease = self._lease(data)
        ok = self.model.holds(job_id, lease)
        answer = expect(None if ok else "lease_lost",
                        lambda: self.core.verb("complete", job_id=job_id, lease=lease))  # fmt: skip
        if answer is not None:
            self.model.complete(job_id)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), retry_in_ms=st.sampled_from([1_000, 4_000]))
    def fail(self, data: st.DataObject, retry_in_ms: int) -> None:
        job_id, lease = self._lease(data)
        ok = self.model.holds(job_id, lease)
        answer = expect(None if ok else "lease_lost", lambda: self.core.verb(
            "fail", job_id=job_id, lease=lease, error="boom", retry_in_ms=retry_in_ms
        ))  # fmt: skip
        if answer is not None:
            self.model.fail(job_id, retry_in_ms)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), lease_ms=LEASE_MS)
    def heartbeat(self, data: st.DataObject, lease_ms: int) -> None:
        job_id, lease = self._lease(data)
        ok = self.model.holds(job_id, lease)
        answer = expect(None if ok else "lease_lost", lambda: self.core.verb(
            "heartbeat", job_id=job_id, lease=lease, lease_ms=lease_ms
        ))  # fmt: skip
        if answer is not None:
            expires = self.model.heartbeat(job_id, lease_ms)
            if answer["lease_expires_at"] != expires:
                raise Violation(f"heartbeat: expires {answer['lease_expires_at']}, not {expires}")

    # -- time and restarts ------------------------------------------------------

    @rule(ms=st.sampled_from([1, 500, 1_000, 2_000, 5_000, 10_000, 600_000]))
    def advance(self, ms: int) -> None:
        self.core.advance(ms)
        self.model.advance(ms)

    @precondition(lambda self: any(j.state == RUNNING for j in self.model.jobs.values()))
    @rule(early=st.sampled_from([0, 1]))
    def lease_lapse(self, early: int) -> None:
        """Jump to the earliest lease expiry (or 1 ms before it): it lapses exactly then."""
        first = min(j.expires_at or 0 for j in self.model.jobs.values() if j.state == RUNNING)
        ms = first - self.model.now - early
        if ms > 0:
            self.advance(ms)

    @rule(dice=st.integers(0, 3))
    def restart(self, dice: int) -> None:
        """Close the Core and open a new one on the same files (one draw in four:
        a restart costs as much as a dozen other steps)."""
        if dice == 0:
            self.core.restart()
            self.model.restarted()

    # -- limits -----------------------------------------------------------------

    @rule(key=st.sampled_from(["flight", "drip"]), allocation=st.integers(1, 4),
          burst=st.integers(1, 4))  # fmt: skip
    def budget_change(self, key: str, allocation: int, burst: int) -> None:
        pool = self.model.pools[key]
        new = Pool(key, allocation, pool.duration_ms, burst if pool.time_based else None)
        cap = new.cap_units // (new.duration_ms or 1)
        refused = self.model.bound_cost_max(key) > min(allocation, cap)
        answer = expect("invalid_argument" if refused else None,
                        lambda: self.core.verb("budget_put", key=key, **_spec(new)))  # fmt: skip
        if answer is not None:
            pool.update(allocation, new.burst, self.model.now)

    @rule(max_in_flight=st.one_of(st.none(), st.integers(0, 3)),
          max_claims=st.one_of(st.none(), st.integers(0, 6)))  # fmt: skip
    def policy_change(self, max_in_flight: int | None, max_claims: int | None) -> None:
        model = self.model
        if max_in_flight is None and max_claims is None:
            if model.policy is None:
                return
            args: dict[str, Any] = {"queue": POLICY_QUEUE}
            op, policy = "policy_clear", None
        else:
            args = {"queue": POLICY_QUEUE, "max_in_flight": max_in_flight}
            if max_claims is not None:
                args["max_claims_per_window"] = max_claims
                args["window"] = {"period": "hour", "tz": "UTC", "start": "00:00"}
            op, policy = "policy_set", Policy(max_in_flight, max_claims)
        # Policy writes: 1 a second, a burst of 10, per token, in memory (seed 002).
        allowed = model.policy_writes.can_pay(1, model.now)
        if expect(None if allowed else "rate_limited", lambda: self.core.verb(op, **args)) is None:
            return
        model.policy_writes.debit(1, model.now)
        model.policy = policy

    @rule(max_pending=st.one_of(st.none(), st.integers(0, 12)),
          max_running=st.one_of(st.none(), st.integers(0, 4)))  # fmt: skip
    def quota_change(self, max_pending: int | None, max_running: int | None) -> None:
        quota = {k: v for k, v in (("max_pending", max_pending), ("max_running", max_running))
                 if v is not None}  # fmt: skip
        if quota:
            self.core.verb("quota_set", quota=quota)
        else:
            self.core.verb("quota_clear")
        self.model.max_pending, self.model.max_running = max_pending, max_running

    # -- invariants -------------------------------------------------------------

    @invariant()
    def agrees(self) -> None:
        seen = self.core.call(_observe, self.core)
        model = self.model
        if seen["now"] != model.now:
            raise Violation(f"core's clock {seen['now']}, model's {model.now}")
        if set(seen["rows"]) != set(model.jobs):
            raise Violation(f"jobs differ: {set(seen['rows']) ^ set(model.jobs)}")
        for job_id, (state, attempts, lease, expires) in seen["rows"].items():
            job = model.jobs[job_id]
            got, want = (
                (state, attempts, lease, expires),
                (job.state, job.attempts, job.lease, job.expires_at),
            )
            if got != want:
                raise Violation(f"{job_id}: (state, attempts, lease, expiry) {got}, model {want}")
            if attempts < self.attempts_seen.get(job_id, 0):
                raise Violation(f"{job_id}: attempts went down to {attempts}")
            self.attempts_seen[job_id] = attempts
        want_counts = {(NS, q, s): n for (q, s), n in model.counts().items()}
        if seen["db_counts"] != want_counts or seen["mem_counts"] != want_counts:
            store, memory = seen["db_counts"], seen["mem_counts"]
            raise Violation(f"counts: store {store}, memory {memory}, model {want_counts}")
        for key, pool in model.pools.items():
            want_pool = (pool.in_flight, pool.available(model.now))
            if seen["pools"][key] != want_pool:
                raise Violation(f"budget {key}: (in_flight, available) {seen['pools'][key]}, "
                                f"model {want_pool}")  # fmt: skip
        if model.policy is not None and seen["policy"] is not None:
            used = model.used() if model.policy.max_claims is not None else None
            want_policy = (model.count(RUNNING, queue=POLICY_QUEUE), used)
            if seen["policy"] != want_policy:
                raise Violation(f"policy: (in_flight, used) {seen['policy']}, model {want_policy}")


def _spec(pool: Pool) -> dict[str, Any]:
    strategy: dict[str, Any] = {"type": "while_in_flight"}
    if pool.time_based:
        strategy = {"type": "time_based", "duration_ms": pool.duration_ms, "burst": pool.burst}
    return {"allocation": pool.allocation, "strategy": strategy}


async def _observe(driver: CoreDriver) -> dict[str, Any]:
    """What the store and the Core's memory say, read on the Trio run's thread."""
    core = driver.core
    assert core is not None
    rows, db_counts = await driver.store.read(core.db, lambda: _stored(core.conn))
    mem_counts = {(ns, q, s): n for (ns, q), c in core.counts for s, n in c.items() if n}
    now = core.clock.now_ms()
    pools = {}
    for key in ("flight", "drip"):
        pool = core.budgets[(NS, key)].pool
        pools[key] = (pool.in_flight, pool.available(now))
    policy = None
    status = await _admission(core)
    if status is not None:
        policy = (status["in_flight"], status["used"])
    return {"now": now, "rows": rows, "db_counts": db_counts, "mem_counts": mem_counts,
            "pools": pools, "policy": policy}  # fmt: skip


def _stored(conn: Any) -> tuple[dict[str, tuple], dict[tuple[str, str, str], int]]:
    """Each job's (state, attempts, lease, expiry), and the counts by state."""
    rows = {
        job_id: (state, attempts, lease, expires)
        for job_id, state, attempts, lease, expires in conn.execute(
            "SELECT id, state, attempts, lease, lease_expires_at FROM jobs"
        )
    }
    counts = {
        (ns, q, s): n
        for ns, q, s, n in conn.execute(
            "SELECT namespace, queue, state, count(*) FROM jobs GROUP BY namespace, queue, state"
        )
    }
    return rows, counts


async def _admission(core: Any) -> dict[str, Any] | None:
    answer = await dispatch(
        core, core.auth.new_session(), "admission_status", {"queue": POLICY_QUEUE}
    )
    queues = answer["queues"]
    return queues[0] if queues else None
