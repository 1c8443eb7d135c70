"""A history of client operations and a checker of the queue's contract (Jepsen's).

Clients record each operation as an *invoke* followed by its completion: *ok*
(it happened), *fail* (it certainly did not: a refusal writes nothing) or
*info* (indeterminate: the connection was lost before the answer). The
daemon's crashes and restarts are recorded too. Jobs are named by a *key* the
client puts in the payload (``{"k": key}``), so an enqueue whose answer was
lost, and whose id the client never learnt, is still recognised when its job
turns up.

:func:`check` then counts, Jepsen's queue checker's way:

- **lost**: an acknowledged enqueue never seen again: never delivered and
  absent from the final state of the store;
- **unexpected**: a job delivered (or in the final state) that no enqueue
  invoked, or whose enqueue definitely failed;
- **duplicated**: a job delivered again without an explanation: its earlier
  lease had not lapsed (by the earlier claim's ``lease_expires_at``), no crash
  of the daemon came between, and the earlier delivery was not failed or
  released; a delivery after a completion was acknowledged is never explained;
- **recovered**: an indeterminate enqueue whose job was seen later.

Limit invariants come from the same history: :func:`in_flight_peaks` counts, per
group (a queue, a policy, a budget), the jobs in flight at every instant, a job
being in flight from its claim's *ok* to its completion's *invoke* or its
lease's expiry, whichever is first. That interval lies inside the one the
daemon counts (its commit comes before the ok, and after the invoke), so a
peak above a limit is an over-admission, never an artefact.

Times are wall milliseconds (the daemon's ``*_at`` fields are too; same host).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
#: Operation kinds (``f``): client verbs, and the daemon's life.
ENQUEUE, CLAIM, COMPLETE, FAIL_JOB, RELEASE = "enqueue", "claim", "complete", "fail", "release"
HEARTBEAT = "heartbeat"
CRASH, RESTART = "crash", "restart"


@dataclass(frozen=True)
class Op:
    """One entry of a history."""

    index: int
    process: str
    type: str  # invoke | ok | fail | info
    f: str  # enqueue | claim | complete | fail | release | crash | restart
    time_ms: int
    key: str | None = None
    job_id: str | None = None
    namespace: str | None = None
    queue: str | None = None
    attempt: int | None = None
    lease: str | None = None
    lease_expires_at: int | None = None
    error: str | None = None
    groups: tuple[str, ...] = ()


class History:
    """A thread-safe, append-only list of :class:`Op` (producers, workers and the
    killer record into one)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        self._clock = clock

    def add(self, process: str, type: str, f: str, *, time_ms: int | None = None,
            **fields: Any) -> Op:  # fmt: skip
        with self._lock:
            at = int(self._clock() * 1000) if time_ms is None else time_ms
            op = Op(len(self.ops), process, type, f, at, **fields)
            self.ops.append(op)
            return op

    # -- the usual records ------------------------------------------------------

    def enqueue(self, process: str, key: str, queue: str, namespace: str = "default") -> Op:
        return self.add(process, INVOKE, ENQUEUE, key=key, queue=queue, namespace=namespace)

    def enqueued(self, invoke: Op, type: str, job: Mapping[str, Any] | None = None,
                 error: str | None = None) -> Op:  # fmt: skip
        return self.add(
            invoke.process, type, ENQUEUE, key=invoke.key, queue=invoke.queue,
            namespace=invoke.namespace, job_id=job["id"] if job else None, error=error,
        )  # fmt: skip

    def claimed(self, process: str, job: Mapping[str, Any], groups: tuple[str, ...] = ()) -> Op:
        """A delivery: a job a claim answered (``groups``: the limits it counts in)."""
        return self.add(
            process, OK, CLAIM, key=key_of(job), job_id=job["id"],
            namespace=job.get("namespace"), queue=job.get("queue"), attempt=job.get("attempts"),
            lease=job.get("lease"), lease_expires_at=job.get("lease_expires_at"),
            groups=groups or (f"queue:{job.get('queue')}",),
        )  # fmt: skip

    def finish(self, process: str, f: str, job: Mapping[str, Any]) -> Op:
        """The invoke of a complete, fail or release of a delivered ``job``."""
        return self.add(process, INVOKE, f, key=key_of(job), job_id=job["id"], lease=job["lease"])

    def finished(self, invoke: Op, type: str, error: str | None = None) -> Op:
        return self.add(
            invoke.process, type, invoke.f, key=invoke.key, job_id=invoke.job_id,
            lease=invoke.lease, error=error,
        )  # fmt: skip

    def heartbeat(self, process: str, job: Mapping[str, Any], expires_at: int,
                  time_ms: int | None = None) -> Op:  # fmt: skip
        """A heartbeat's ok: the lease of ``job`` now expires at ``expires_at``."""
        return self.add(
            process, OK, HEARTBEAT, key=key_of(job), job_id=job["id"], lease=job["lease"],
            lease_expires_at=expires_at, time_ms=time_ms,
        )  # fmt: skip

    def crash(self) -> Op:
        return self.add("nemesis", INFO, CRASH)

    def restart(self) -> Op:
        return self.add("nemesis", OK, RESTART)


