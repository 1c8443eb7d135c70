"""Job handles: a claimed job, its lease, and how it leaves ``running``.

A claim returns handles rather than bare dicts so the lease travels with the
job: ``job.complete()``, ``job.fail(...)``, ``job.release()`` and
``job.heartbeat()`` name the job and its lease for the caller. :class:`Job`
belongs to the blocking :class:`~daemon.sdk.sync_client.Client`,
:class:`TrioJob` to the :class:`~daemon.sdk.trio_client.TrioClient`; both keep
``job`` (the job object of the wire contract) up to date with each answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from daemon.sdk.protocol import drop_none

if TYPE_CHECKING:
    from daemon.sdk.sync_client import Client
    from daemon.sdk.trio_client import TrioClient

#: The lease a job has when the daemon does not say (``daemon.lease``'s default).
DEFAULT_LEASE_MS = 60_000


class JobHandle:
    """What both handles share: the job object and the requests that act on it."""

    def __init__(
        self,
        job: dict[str, Any],
        admission: dict[str, Any] | None = None,
        claim_lease_ms: int | None = None,
    ) -> None:
        #: The job object as last answered by the daemon.
        self.job = job
        #: The claim's admission details (PROTOCOL.md), or None.
        self.admission = admission
        #: The lease the claim asked for; heartbeats ask for it again.
        self.claim_lease_ms = claim_lease_ms
        #: Set once complete, fail or release succeeded: the lease is gone.
        self.finished = False

    @property
    def id(self) -> str:
        """The job id."""
        return self.job["id"]

    @property
    def queue(self) -> str:
        """The job's queue."""
        return self.job["queue"]

    @property
    def type(self) -> str:
        """The job's type."""
        return self.job["type"]

    @property
    def payload(self) -> Any:
        """The job's payload."""
        return self.job.get("payload")

    @property
    def attempt(self) -> int:
        """Which attempt this is (1 for the first claim)."""
        return self.job["attempts"]

    @property
    def lease(self) -> str:
        """The lease this handle holds."""
        return self.job["lease"]

    @property
    def lease_ms(self) -> int:
        """How long the lease lasts without a heartbeat.

        The claim's ``lease_ms`` when it gave one, else the job's own (the job
        object's ``lease_ms`` is the enqueue's, not a claim's).
        """
        value = self.claim_lease_ms or self.job.get("lease_ms")
        return value if isinstance(value, int) and value > 0 else DEFAULT_LEASE_MS

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.queue}/{self.type} attempt {self.attempt}>"

    def _heartbeat_args(self, lease_ms: int | None) -> dict[str, Any]:
        # Without lease_ms the daemon extends by the job's lease, not the claim's.
        lease_ms = lease_ms or self.claim_lease_ms
        return drop_none(job_id=self.id, lease=self.lease, lease_ms=lease_ms)

    def _complete_args(
        self, result: Any, cost: Mapping[str, float] | None = None
    ) -> dict[str, Any]:
        return drop_none(job_id=self.id, lease=self.lease, result=result,
                         cost=None if cost is None else dict(cost))  # fmt: skip

    def _pause_args(self, key: str, until_ms: int | None, retry_after_s: float | None,
                    reason: str | None) -> dict[str, Any]:  # fmt: skip
        return {"key": key, "until_ms": until_ms, "retry_after_s": retry_after_s,
                "reason": reason}  # fmt: skip

    def _fail_args(self, error: str, retry_in_ms: int | None, dead: bool) -> dict[str, Any]:
        return drop_none(
            job_id=self.id,
            lease=self.lease,
            error=error,
            retry_in_ms=retry_in_ms,
            dead=True if dead else None,
        )

    def _release_args(self, delay_ms: int | None) -> dict[str, Any]:
        return drop_none(job_id=self.id, lease=self.lease, delay_ms=delay_ms)

    def _extended(self, answer: dict[str, Any]) -> int:
        expires = answer["lease_expires_at"]
        self.job["lease_expires_at"] = expires
        return expires

    def _finished(self, answer: dict[str, Any]) -> dict[str, Any]:
        # The new job object has no lease; keep ours so repr and logs still work.
        lease = self.lease
        self.job = {**answer["job"], "lease": answer["job"].get("lease") or lease}
        self.finished = True
        return answer["job"]


