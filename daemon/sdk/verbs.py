"""The client verbs, sans I/O: what each one sends, how its answer reads, when it is retried.

The blocking :class:`~daemon.sdk.sync_client.Client` and the
:class:`~daemon.sdk.trio_client.TrioClient` offer the same verbs, one
blocking, one awaited. Each verb's arguments (options left None are left
out) and the reading of its answer are said here once, as a :class:`Verb`;
a client only carries it over its connection, and hands the claim verbs
``make_job``, which makes its own kind of job handle
(:class:`~daemon.sdk.job.Job` or :class:`~daemon.sdk.job.TrioJob`).
:func:`retry_delay` is the one rule both clients follow for a refused call
(:class:`~daemon.sdk.retry.RetryPolicy`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar, Unpack

import attrs

from daemon.sdk.errors import SluicegateError
from daemon.sdk.job import Claimed, JobHandle
from daemon.sdk.protocol import JobOptions, drop_none, job_spec
from daemon.sdk.retry import RetryPolicy

T = TypeVar("T")
H = TypeVar("H", bound=JobHandle)
Answer = dict[str, Any]
#: A client's job-handle maker: (job object, admission details, the claim's lease_ms).
MakeJob = Callable[[Answer, "Answer | None", "int | None"], H]


def _as_is(answer: Answer) -> Any:
    return answer


def _nothing(_answer: Answer) -> None:
    return None


def _field(name: str) -> Callable[[Answer], Any]:
    def read(answer: Answer) -> Any:
        return answer[name]

    return read


@attrs.frozen
class Verb(Generic[T]):
    """One call of a verb: its name, its arguments, and how its answer reads."""

    op: str
    args: dict[str, Any] = attrs.field(factory=dict)
    #: The caller's result from the verb's answer.
    read: Callable[[Answer], T] = _as_is


def retry_delay(
    policy: RetryPolicy, op: str, args: Mapping[str, Any], error: SluicegateError, attempt: int
) -> float | None:
    """Seconds to wait before calling ``op`` again after attempt ``attempt`` (from 1)
    was refused with ``error``; None when it must not be retried.

    A ``claim_next`` that waits for work (``wait_ms``) keeps its place longer.
    """
    waiting = op == "claim_next" and bool(args.get("wait_ms"))
    if not policy.should_retry(error, attempt, waiting=waiting):
        return None
    return policy.delay(attempt, error.retry_after)


def hello(token: str | None, client: str | None) -> Verb[Answer]:
    """Authenticate the connection: ``{namespace, grants, queues, ...}``."""
    return Verb("hello", drop_none(token=token, client=client))


def enqueue(queue: str, type: str, payload: Any, **options: Unpack[JobOptions]) -> Verb[Answer]:
    """Enqueue one job: ``{job, duplicate, folded, shed}``."""
    return Verb("enqueue", job_spec(queue, type, payload, **options))


def enqueue_many(jobs: Iterable[Mapping[str, Any]]) -> Verb[list[Answer]]:
    """Enqueue a batch as a unit: its results."""
    return Verb("enqueue_many", {"jobs": [dict(j) for j in jobs]}, _field("results"))


def complete_many(jobs: Iterable[Mapping[str, Any]]) -> Verb[list[Answer]]:
    """Complete many claimed jobs in one call: ``{job_id, state}`` or ``{job_id, error}`` each."""
    return Verb("complete_many", {"jobs": [dict(j) for j in jobs]}, _field("results"))


def claim_next(
    queues: Sequence[str], *, max: int, wait_ms: int, lease_ms: int | None, make_job: MakeJob[H]
) -> Verb[Claimed]:
    """Claim up to ``max`` jobs: their handles, and why nothing more was claimable."""

    def read(answer: Answer) -> Claimed:
        jobs = [make_job(item["job"], item.get("admission"), lease_ms) for item in answer["jobs"]]
        return Claimed(jobs, answer.get("deferred"))

    args = drop_none(queues=list(queues), max=max, wait_ms=wait_ms, lease_ms=lease_ms)
    return Verb("claim_next", args, read)


def claim(job_id: str, *, lease_ms: int | None, make_job: MakeJob[H]) -> Verb[H]:
    """Claim one pending job by id: its handle."""

    def read(answer: Answer) -> H:
        return make_job(answer["job"], answer.get("admission"), lease_ms)

    return Verb("claim", drop_none(job_id=job_id, lease_ms=lease_ms), read)


def get(job_id: str) -> Verb[Answer]:
    """One job object by id."""
    return Verb("get", {"job_id": job_id}, _field("job"))


def list_jobs(
    queue: str | None, status: str | None, limit: int | None, after: str | None
) -> Verb[Answer]:
    """A page of jobs in id order (the verb ``list``): ``{jobs, next}``."""
    return Verb("list", drop_none(queue=queue, status=status, limit=limit, after=after))


def explain(job_id: str) -> Verb[Answer]:
    """Every limit that applies to one job, and its position (the whole answer)."""
    return Verb("explain", {"job_id": job_id})


def status() -> Verb[Answer]:
    """The namespace at a glance."""
    return Verb("status")


def subscribe(queues: Sequence[str]) -> Verb[None]:
    """Doorbell events for ``queues``; the answer says nothing more."""
    return Verb("subscribe", {"queues": list(queues)}, _nothing)


def dead_list(queue: str | None, limit: int | None, after: str | None) -> Verb[Answer]:
    """A page of dead letters: ``{jobs, next}``."""
    return Verb("dead_list", drop_none(queue=queue, limit=limit, after=after))


def dead_replay(
    job_ids: Sequence[str] | None,
    *,
    all: bool,
    queue: str | None,
    limit: int | None,
    after: str | None,
) -> Verb[Answer]:
    """Replay dead letters by id, or ``all``: ``{results, remaining, next}``."""
    args = drop_none(
        job_ids=None if job_ids is None else list(job_ids),
        all=True if all else None,
        queue=queue,
        limit=limit,
        after=after,
    )
    return Verb("dead_replay", args)


def budget_pause(
    key: str, *, until_ms: int | None, retry_after_s: float | None, reason: str | None
) -> Verb[Answer]:
    """Pause budget ``key`` until ``until_ms`` or for ``retry_after_s`` (exactly one):
    the budget object. A pause never shortens one already longer."""
    args = drop_none(key=key, until_ms=until_ms, retry_after_s=retry_after_s, reason=reason)
    return Verb("budget_pause", args, _field("budget"))


def budget_resume(key: str) -> Verb[Answer]:
    """End budget ``key``'s pause now (``manage``): the budget object."""
    return Verb("budget_resume", {"key": key}, _field("budget"))
