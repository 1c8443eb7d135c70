"""The blocking client: the verbs as methods, over one stdlib-socket connection.

:class:`Client` is a :class:`~daemon.sdk.sync_connection.SyncConnection`
(pipelining by request id, retries of 429s, reconnecting after an idle close)
with one method per verb. What each verb sends and how its answer reads is
:mod:`daemon.sdk.verbs`', shared with the Trio client; claims come back as
:class:`~daemon.sdk.job.Job` handles.

A ``Client`` is not thread-safe: use one per thread.

::

    with Client() as client:
        client.enqueue("images", "resize", {"id": 7})
        for job in client.claim_next(["images"], wait_ms=30_000):
            job.complete({"ok": True})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar, Unpack

from daemon.sdk import verbs
from daemon.sdk.job import Claimed, Job
from daemon.sdk.protocol import JobOptions
from daemon.sdk.sync_connection import (
    CLIENT_TIMEOUT,
    EventCallback,
    RetryCallback,
    SyncConnection,
)
from daemon.sdk.verbs import Verb

__all__ = ["CLIENT_TIMEOUT", "Client", "EventCallback", "RetryCallback"]

T = TypeVar("T")


class Client(SyncConnection):
    """A blocking connection to the daemon's unix socket.

    ``socket``, ``config`` and ``token`` are resolved as
    :mod:`daemon.sdk.paths` describes; with a token the client says ``hello``
    on connect. ``timeout`` bounds the wait for each answer (a waiting claim
    gets its ``wait_ms`` on top); None waits forever. ``sleep`` is how retries
    wait (tests pass a recorder); ``on_retry(error, attempt, delay)`` is told
    before each wait (the CLI prints it). ``sock`` is an already connected socket to
    use instead of resolving and connecting one (such a client never reconnects).
    """

    def _run(self, verb: Verb[T]) -> T:
        """Call ``verb`` and read its answer."""
        return verb.read(self.call(verb.op, **verb.args))

    def enqueue(
        self, queue: str, type: str, payload: Any = None, **options: Unpack[JobOptions]
    ) -> dict[str, Any]:
        """Enqueue one job; return ``{job, duplicate, folded, shed}``."""
        return self._run(verbs.enqueue(queue, type, payload, **options))

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Enqueue a batch as a unit (see :func:`~daemon.sdk.protocol.job_spec`)."""
        return self._run(verbs.enqueue_many(jobs))

    def complete_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Complete many claimed jobs (``{job_id, lease, result?}`` each) in one call;
        each result is ``{job_id, state}`` or ``{job_id, error}``, in order."""
        return self._run(verbs.complete_many(jobs))

    def claim_next(
        self,
        queues: Sequence[str],
        *,
        max: int = 1,
        wait_ms: int = 0,
        lease_ms: int | None = None,
    ) -> Claimed:
        """Claim up to ``max`` jobs, waiting up to ``wait_ms`` for work; job handles."""
        verb = verbs.claim_next(
            queues, max=max, wait_ms=wait_ms, lease_ms=lease_ms, make_job=partial(Job, self)
        )
        return self._run(verb)

    def claim(self, job_id: str, *, lease_ms: int | None = None) -> Job:
        """Claim one pending job by id."""
        return self._run(verbs.claim(job_id, lease_ms=lease_ms, make_job=partial(Job, self)))

    def get(self, job_id: str) -> dict[str, Any]:
        """One job object by id."""
        return self._run(verbs.get(job_id))

    def list(
        self,
        queue: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict[str, Any]:
        """A page of jobs in id order: ``{jobs, next}``."""
        return self._run(verbs.list_jobs(queue, status, limit, after))

    def explain(self, job_id: str) -> dict[str, Any]:
        """Every limit that applies to one job, whether each holds it back, and its
        position: ``{job_id, status, holds, position}``."""
        return self._run(verbs.explain(job_id))

    def status(self) -> dict[str, Any]:
        """The namespace at a glance: queues and their counts, the daemon."""
        return self._run(verbs.status())

    def subscribe(self, queues: Sequence[str]) -> None:
        """Receive a doorbell event each time one of ``queues`` becomes claimable."""
        self._run(verbs.subscribe(queues))

    def dead_list(
        self, queue: str | None = None, limit: int | None = None, after: str | None = None
    ) -> dict[str, Any]:
        """A page of dead letters: ``{jobs, next}``."""
        return self._run(verbs.dead_list(queue, limit, after))

    def dead_replay(
        self,
        job_ids: Sequence[str] | None = None,
        *,
        all: bool = False,
        queue: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict[str, Any]:
        """Replay dead letters by id, or ``all`` (a batch after ``after``);
        ``{results, remaining, next}``."""
        return self._run(verbs.dead_replay(job_ids, all=all, queue=queue, limit=limit, after=after))

    def budget_pause(
        self,
        key: str,
        *,
        until_ms: int | None = None,
        retry_after_s: float | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Pause budget ``key`` (an upstream said 429, Retry-After ...): no job bound
        to it is claimed before ``until_ms`` (wall ms), or for ``retry_after_s``
        seconds; give exactly one (a week at most). The later instant wins over a
        pause already set; the budget object. Needs ``consume`` on a queue whose
        jobs bind the budget, or ``manage``."""
        verb = verbs.budget_pause(key, until_ms=until_ms, retry_after_s=retry_after_s,
                                  reason=reason)  # fmt: skip
        return self._run(verb)

    def budget_resume(self, key: str) -> dict[str, Any]:
        """End budget ``key``'s pause now (``manage``); the budget object."""
        return self._run(verbs.budget_resume(key))