def key_of(job: Mapping[str, Any]) -> str | None:
    """The client's key of a job (``payload.k``), if it has one."""
    payload = job.get("payload")
    return payload.get("k") if isinstance(payload, dict) else None


@dataclass
class Duplicate:
    """A job delivered again: the two deliveries, and what explains it (None: nothing)."""

    key: str
    first: Op
    second: Op
    explained_by: str | None


@dataclass
class Report:
    """What :func:`check` found."""

    acknowledged: int = 0
    indeterminate: int = 0
    delivered: int = 0
    lost: set[str] = field(default_factory=set)
    unexpected: set[str] = field(default_factory=set)
    recovered: set[str] = field(default_factory=set)
    duplicates: list[Duplicate] = field(default_factory=list)
    crashes: int = 0

    @property
    def unexplained(self) -> list[Duplicate]:
        return [d for d in self.duplicates if d.explained_by is None]

    @property
    def valid(self) -> bool:
        return not (self.lost or self.unexpected or self.unexplained)

    def summary(self) -> str:
        why: dict[str | None, int] = defaultdict(int)
        for d in self.duplicates:
            why[d.explained_by] += 1
        return (
            f"acknowledged {self.acknowledged}, indeterminate {self.indeterminate}, "
            f"delivered {self.delivered}, crashes {self.crashes}; lost {len(self.lost)}, "
            f"unexpected {len(self.unexpected)}, recovered {len(self.recovered)}, "
            f"duplicated {len(self.duplicates)} (explained by {dict(why)})"
        )


def check(ops: Iterable[Op], final: Mapping[str, str] | None = None) -> Report:
    """Check a history against the contract; ``final`` is the store's state at the
    end (key -> status), read after the history ends."""
    ops = sorted(ops, key=lambda o: o.index)
    final = final or {}
    report = Report()
    invoked: set[str] = set()
    acked: set[str] = set()
    failed: set[str] = set()
    unsure: set[str] = set()
    deliveries: dict[str, list[Op]] = defaultdict(list)
    crashes: list[int] = []
    #: (key, lease) -> how the delivery under that lease ended: an index per kind.
    settled: dict[tuple[str, str | None], tuple[str, int]] = {}
    beats = _heartbeats(ops)
    for op in ops:
        if op.f == CRASH:
            crashes.append(op.index)
        elif op.f == ENQUEUE and op.key is not None:
            {INVOKE: invoked, OK: acked, FAIL: failed, INFO: unsure}[op.type].add(op.key)
        elif op.f == CLAIM and op.type == OK and op.key is not None:
            deliveries[op.key].append(op)
        elif op.f in (COMPLETE, FAIL_JOB, RELEASE) and op.type == OK and op.key is not None:
            settled.setdefault((op.key, op.lease), (op.f, op.index))
    report.crashes = len(crashes)
    report.acknowledged, report.indeterminate = len(acked), len(unsure - acked)
    report.delivered = sum(len(d) for d in deliveries.values())
    seen = set(deliveries) | set(final)
    report.lost = acked - seen
    report.unexpected = {k for k in seen if k not in invoked or (k in failed and k not in acked)}
    report.recovered = (unsure - acked - failed) & seen
    for key, delivered in deliveries.items():
        for first, second in itertools.pairwise(delivered):
            expiry = _expiry(first, beats, before_ms=second.time_ms)
            why = _explain(first, second, expiry, settled.get((key, first.lease)), crashes)
            report.duplicates.append(Duplicate(key, first, second, why))
    return report


