"""The Trio client: how it is opened, and the verbs as awaitable methods.

:class:`TrioClient` is a :class:`~daemon.sdk.trio_connection.TrioConnection`
(many calls in flight, answers routed by id, retries of 429s on the Trio
clock, reconnecting after an idle close) opened with :meth:`TrioClient.connect`
or :meth:`TrioClient.over`, which run its reader task in a nursery of their
own, with one method per verb. What each verb sends and how its answer reads
is :mod:`daemon.sdk.verbs`', shared with the blocking client; claims come
back as :class:`~daemon.sdk.job.TrioJob` handles.

::

    async with TrioClient.connect() as client:
        await client.enqueue("images", "resize", {"id": 7})
        for job in await client.claim_next(["images"], wait_ms=30_000):
            await job.complete()
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Self, TypeVar, Unpack

import trio

from daemon.sdk import verbs
from daemon.sdk.job import Claimed, TrioJob
from daemon.sdk.link import EventCallback
from daemon.sdk.paths import resolve_socket, resolve_token
from daemon.sdk.protocol import JobOptions
from daemon.sdk.retry import RetryPolicy
from daemon.sdk.trio_connection import TrioConnection
from daemon.sdk.verbs import Verb

__all__ = ["EventCallback", "TrioClient", "collapse"]

T = TypeVar("T")


def collapse(group: BaseExceptionGroup) -> BaseException:
    """The exception a nursery wrapped alone, else the group itself.

    The SDK's nurseries wrap only their body's error (their helper tasks never
    raise), so callers can catch ``NotFound`` rather than an ``ExceptionGroup``.
    """
    return group.exceptions[0] if len(group.exceptions) == 1 else group


class TrioClient(TrioConnection):
    """A connection to the daemon for Trio programs. Open it with :meth:`connect`."""

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        socket: str | os.PathLike[str] | None = None,
        *,
        token: str | None = None,
        config: str | os.PathLike[str] | None = None,
        client_name: str | None = None,
        retry: RetryPolicy | None = None,
        on_event: EventCallback | None = None,
    ) -> AsyncIterator[Self]:
        """Connect to the daemon's socket (resolved as :mod:`daemon.sdk.paths` says)."""
        path = resolve_socket(socket, config)
        stream = await trio.open_unix_socket(str(path))
        async with cls.over(
            stream, token=token, client_name=client_name, retry=retry, on_event=on_event
        ) as client:
            client.path = path
            yield client

    @classmethod
    @asynccontextmanager
    async def over(
        cls,
        stream: trio.abc.HalfCloseableStream,
        *,
        token: str | None = None,
        client_name: str | None = None,
        retry: RetryPolicy | None = None,
        on_event: EventCallback | None = None,
    ) -> AsyncIterator[Self]:
        """A client over an already open ``stream`` (tests use in-memory streams)."""
        client = cls(stream, retry=retry, on_event=on_event)
        try:
            async with trio.open_nursery() as nursery:
                client._start(nursery)
                try:
                    token = resolve_token(token)
                    if token or client_name:
                        await client.hello(token=token, client=client_name)
                    yield client
                finally:
                    nursery.cancel_scope.cancel()
                    # Shielded: a Cancelled here would replace the body's own error.
                    with trio.CancelScope(shield=True):
                        await client.aclose()
        except BaseExceptionGroup as group:
            raise collapse(group) from None

    async def _run(self, verb: Verb[T]) -> T:
        """Call ``verb`` and read its answer."""
        return verb.read(await self.call(verb.op, **verb.args))

    async def enqueue(
        self, queue: str, type: str, payload: Any = None, **options: Unpack[JobOptions]
    ) -> dict[str, Any]:
        """Enqueue one job; return ``{job, duplicate, folded, shed}``."""
        return await self._run(verbs.enqueue(queue, type, payload, **options))

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Enqueue a batch as a unit (see :func:`~daemon.sdk.protocol.job_spec`)."""
        return await self._run(verbs.enqueue_many(jobs))

    async def complete_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Complete many claimed jobs (``{job_id, lease, result?}`` each) in one call;
        each result is ``{job_id, state}`` or ``{job_id, error}``, in order."""
        return await self._run(verbs.complete_many(jobs))

    async def claim_next(
        self,
        queues: Sequence[str],
        *,
        max: int = 1,
        wait_ms: int = 0,
        lease_ms: int | None = None,
    ) -> Claimed:
        """Claim up to ``max`` jobs, waiting up to ``wait_ms`` for work; job handles."""
        verb = verbs.claim_next(
            queues, max=max, wait_ms=wait_ms, lease_ms=lease_ms, make_job=partial(TrioJob, self)
        )
        return await self._run(verb)

    async def claim(self, job_id: str, *, lease_ms: int | None = None) -> TrioJob:
        """Claim one pending job by id."""
        return await self._run(
            verbs.claim(job_id, lease_ms=lease_ms, make_job=partial(TrioJob, self))
        )

    async def get(self, job_id: str) -> dict[str, Any]:
        """One job object by id."""
        return await self._run(verbs.get(job_id))

    async def list(
        self,
        queue: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict[str, Any]:
        """A page of jobs in id order: ``{jobs, next}``."""
        return await self._run(verbs.list_jobs(queue, status, limit, after))

    async def explain(self, job_id: str) -> dict[str, Any]:
        """Every limit that applies to one job, whether each holds it back, and its
        position: ``{job_id, status, holds, position}``."""
        return await self._run(verbs.explain(job_id))

    async def status(self) -> dict[str, Any]:
        """The namespace at a glance: queues and their counts, the daemon."""
        return await self._run(verbs.status())

    async def subscribe(self, queues: Sequence[str]) -> None:
        """Receive a doorbell event (``on_event``) each time a queue becomes claimable.

        A subscribed client is never reconnected: if its connection is lost,
        calls raise ``ConnectionLost`` and the subscription must be made again
        on a new client.
        """
        await self._run(verbs.subscribe(queues))

    async def dead_list(
        self, queue: str | None = None, limit: int | None = None, after: str | None = None
    ) -> dict[str, Any]:
        """A page of dead letters: ``{jobs, next}``."""
        return await self._run(verbs.dead_list(queue, limit, after))

    async def dead_replay(
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
        verb = verbs.dead_replay(job_ids, all=all, queue=queue, limit=limit, after=after)
        return await self._run(verb)

    async def budget_pause(
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
        return await self._run(verb)

    async def budget_resume(self, key: str) -> dict[str, Any]:
        """End budget ``key``'s pause now (``manage``); the budget object."""
        return await self._run(verbs.budget_resume(key))
