"""Working: claims, leases, and how a running job leaves ``running``.

A claim is one statement inside a group transaction. A waiting ``claim_next``
registers with the router in the same commit that found nothing, so no
doorbell can ring between "found nothing" and "waiting" unheard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from actors import lifecycle as lc
from actors.errors import Refused, invalid, not_found
from actors.limits import (
    CLAIM_MAX,
    CLAIM_QUEUES,
    ERROR_LEN,
    JOB_ID_LEN,
    LEASE_MS,
    LEASE_TOKEN_LEN,
    MAX_COMPLETIONS,
    MAX_DURATION_MS,
    MAX_WAIT_MS,
)
from actors.router import Waiter
from daemon.admission.pipeline import Claimed
from daemon.store.interface import JobRow, StaleRow, Tx
from daemon.store.rows import dumps, to_wire
from daemon.verbs.args import between, json_value, name, text
from daemon.verbs.fast_checks import (
    fast_claim_next,
    fast_complete,
    fast_complete_many,
    register_fast,
)
from daemon.verbs.settling import cost_map, settled_bindings
from daemon.verbs.table import Call, Later, Plan, verb

if TYPE_CHECKING:
    from daemon.services import Services


def _queue_names(_inst: Any, attr: attrs.Attribute, value: list[str]) -> None:
    lo, hi = CLAIM_QUEUES
    if not lo <= len(value) <= hi:
        raise invalid(attr.name, f"queues must name {lo}-{hi} queues")
    for queue in value:
        name(_inst, attr, queue)


@attrs.frozen
class ClaimNextArgs:
    queues: list[str] = attrs.field(validator=_queue_names)
    max: int = attrs.field(default=1, validator=between(*CLAIM_MAX))
    wait_ms: int = attrs.field(default=0, validator=between(0, MAX_WAIT_MS))
    lease_ms: int | None = attrs.field(default=None, validator=between(*LEASE_MS))


@attrs.frozen
class ClaimArgs:
    job_id: str = attrs.field(validator=text(JOB_ID_LEN))
    lease_ms: int | None = attrs.field(default=None, validator=between(*LEASE_MS))


@attrs.frozen
class HeartbeatArgs:
    job_id: str = attrs.field(validator=text(JOB_ID_LEN))
    lease: str = attrs.field(validator=text(LEASE_TOKEN_LEN))
    lease_ms: int | None = attrs.field(default=None, validator=between(*LEASE_MS))


@attrs.frozen
class CompleteArgs:
    job_id: str = attrs.field(validator=text(JOB_ID_LEN))
    lease: str = attrs.field(validator=text(LEASE_TOKEN_LEN))
    result: Any = attrs.field(default=None, validator=json_value)
    #: What the job really cost its ``time_based`` budgets (daemon.verbs.settling).
    cost: Any = attrs.field(default=None, validator=cost_map)


@attrs.frozen
class CompleteManyArgs:
    """Completions of many jobs; each stands or fails alone."""

    jobs: list[CompleteArgs]

    def __attrs_post_init__(self) -> None:
        if not 1 <= len(self.jobs) <= MAX_COMPLETIONS:
            raise invalid(
                "jobs", f"jobs must hold 1-{MAX_COMPLETIONS} completions, got {len(self.jobs)}"
            )


register_fast(ClaimNextArgs, fast_claim_next)
register_fast(CompleteArgs, fast_complete)
register_fast(CompleteManyArgs, fast_complete_many)


@attrs.frozen
class FailArgs:
    job_id: str = attrs.field(validator=text(JOB_ID_LEN))
    lease: str = attrs.field(validator=text(LEASE_TOKEN_LEN))
    error: str = attrs.field(validator=text(ERROR_LEN))
    retry_in_ms: int | None = attrs.field(default=None, validator=between(0, MAX_DURATION_MS))
    dead: bool = False


@attrs.frozen
class ReleaseArgs:
    job_id: str = attrs.field(validator=text(JOB_ID_LEN))
    lease: str = attrs.field(validator=text(LEASE_TOKEN_LEN))
    delay_ms: int | None = attrs.field(default=None, validator=between(0, MAX_DURATION_MS))


def _job_answer(row: JobRow) -> dict[str, Any]:
    return {"job": to_wire(row)}


def _claimed(core: Services, claimed: Claimed) -> dict[str, Any]:
    """The answer of a successful claim: each job with its ``admission`` (a policy's
    headroom, budgets' tokens left), or ``null`` when nothing limits it."""
    headrooms, rows = claimed.headrooms, claimed.rows
    if not headrooms and all(row.budgets is None for row in rows):  # nothing limits them
        return {"jobs": [{"job": to_wire(row), "admission": None} for row in rows], "empty": False}
    now, admission = core.clock.now_ms(), core.admission.claimed_admission
    jobs = [{"job": to_wire(r), "admission": admission(r, headrooms, now)} for r in rows]
    return {"jobs": jobs, "empty": False}


EMPTY: dict[str, Any] = {"jobs": [], "empty": True}


def _empty(core: Services, namespace: str, queues: list[str]) -> dict[str, Any]:
    """Nothing claimable: with ``deferred`` when admission holds pending jobs back."""
    deferred = core.admission.deferred(namespace, queues, core.clock.now_ms())
    return {**EMPTY, "deferred": deferred} if deferred else EMPTY


@verb("claim_next", ("consume",), ClaimNextArgs)
def claim_next(core: Services, call: Call, a: ClaimNextArgs) -> Plan:
    """Claim up to ``max`` jobs of ``queues``, waiting up to ``wait_ms`` for work."""
    for queue in a.queues:
        call.scope(queue)
    namespace = call.namespace
    queues = list(dict.fromkeys(a.queues))
    keys = [(namespace, q) for q in queues]
    deadline = core.clock.monotonic() + a.wait_ms / 1000

    def attempt() -> tuple[Callable[[Tx], Claimed], list[Waiter]]:
        # A waiter is registered in the same commit that found nothing, so no
        # doorbell can ring unheard between "nothing" and "waiting".
        waiting: list[Waiter] = []
        may_wait = a.wait_ms > 0 and not core.router.closed

        def write(tx: Tx) -> Claimed:
            claimed = core.admission.claim(tx, namespace, queues, a.max, a.lease_ms)
            if not claimed.rows and may_wait:
                tx.after(lambda: waiting.append(core.router.register(keys)))
                if core.budget_gate.parks_left <= 0:
                    # Parking stopped at its limit: more may be claimable; look again.
                    tx.after(lambda: [core.router.ring(k, 1, pending=1, edge=False) for k in keys])
            return claimed

        return write, waiting

    async def wait_for_work(waiter: Waiter, release: Callable[[], None]) -> dict[str, Any]:
        try:
            return await _wait(waiter)
        finally:
            release()  # the waiting slot, however the wait ends

    async def _wait(waiter: Waiter) -> dict[str, Any]:
        while True:
            try:
                with trio.move_on_at(deadline):
                    await waiter.event.wait()
            finally:
                core.router.unregister(waiter)
            if not waiter.event.is_set() or core.router.closed:
                return _empty(core, namespace, queues)
            write, waiting = attempt()
            claimed = await core.writer.write(write, free)
            if claimed.rows:
                return _claimed(core, claimed)
            if not waiting:
                return _empty(core, namespace, queues)
            waiter = waiting[0]

    first, first_waiting = attempt()
    free = core.limit_free.claim(namespace)

    def answer(claimed: Claimed) -> dict[str, Any] | Later:
        if claimed.rows:
            return _claimed(core, claimed)
        if not first_waiting:
            return _empty(core, namespace, queues)
        waiter = first_waiting[0]
        try:
            release = core.door.wait_slot(namespace)
        except Refused:
            core.router.unregister(waiter)
            raise

        def abandon() -> None:
            core.router.unregister(waiter)
            release()

        return Later(lambda: wait_for_work(waiter, release), abandon)

    return Plan(first, answer, free)


def _owned(core: Services, call: Call, tx: Tx, job_id: str) -> JobRow:
    row = tx.store.jobs.get(call.namespace, job_id)
    if row is None:
        raise not_found(f"job {job_id!r}")
    call.scope(row.queue)
    return row


def _leased(core: Services, call: Call, tx: Tx, job_id: str, lease: str) -> JobRow:
    """The running job held under ``lease``; ``lease_lost`` if it is not.

    Usually from the core's map of running jobs, without a SELECT; the write
    that follows is guarded on the lease, so a stale entry cannot do harm
    (:func:`_on_lease` then asks the store).
    """
    row = core.running.get(job_id)
    if row is not None and row.lease == lease and row.namespace == call.namespace:
        call.scope(row.queue)
        return row
    return _leased_in_store(core, call, tx, job_id, lease)


def _leased_in_store(core: Services, call: Call, tx: Tx, job_id: str, lease: str) -> JobRow:
    row = _owned(core, call, tx, job_id)
    if row.state != lc.RUNNING or row.lease != lease:
        raise Refused(
            "lease_lost",
            f"job {job_id!r} is no longer held under this lease "
            f"(it lapsed and was taken over or reaped; status {row.state})",
            job_status=row.state,
        )
    return row


def _lost(core: Services, call: Call, tx: Tx, job_id: str, lease: str) -> Refused:
    """A guarded update found the remembered row stale: the store says precisely
    why (raising its refusal), else the lease is simply gone."""
    _leased_in_store(core, call, tx, job_id, lease)
    return Refused("lease_lost", f"job {job_id!r} is no longer held under this lease")


@verb("claim", ("consume",), ClaimArgs)
def claim(core: Services, call: Call, a: ClaimArgs) -> Plan:
    """Claim one job by id (a pending one, or one whose lease lapsed)."""

    def write(tx: Tx) -> Claimed:
        _owned(core, call, tx, a.job_id)
        return core.admission.claim(tx, call.namespace, [], 1, a.lease_ms, job_id=a.job_id)

    return Plan(write, lambda claimed: _claimed(core, claimed)["jobs"][0])


Change = Callable[[Tx, JobRow], Any]


def _on_lease(core: Services, call: Call, job_id: str, lease: str, change: Change,
              *, free: bool = False) -> Plan:  # fmt: skip
    """A plan whose write applies ``change`` to the job held under ``lease``.

    ``change`` makes guarded updates: when the remembered row turns out stale,
    nothing was changed and the store says precisely why the lease is gone.
    ``free``: the change decides no limit when nothing limits the namespace.
    """

    def write(tx: Tx) -> Any:
        row = _leased(core, call, tx, job_id, lease)
        try:
            return change(tx, row)
        except StaleRow:
            raise _lost(core, call, tx, job_id, lease) from None

    return Plan(write, _job_answer, core.limit_free.settle(call.namespace) if free else None)


@verb("heartbeat", ("consume",), HeartbeatArgs)
def heartbeat(core: Services, call: Call, a: HeartbeatArgs) -> Plan:
    """Extend a lease."""

    def change(tx: Tx, row: JobRow) -> int:
        expires = tx.now_ms + (a.lease_ms or row.lease_ms)
        tx.store.jobs.extend_lease(row, expires, tx.now_ms)
        return expires

    plan = _on_lease(core, call, a.job_id, a.lease, change, free=True)
    return Plan(plan.write, lambda expires: {"lease_expires_at": expires}, plan.free)


@verb("complete", ("consume",), CompleteArgs)
def complete(core: Services, call: Call, a: CompleteArgs) -> Plan:
    """Finish a job successfully."""
    result = None if a.result is None else dumps(a.result)

    def change(tx: Tx, row: JobRow) -> JobRow:
        budgets = settled_bindings(core.budgets, row, a.cost)
        return tx.store.jobs.finish(row, event="complete", state=lc.COMPLETED, now=tx.now_ms,
                                    result=result, budgets=budgets)  # fmt: skip

    return _on_lease(core, call, a.job_id, a.lease, change, free=True)


@verb("complete_many", ("consume",), CompleteManyArgs)
def complete_many(core: Services, call: Call, a: CompleteManyArgs) -> Plan:
    """Finish many jobs in one transaction (a worker's batch completer, as River's).

    Each completion stands alone: one whose lease is lost is answered with its
    error in its place, and the others complete. A job named twice is
    completed once; the second is ``lease_lost``.
    """

    def write(tx: Tx) -> list[dict[str, Any]]:
        outcome: list[dict[str, Any]] = [{"job_id": c.job_id} for c in a.jobs]
        found: list[tuple[int, JobRow, str | None, str | None]] = []
        batch: list[tuple[JobRow, str | None]] = []  # found, settling no costs
        for i, c in enumerate(a.jobs):
            try:
                row = _leased(core, call, tx, c.job_id, c.lease)
                settled = settled_bindings(core.budgets, row, c.cost) if c.cost else None
            except Refused as refused:  # this job only: nothing of it is written
                outcome[i]["error"] = refused.to_wire()
                continue
            result = None if c.result is None else dumps(c.result)
            found.append((i, row, result, settled))
            if settled is None:
                batch.append((row, result))
        # Completions that settle costs rewrite their bindings: one at a time.
        one_by_one = [f for f in found if f[3] is not None] if len(batch) < len(found) else []
        if batch and tx.store.jobs.complete_many(batch, tx.now_ms) is None:
            one_by_one = found  # a stale row or a job named twice: one at a time, to say which
        for i, row, result, settled in one_by_one:
            try:
                tx.store.jobs.finish(row, event="complete", state=lc.COMPLETED, now=tx.now_ms,
                                     result=result, budgets=settled)  # fmt: skip
            except StaleRow:
                try:
                    refusal = _lost(core, call, tx, row.id, row.lease)
                except Refused as why:
                    refusal = why
                outcome[i]["error"] = refusal.to_wire()
        for item in outcome:
            if "error" not in item:
                item["state"] = lc.COMPLETED
        return outcome

    return Plan(write, lambda results: {"results": results},
                core.limit_free.settle(call.namespace))  # fmt: skip


@verb("fail", ("consume",), FailArgs)
def fail(core: Services, call: Call, a: FailArgs) -> Plan:
    """Report a failed attempt: retry with backoff, or dead."""

    def change(tx: Tx, row: JobRow) -> JobRow:
        now = tx.now_ms
        if a.dead or row.attempts >= row.max_attempts:
            reason = "failed" if a.dead else "attempts_exhausted"
            after = tx.store.jobs.finish(
                row, event="fail", state=lc.DEAD, now=now, error=a.error,
                dead=dumps({"at": now, "reason": reason}),
            )  # fmt: skip
        else:
            delay = a.retry_in_ms if a.retry_in_ms is not None else lc.backoff_ms(row.attempts)
            ready_at = now + delay
            state = lc.arrival_state(ready_at, now)
            after = tx.store.jobs.finish(
                row, event="fail", state=state, now=now, ready_at=ready_at, error=a.error
            )
        return after

    return _on_lease(core, call, a.job_id, a.lease, change)


@verb("release", ("consume",), ReleaseArgs)
def release(core: Services, call: Call, a: ReleaseArgs) -> Plan:
    """Give a job back unworked: the attempt is taken back."""

    def change(tx: Tx, row: JobRow) -> JobRow:
        now = tx.now_ms
        ready_at = now + a.delay_ms if a.delay_ms else row.ready_at
        state = lc.arrival_state(ready_at, now)
        return tx.store.jobs.finish(
            row, event="release", state=state, now=now, ready_at=ready_at, attempts_delta=-1
        )

    return _on_lease(core, call, a.job_id, a.lease, change)
