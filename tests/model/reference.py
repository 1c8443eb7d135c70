"""The reference model: the job lifecycle and every limit the workload touches.

Pure Python, no I/O, written from the docs (docs/budgets.md, docs/policies.md,
docs/quotas.md, docs/protocol.md), not from the daemon's code. One namespace
(``default``), two queues (``a`` with a policy, ``b`` without), two budgets
(``flight``: ``while_in_flight``; ``drip``: ``time_based`` with a burst).

Where the daemon may choose (which pending jobs a claim takes), the model
*checks* the choice instead of predicting it: :meth:`Model.claim` asserts each
claimed job was claimable and every limit could admit it, then applies it.
Everything else is predicted exactly: states, attempts, leases and their
expiries, quota refusals, lease refusals, budget tokens and in-flight costs,
window usage.

Lifecycle: ``scheduled`` → ``pending`` (at ``ready_at``) → ``running`` (claim,
attempts + 1, a lease) → ``completed`` | ``scheduled`` (fail, a retry) |
``dead`` (fail at ``max_attempts``) | ``pending`` (lease lapse) | ``dead``
(lapse at ``max_attempts``); ``dead`` → ``pending`` (replay, attempts 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEDULED, PENDING, RUNNING, COMPLETED, DEAD = (
    "scheduled", "pending", "running", "completed", "dead"
)  # fmt: skip
STATES = (SCHEDULED, PENDING, RUNNING, COMPLETED, DEAD)
QUEUES = ("a", "b")
#: The queue with a policy (the other has none).
POLICY_QUEUE = "a"
WINDOW_MS = 3_600_000  # the policy's window: every hour, UTC, at :00


class Violation(AssertionError):
    """The core did what the model says it may not."""


@dataclass
class Pool:
    """A budget's tokens, per docs/budgets.md: exact integer units, new pools full.

    ``time_based``: a token is ``duration_ms`` units and the pool drips
    ``allocation`` units per ms up to ``burst`` (else ``allocation``) tokens;
    a debit takes ``cost`` tokens. ``while_in_flight``: a debit may run while
    ``in_flight + cost <= allocation``. Both count the cost of running jobs.
    """

    key: str
    allocation: int
    duration_ms: int | None = None
    burst: int | None = None
    units: int = 0
    as_of: int = 0
    in_flight: int = 0

    @property
    def time_based(self) -> bool:
        return self.duration_ms is not None

    @property
    def cap_units(self) -> int:
        cap = self.burst if self.burst is not None else self.allocation
        return cap * (self.duration_ms or 1)

    def max_cost(self) -> int:
        """The largest cost a job bound to this budget may have."""
        return min(self.allocation, self.cap_units // (self.duration_ms or 1))

    def units_at(self, now: int) -> int:
        """Tokens (in units) at ``now``: the drip since ``as_of``, capped."""
        if self.units >= self.cap_units:
            return self.cap_units
        return min(self.cap_units, self.units + max(0, now - self.as_of) * self.allocation)

    def can_pay(self, cost: int, now: int) -> bool:
        if self.time_based:
            return self.units_at(now) >= cost * (self.duration_ms or 1)
        return self.in_flight + cost <= self.allocation

    def debit(self, cost: int, now: int) -> None:
        if self.time_based:
            self.units = self.units_at(now) - cost * (self.duration_ms or 1)
            self.as_of = now
        self.in_flight += cost

    def credit(self, cost: int) -> None:
        self.in_flight -= cost

    def update(self, allocation: int, burst: int | None, now: int) -> None:
        """New limits, no new tokens: the count is kept and clamped to the new cap."""
        if self.time_based:
            self.units = self.units_at(now)
            self.as_of = now
        self.allocation, self.burst = allocation, burst
        if self.time_based:
            self.units = min(self.units, self.cap_units)

    def available(self, now: int) -> float:
        """What the budget object's ``state.available`` says."""
        if self.time_based:
            return self.units_at(now) / (self.duration_ms or 1)
        return float(self.allocation - self.in_flight)


@dataclass
class Job:
    """One job as the model knows it."""

    id: str
    queue: str
    budgets: tuple[tuple[str, int], ...]
    max_attempts: int
    state: str
    ready_at: int
    attempts: int = 0
    lease: str | None = None
    expires_at: int | None = None


@dataclass
class Policy:
    """Queue ``a``'s policy: in-flight cap and claims per hourly window."""

    max_in_flight: int | None
    max_claims: int | None


