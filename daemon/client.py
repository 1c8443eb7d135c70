"""The Python SDK for Sluicegate: a blocking client, a Trio client, a worker.

::

    from daemon.client import Client

    with Client() as client:                      # ./sluicegate-data/sluicegate.sock
        client.enqueue("images", "resize", {"id": 7})
        for job in client.claim_next(["images"], wait_ms=30_000):
            job.complete({"ok": True})

    from daemon.client import TrioClient, Worker

    async def resize(job):                        # return: complete; raise: fail
        return {"size": job.payload["id"]}

    async with TrioClient.connect() as client:
        await Worker(client, ["images"], resize, concurrency=4).run()

The socket is the explicit argument, else ``$SLUICEGATE_SOCKET``, else the
config file's (``config=``, ``$SLUICEGATE_CONFIG``, ``./sluicegate.toml``),
else ``./sluicegate-data/sluicegate.sock``; the token is the argument or
``$SLUICEGATE_TOKEN``. Refusals raise :class:`SluicegateError` subclasses
named after outcomes; 429s are retried as :class:`RetryPolicy` says.

This module is a façade: the parts live in :mod:`daemon.sdk`.
"""

from daemon.sdk.errors import (
    BadFrame,
    Conflict,
    ConnectionLost,
    Deferred,
    Forbidden,
    FrameTooLarge,
    InternalError,
    InvalidArgument,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    QueueFull,
    QuotaExceeded,
    QuotaUnavailable,
    RateLimited,
    ShuttingDown,
    SluicegateError,
    TooLarge,
    TooManyWaiters,
    Unauthenticated,
    Unavailable,
    error_from_wire,
)
from daemon.sdk.job import Claimed, Job, JobHandle, TrioJob
from daemon.sdk.paths import resolve_socket, resolve_token
from daemon.sdk.protocol import JobOptions, job_spec
from daemon.sdk.retry import NO_RETRY, RetryPolicy
from daemon.sdk.sync_client import Client
from daemon.sdk.trio_client import TrioClient
from daemon.sdk.worker import Worker, WorkerStats

__all__ = [
    "NO_RETRY",
    "BadFrame",
    "Claimed",
    "Client",
    "Conflict",
    "ConnectionLost",
    "Deferred",
    "Forbidden",
    "FrameTooLarge",
    "InternalError",
    "InvalidArgument",
    "Job",
    "JobHandle",
    "JobOptions",
    "LeaseLost",
    "NotFound",
    "PayloadTooLarge",
    "QueueFull",
    "QuotaExceeded",
    "QuotaUnavailable",
    "RateLimited",
    "RetryPolicy",
    "ShuttingDown",
    "SluicegateError",
    "TooLarge",
    "TooManyWaiters",
    "TrioClient",
    "TrioJob",
    "Unauthenticated",
    "Unavailable",
    "Worker",
    "WorkerStats",
    "error_from_wire",
    "job_spec",
    "resolve_socket",
    "resolve_token",
]
