"""The worker loop: claim jobs, run a function per job, report the outcome.

:class:`Worker` claims with ``claim_next(queues, max=<free slots>,
wait_ms=...)``, so it never holds more jobs than it can run, and runs the
handler for each: an ``async def`` on the event loop, a plain function in a
thread (``trio.to_thread``). While a job runs, its lease is extended every
``lease_ms / 3`` (one task keeps every job's lease,
:mod:`daemon.sdk.lease_keeper`). The handler's return value completes the job (it is the
``result``; completions go out in batches, :mod:`daemon.sdk.completer`); an
exception fails it with the exception's text, and the daemon
schedules the retry. A handler may also settle the job itself (``await
job.release(delay_ms=...)``, ``await job.fail(..., dead=True)``), and the
worker then leaves it alone. A heartbeat that finds the lease lost cancels
the handler: another worker owns the job now. (A thread cannot be interrupted:
a cancelled plain-function handler is abandoned, runs to its end in its
thread, and its result is discarded.)

A claim refused ``unavailable`` (the store cannot write, or the daemon's
database is not open yet: nothing was written) does not end the worker: it
waits the client's retry delay (the daemon's ``retry_after``, else a backoff
from 0.5 s doubling to 30 s, jittered) and claims again. Nor does a lost
connection (a daemon restarted): the worker opens it again
(:meth:`TrioClient.reconnect <daemon.sdk.trio_connection.TrioConnection.reconnect>`),
with the same backoff while the socket does not answer, and claims on; what
the lost claim may have taken comes back when its lease lapses, and the
outcomes of jobs that were running then are reported if the new connection
is up by the time they end (else their leases lapse and they run again).
Each outage is logged once, and its end once. ``shutting_down`` still ends
:meth:`Worker.run`, and so does a lost connection that cannot be opened again
(a client over a caller's stream, or one that subscribed).

Stopping (:meth:`Worker.stop`, or cancelling :meth:`Worker.run`): claiming
stops at once, running jobs get ``grace`` seconds to finish, and the ones
still running then are cancelled and released, their attempt given back.
Cancel the worker, not the client's connection: the jobs are settled through
that connection.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from daemon.sdk.completer import BatchCompleter
from daemon.sdk.errors import ConnectionLost, LeaseLost, ShuttingDown, SluicegateError, Unavailable
from daemon.sdk.job import TrioJob
from daemon.sdk.lease_keeper import LeaseKeeper
from daemon.sdk.trio_client import TrioClient, collapse

log = logging.getLogger("sluicegate.worker")
Handler = Callable[[TrioJob], Awaitable[Any]] | Callable[[TrioJob], Any]

#: How long settling a job may take once the grace period is over.
SETTLE_TIMEOUT = 5.0
#: Empty answers that came back early (a draining daemon) pace the loop up to this.
MAX_IDLE_PAUSE = 2.0


@attrs.frozen
class WorkerStats:
    """A snapshot of a worker's counters."""

    running: int
    completed: int
    failed: int
    released: int
    lost: int
    stopping: bool


@attrs.define
class _Outcome:
    value: Any = None
    error: BaseException | None = None
    lost: bool = False