Beats = dict[tuple[str | None, str | None], list[tuple[int, int]]]


def _heartbeats(ops: Iterable[Op]) -> Beats:
    """(key, lease) -> [(time of the heartbeat's ok, the expiry it set)]."""
    beats: Beats = defaultdict(list)
    for op in ops:
        if op.f == HEARTBEAT and op.type == OK and op.lease_expires_at is not None:
            beats[(op.key, op.lease)].append((op.time_ms, op.lease_expires_at))
    return beats


def _expiry(claim: Op, beats: Beats, before_ms: float = float("inf")) -> int | None:
    """When ``claim``'s lease expires, as the claim and the heartbeats acknowledged
    before ``before_ms`` set it."""
    known = [e for t, e in beats.get((claim.key, claim.lease), ()) if t <= before_ms]
    if claim.lease_expires_at is not None:
        known.append(claim.lease_expires_at)
    return max(known) if known else None


def _explain(first: Op, second: Op, expiry: int | None, settled: tuple[str, int] | None,
             crashes: list[int]) -> str | None:  # fmt: skip
    """Why ``second`` delivered ``first``'s job again (its lease expiring at
    ``expiry``), or None."""
    if settled is not None and settled[1] < second.index:
        kind, _ = settled
        return None if kind == COMPLETE else kind  # completed and acknowledged: never again
    if any(first.index < c < second.index for c in crashes):
        return "crash"
    if expiry is not None and second.time_ms >= expiry:
        return "lease_lapse"
    return None


def in_flight_peaks(ops: Iterable[Op]) -> dict[str, int]:
    """The most jobs in flight at one instant, per group of :attr:`Op.groups`.

    A job is in flight from its claim's ok until the first of its lease's
    expiry and the invoke that settles it (complete, fail, release); a
    delivery never settled (its worker lost the daemon) stays in flight until
    its lease's expiry.
    """
    ops = list(ops)
    beats = _heartbeats(ops)
    ends: dict[tuple[str | None, str | None], int] = {}
    for op in ops:
        if op.f in (COMPLETE, FAIL_JOB, RELEASE) and op.type == INVOKE:
            ends.setdefault((op.key, op.lease), op.time_ms)
    edges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for op in ops:
        if op.f != CLAIM or op.type != OK:
            continue
        end = ends.get((op.key, op.lease))
        expiry = _expiry(op, beats)
        if expiry is not None:
            end = expiry if end is None else min(end, expiry)
        if end is not None and end <= op.time_ms:
            continue  # settled within the claim's millisecond: in flight at no instant
        for group in op.groups:
            edges[group].append((op.time_ms, 1))
            if end is not None:
                edges[group].append((end, -1))
    peaks: dict[str, int] = {}
    for group, changes in edges.items():
        level = peak = 0
        for _at, change in sorted(changes):  # at one instant, ends (-1) before starts
            level += change
            peak = max(peak, level)
        peaks[group] = peak
    return peaks


def over_admitted(ops: Iterable[Op], limits: Mapping[str, int]) -> dict[str, int]:
    """Groups whose in-flight peak went above their limit: group -> peak."""
    peaks = in_flight_peaks(ops)
    return {g: peaks[g] for g, cap in limits.items() if peaks.get(g, 0) > cap}


def superseded_completions(ops: Iterable[Op]) -> list[Op]:
    """Completions acknowledged on a lease after the job was delivered again under
    another one: a late ``complete`` of a worker whose lease lapsed, which must
    be refused ``lease_lost`` (the checker's duplicates call that second
    delivery explained; this says whether the old lease was then honoured)."""
    deliveries: dict[str | None, list[Op]] = defaultdict(list)
    found = []
    for op in sorted(ops, key=lambda o: o.index):
        if op.f == CLAIM and op.type == OK:
            deliveries[op.key].append(op)
        elif op.f == COMPLETE and op.type == OK:
            mine = [d.index for d in deliveries[op.key] if d.lease == op.lease]
            if mine and any(d.index > mine[0] and d.lease != op.lease
                            for d in deliveries[op.key]):  # fmt: skip
                found.append(op)
    return found