class Job(JobHandle):
    """A job claimed through the blocking :class:`~daemon.sdk.sync_client.Client`."""

    def __init__(
        self,
        client: Client,
        job: dict[str, Any],
        admission: dict[str, Any] | None = None,
        claim_lease_ms: int | None = None,
    ) -> None:
        super().__init__(job, admission, claim_lease_ms)
        self.client = client

    def heartbeat(self, lease_ms: int | None = None) -> int:
        """Extend the lease; return the new ``lease_expires_at``. Raises ``LeaseLost``."""
        return self._extended(self.client.call("heartbeat", **self._heartbeat_args(lease_ms)))

    def complete(
        self, result: Any = None, cost: Mapping[str, float] | None = None
    ) -> dict[str, Any]:
        """Finish the job successfully; return the job object.

        ``cost`` settles what the job really cost its ``time_based`` budgets
        (``{"openai": 1234}``, numbers from 0): a smaller actual refunds the
        difference to the pool (never above its burst), a larger one takes the
        extra, which delays later jobs until the drip repays it. A key the job
        is not bound to, or a ``while_in_flight`` budget, is refused
        (``invalid_argument``) and nothing is written.
        """
        return self._finished(self.client.call("complete", **self._complete_args(result, cost)))

    def pause_budget(
        self, key: str, *, until_ms: int | None = None, retry_after_s: float | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Pause budget ``key``, one this job is bound to, after an upstream's 429:
        ``job.pause_budget("openai", retry_after_s=30)``. Jobs bound to it wait
        (reason ``budget_paused``) until then, this one included if it is
        released or retried; see the client's ``budget_pause``."""
        return self.client.budget_pause(**self._pause_args(key, until_ms, retry_after_s, reason))

    def fail(
        self, error: str, retry_in_ms: int | None = None, dead: bool = False
    ) -> dict[str, Any]:
        """Report a failed attempt (retried with backoff, or dead); return the job object."""
        answer = self.client.call("fail", **self._fail_args(error, retry_in_ms, dead))
        return self._finished(answer)

    def release(self, delay_ms: int | None = None) -> dict[str, Any]:
        """Give the job back unworked (the attempt is taken back); return the job object."""
        return self._finished(self.client.call("release", **self._release_args(delay_ms)))


class TrioJob(JobHandle):
    """A job claimed through the :class:`~daemon.sdk.trio_client.TrioClient`."""

    def __init__(
        self,
        client: TrioClient,
        job: dict[str, Any],
        admission: dict[str, Any] | None = None,
        claim_lease_ms: int | None = None,
    ) -> None:
        super().__init__(job, admission, claim_lease_ms)
        self.client = client

    async def heartbeat(self, lease_ms: int | None = None) -> int:
        """Extend the lease; return the new ``lease_expires_at``. Raises ``LeaseLost``."""
        answer = await self.client.call("heartbeat", **self._heartbeat_args(lease_ms))
        return self._extended(answer)

    async def complete(
        self, result: Any = None, cost: Mapping[str, float] | None = None
    ) -> dict[str, Any]:
        """Finish the job successfully; return the job object.

        ``cost`` settles what the job really cost its ``time_based`` budgets
        (``{"openai": 1234}``, numbers from 0): a smaller actual refunds the
        difference to the pool (never above its burst), a larger one takes the
        extra, which delays later jobs until the drip repays it. A key the job
        is not bound to, or a ``while_in_flight`` budget, is refused
        (``invalid_argument``) and nothing is written.
        """
        answer = await self.client.call("complete", **self._complete_args(result, cost))
        return self._finished(answer)

    async def pause_budget(
        self, key: str, *, until_ms: int | None = None, retry_after_s: float | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Pause budget ``key``, one this job is bound to, after an upstream's 429:
        ``job.pause_budget("openai", retry_after_s=30)``. Jobs bound to it wait
        (reason ``budget_paused``) until then, this one included if it is
        released or retried; see the client's ``budget_pause``."""
        args = self._pause_args(key, until_ms, retry_after_s, reason)
        return await self.client.budget_pause(**args)

    async def fail(
        self, error: str, retry_in_ms: int | None = None, dead: bool = False
    ) -> dict[str, Any]:
        """Report a failed attempt (retried with backoff, or dead); return the job object."""
        answer = await self.client.call("fail", **self._fail_args(error, retry_in_ms, dead))
        return self._finished(answer)

    async def release(self, delay_ms: int | None = None) -> dict[str, Any]:
        """Give the job back unworked (the attempt is taken back); return the job object."""
        return self._finished(await self.client.call("release", **self._release_args(delay_ms)))


class Claimed(list):  # type: ignore[type-arg]
    """The jobs a ``claim_next`` returned, plus why nothing more was claimable.

    ``deferred`` lists the granted queues whose pending jobs admission holds
    back (``{queue, reason, pending, next_eligible_at, exact, budget?}``);
    empty when the queues simply had no pending work.
    """

    def __init__(self, jobs: list[Any], deferred: list[dict[str, Any]] | None = None) -> None:
        super().__init__(jobs)
        self.deferred: list[dict[str, Any]] = deferred or []