@dataclass
class Model:
    """The reference state; ``now`` is the core's wall clock, in ms."""

    now: int
    pools: dict[str, Pool]
    jobs: dict[str, Job] = field(default_factory=dict)
    policy: Policy | None = None
    #: window start (ms) -> claims charged in it (never refunded).
    usage: dict[int, int] = field(default_factory=dict)
    max_pending: int | None = None
    max_running: int | None = None
    #: Policy writes per token (seed 002): 1 a second, a burst of 10, kept in memory.
    policy_writes: Pool = field(default_factory=lambda: Pool("policy_writes", 1, 1000, 10))

    def __post_init__(self) -> None:
        self.restarted()

    def restarted(self) -> None:
        """A new daemon: what it keeps only in memory starts afresh."""
        self.policy_writes.units, self.policy_writes.as_of = self.policy_writes.cap_units, self.now

    # -- reads ------------------------------------------------------------------

    def count(self, *states: str, queue: str | None = None) -> int:
        return sum(1 for j in self.jobs.values() if j.state in states and queue in (None, j.queue))

    def counts(self) -> dict[tuple[str, str], int]:
        """Non-zero counts per (queue, state)."""
        out: dict[tuple[str, str], int] = {}
        for job in self.jobs.values():
            out[(job.queue, job.state)] = out.get((job.queue, job.state), 0) + 1
        return out

    def window(self) -> int:
        return self.now - self.now % WINDOW_MS

    def used(self) -> int:
        return self.usage.get(self.window(), 0)

    def claimable(self, job: Job) -> bool:
        """``job`` may be claimed now as far as its own state goes."""
        return job.state == PENDING and job.ready_at <= self.now

    def admits(self, job: Job) -> str | None:
        """The limit that would refuse claiming ``job`` now, or None."""
        if job.queue == POLICY_QUEUE and self.policy is not None:
            p = self.policy
            if (
                p.max_in_flight is not None
                and self.count(RUNNING, queue=job.queue) >= p.max_in_flight
            ):
                return "policy max_in_flight"
            if p.max_claims is not None and self.used() >= p.max_claims:
                return "policy max_claims_per_window"
        if self.max_running is not None and self.count(RUNNING) >= self.max_running:
            return "quota max_running"
        for key, cost in job.budgets:
            if not self.pools[key].can_pay(cost, self.now):
                return f"budget {key}"
        return None

    # -- time -------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        """Time passes: due jobs become pending, lapsed leases are reaped."""
        self.now += ms
        for job in self.jobs.values():
            if job.state == SCHEDULED and job.ready_at <= self.now:
                job.state = PENDING
            elif job.state == RUNNING and job.expires_at is not None and job.expires_at <= self.now:
                self._leave_running(job, DEAD if job.attempts >= job.max_attempts else PENDING)

    # -- producing --------------------------------------------------------------

    def depth_refuses(self, n: int) -> bool:
        """``max_pending``: would ``n`` more scheduled or pending jobs go over?"""
        if self.max_pending is None:
            return False
        return self.count(SCHEDULED, PENDING) + n > self.max_pending

    def enqueue(self, job: Job) -> None:
        job.state = PENDING if job.ready_at <= self.now else SCHEDULED
        self.jobs[job.id] = job

    def replay(self, job_id: str) -> None:
        job = self.jobs[job_id]
        assert job.state == DEAD
        job.state, job.attempts, job.ready_at = PENDING, 0, self.now

    # -- working ----------------------------------------------------------------

    def claim(self, job_id: str, lease: str, expires_at: int, lease_ms: int) -> None:
        """The core claimed ``job_id``: check that it could, then apply it."""
        job = self.jobs.get(job_id)
        if job is None:
            raise Violation(f"claimed {job_id}, which was never enqueued")
        if not self.claimable(job):
            raise Violation(f"claimed {job_id} in state {job.state} (ready_at {job.ready_at})")
        refusal = self.admits(job)
        if refusal is not None:
            raise Violation(f"claimed {job_id} over {refusal}")
        if expires_at != self.now + lease_ms:
            raise Violation(f"lease of {job_id} expires at {expires_at}, not now + {lease_ms}")
        job.state, job.lease, job.expires_at = RUNNING, lease, expires_at
        job.attempts += 1
        for key, cost in job.budgets:
            self.pools[key].debit(cost, self.now)
        if (
            job.queue == POLICY_QUEUE
            and self.policy is not None
            and self.policy.max_claims is not None
        ):
            self.usage[self.window()] = self.used() + 1

    def holds(self, job_id: str, lease: str) -> bool:
        """Does ``lease`` still hold ``job_id`` (else the core answers ``lease_lost``)?"""
        job = self.jobs[job_id]
        return job.state == RUNNING and job.lease == lease

    def complete(self, job_id: str) -> None:
        self._leave_running(self.jobs[job_id], COMPLETED)

    def fail(self, job_id: str, retry_in_ms: int) -> None:
        job = self.jobs[job_id]
        if job.attempts >= job.max_attempts:
            self._leave_running(job, DEAD)
        else:
            self._leave_running(job, SCHEDULED if retry_in_ms > 0 else PENDING)
            job.ready_at = self.now + retry_in_ms

    def heartbeat(self, job_id: str, lease_ms: int) -> int:
        job = self.jobs[job_id]
        job.expires_at = self.now + lease_ms
        return job.expires_at

    def _leave_running(self, job: Job, state: str) -> None:
        for key, cost in job.budgets:
            self.pools[key].credit(cost)
        job.state, job.lease, job.expires_at = state, None, None

    # -- limits -----------------------------------------------------------------

    def bound_cost_max(self, key: str) -> int:
        """The largest cost of an unfinished job bound to ``key`` (0: none)."""
        return max(
            (c for j in self.jobs.values() if j.state in (SCHEDULED, PENDING, RUNNING)
             for k, c in j.budgets if k == key),
            default=0,
        )  # fmt: skip