def _is_async(fn: object) -> bool:
    """True for an ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - looking for an async __call__
    )


def error_text(exc: BaseException) -> str:
    """A failed job's ``error``: the exception's type and message."""
    return "".join(traceback.format_exception_only(exc)).strip()[-65_536:]


class Worker:
    """Runs ``handler`` for jobs of ``queues``, up to ``concurrency`` at once."""

    def __init__(
        self,
        client: TrioClient,
        queues: Sequence[str],
        handler: Handler,
        *,
        concurrency: int = 1,
        wait_ms: int = 10_000,
        lease_ms: int | None = None,
        grace: float = 30.0,
        threaded: bool | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.client = client
        self.queues = list(queues)
        self.handler = handler
        self.concurrency = concurrency
        self.wait_ms = wait_ms
        self.lease_ms = lease_ms
        self.grace = grace
        #: Run the handler in a thread; by default, when it is not a coroutine function.
        self.threaded = not _is_async(handler) if threaded is None else threaded
        self._threads = trio.CapacityLimiter(concurrency)
        self._running = 0
        self._counts = {"completed": 0, "failed": 0, "released": 0, "lost": 0}
        self._stopping = False
        self._started = False
        self._slot_freed = trio.Event()
        self._claim_scope: trio.CancelScope | None = None
        self._jobs_scope: trio.CancelScope | None = None
        self._draining = False
        self._no_more_jobs = trio.Event()
        #: Completions go out in batches (one ``complete_many`` per batch).
        self._completer = BatchCompleter(client)
        self._keeper = LeaseKeeper()

    def statistics(self) -> WorkerStats:
        """The worker's counters now."""
        return WorkerStats(running=self._running, stopping=self._stopping, **self._counts)

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming; give running jobs ``grace`` seconds (default: the worker's)."""
        self._stopping = True
        if grace is not None:
            self.grace = grace
        if self._claim_scope is not None:
            self._claim_scope.cancel()
        self._slot_freed.set()
        if self._draining:
            self._set_deadline()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and run jobs until stopped or cancelled; return once all are settled."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        # Jobs live in a shielded scope so that cancelling run() stops the claims
        # but still lets running jobs finish within the grace period.
        self._jobs_scope = trio.CancelScope(shield=True)
        try:
            async with trio.open_nursery() as root:
                jobs: trio.Nursery = await root.start(self._host_jobs, self._jobs_scope)
                task_status.started()
                try:
                    await self._claim_loop(jobs)
                finally:
                    self._stopping = self._draining = True
                    self._set_deadline()
                    self._no_more_jobs.set()
        except BaseExceptionGroup as group:
            raise collapse(group) from None

    def _set_deadline(self) -> None:
        if self._jobs_scope is not None:
            deadline = trio.current_time() + max(0.0, self.grace)
            self._jobs_scope.deadline = min(self._jobs_scope.deadline, deadline)

    async def _host_jobs(
        self, scope: trio.CancelScope, *, task_status: trio.TaskStatus[trio.Nursery]
    ) -> None:
        with scope:
            async with trio.open_nursery() as settling:
                # The completer lives as long as the jobs (and their grace), no longer.
                await settling.start(self._completer.run)
                await settling.start(self._keeper.run)
                async with trio.open_nursery() as jobs:
                    task_status.started(jobs)
                    await self._no_more_jobs.wait()
                settling.cancel_scope.cancel()

    async def _claim_loop(self, jobs: trio.Nursery) -> None:
        pause = 0.0
        outage: tuple[float, int] | None = None  # (since, refusals) while unavailable
        while not self._stopping:
            while self._running >= self.concurrency and not self._stopping:
                self._slot_freed = trio.Event()
                await self._slot_freed.wait()
            if self._stopping:
                return
            started = trio.current_time()
            claimed: list[TrioJob] | None = None
            with trio.CancelScope() as self._claim_scope:
                try:
                    claimed = await self.client.claim_next(
                        self.queues,
                        max=self.concurrency - self._running,
                        wait_ms=self.wait_ms,
                        lease_ms=self.lease_ms,
                    )
                except (Unavailable, ConnectionLost) as exc:
                    if isinstance(exc, ShuttingDown):
                        raise
                    outage = await self._ride_out(exc, outage)
                    continue
            self._claim_scope = None
            if claimed is None:  # the claim was cancelled: a stop
                claimed = []
            elif outage is not None:
                log.info("claims answered again after %.1f s", trio.current_time() - outage[0])
                outage = None
            for job in claimed:  # claimed before a stop: they run, within the grace
                self._running += 1
                jobs.start_soon(self._run_job, job, name=f"job {job.id}")
            if claimed:
                pause = 0.0
            elif self._stopping:
                return
            elif trio.current_time() - started < self.wait_ms / 2000:
                # An empty answer long before wait_ms (a draining daemon, wait_ms=0):
                # back off instead of spinning.
                pause = min(MAX_IDLE_PAUSE, max(0.05, pause * 2))
                await trio.sleep(pause)

    async def _ride_out(
        self, exc: Unavailable | ConnectionLost, outage: tuple[float, int] | None
    ) -> tuple[float, int]:
        """One step through an outage of claims; the outage's ``(since, attempts)``.

        ``unavailable`` (a store that cannot write, a daemon whose database is not
        open yet) wrote nothing, so a consumer keeps its place, as through a 429:
        wait, then claim again. A lost connection (a daemon restarted) is opened
        again at once, or, while the socket does not answer, after a wait; what
        the claim in flight may have taken comes back when its lease lapses. The
        wait is the client's retry policy's for that attempt: the daemon's
        ``retry_after``, or a backoff from 0.5 s doubling to 30 s, jittered. A
        client that cannot reopen (over a caller's stream, subscribed) ends the
        worker.
        """
        since, attempt = outage if outage else (trio.current_time(), 0)
        if outage is None:
            what = "refused" if isinstance(exc, Unavailable) else "lost the connection"
            log.warning("claims %s: %s; trying again", what, exc.message)
        if isinstance(exc, ConnectionLost):
            try:
                await self.client.reconnect()
                return since, attempt + 1
            except ConnectionLost as failed:
                if not self.client.reopenable:
                    raise
                exc = failed
        await trio.sleep(self.client.retry.delay(attempt + 1, exc.retry_after))
        return since, attempt + 1  # the sleep is in the claim's scope: stop() ends it

    async def _run_job(self, job: TrioJob) -> None:
        try:
            outcome = await self._work(job)
            if not job.finished:
                await self._settle(job, outcome)
        except ConnectionLost as exc:
            log.warning("job %s: connection lost: %s", job.id, exc.message)
        except Exception:  # one job's bad luck never ends the worker
            log.exception("job %s: could not be settled", job.id)
        finally:
            self._running -= 1
            self._slot_freed.set()
            if not job.finished:
                await self._give_back(job)

    async def _work(self, job: TrioJob) -> _Outcome:
        outcome = _Outcome()
        with trio.CancelScope() as scope:  # cancelled by the keeper if the lease is lost
            self._keeper.keep(job, scope, outcome)
            try:
                outcome.value = await self._invoke(job)
            except Exception as exc:
                outcome.error = exc
            finally:
                self._keeper.drop(job)
        return outcome

    async def _invoke(self, job: TrioJob) -> Any:
        if self.threaded:
            return await trio.to_thread.run_sync(
                self.handler, job, abandon_on_cancel=True, limiter=self._threads
            )
        return await self.handler(job)  # type: ignore[misc]

    async def _settle(self, job: TrioJob, outcome: _Outcome) -> None:
        try:
            if outcome.lost:
                self._counts["lost"] += 1
                job.finished = True  # nothing to settle: another worker owns it
            elif outcome.error is not None:
                await job.fail(error_text(outcome.error))
                self._counts["failed"] += 1
            else:
                try:
                    await self._completer.complete(job, outcome.value)
                except (TypeError, SluicegateError) as exc:
                    if isinstance(exc, LeaseLost | ConnectionLost):
                        raise
                    # A result the daemon or orjson refuses: fail it rather than retry forever.
                    await job.fail(f"the result could not be stored: {error_text(exc)}")
                    self._counts["failed"] += 1
                else:
                    self._counts["completed"] += 1
        except LeaseLost:
            self._counts["lost"] += 1
            job.finished = True
            log.warning("job %s: lease lost before its outcome was reported", job.id)

    async def _give_back(self, job: TrioJob) -> None:
        """Release a job that did not finish (cancelled past the grace period)."""
        with trio.CancelScope(shield=True), trio.move_on_after(SETTLE_TIMEOUT):
            try:
                await job.release()
                self._counts["released"] += 1
            except SluicegateError as exc:
                log.warning("job %s: could not be released: %s", job.id, exc)
