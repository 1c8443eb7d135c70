"""The worker's batch completer: many jobs' completions in one ``complete_many``.

River's ``BatchCompleter`` idea, without a timer: a completion is queued and
the completer task sends everything queued so far in one call; while that
call is in flight, the next completions gather, so a busy worker sends big
batches and an idle one sends each completion at once (no added latency).

Each completion stands alone: the daemon answers each job's outcome in its
place (a lost lease raises :class:`~daemon.sdk.errors.LeaseLost` for that job
only). A result that cannot be encoded is refused at once, for its job only.
If the daemon refuses a whole batch (an ``invalid_argument``: a result it
will not store), the batch's jobs are completed one by one, so each hears its
own answer.
"""

from __future__ import annotations

from typing import Any

import orjson
import trio

from daemon.sdk.errors import ConnectionLost, InvalidArgument, SluicegateError, error_from_wire
from daemon.sdk.job import TrioJob
from daemon.sdk.trio_client import TrioClient

#: Most completions one call carries (the daemon's limit).
MAX_BATCH = 1000


class _Pending:
    __slots__ = ("done", "error", "job", "result")

    def __init__(self, job: TrioJob, result: Any) -> None:
        self.job = job
        self.result = result
        self.done = trio.Event()
        self.error: BaseException | None = None


class BatchCompleter:
    """Queues completions and sends them in batches; run :meth:`run` in a nursery."""

    def __init__(self, client: TrioClient, max_batch: int = MAX_BATCH) -> None:
        self._client = client
        self._max = max_batch
        self._queue: list[_Pending] = []
        self._wake = trio.Event()
        #: Calls sent, and completions they carried (for tests and statistics).
        self.calls = 0
        self.completions = 0

    async def complete(self, job: TrioJob, result: Any = None) -> None:
        """Complete ``job`` with ``result`` in the next batch; raise its own error."""
        orjson.dumps(result)  # TypeError now, for this job only, not the batch
        pending = _Pending(job, result)
        self._queue.append(pending)
        self._wake.set()
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        job.finished = True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The completer task: sends what is queued, batch after batch, until cancelled."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._queue:
                batch, self._queue = self._queue[: self._max], self._queue[self._max :]
                await self._send(batch)

    async def _send(self, batch: list[_Pending]) -> None:
        for p in batch:  # until the daemon says otherwise (a cancelled call says nothing)
            p.error = ConnectionLost("the completer stopped before the daemon answered")
        try:
            try:
                results = await self._client.complete_many(
                    p.job._complete_args(p.result) for p in batch
                )
            except InvalidArgument:
                await self._one_by_one(batch)
                return
            except SluicegateError as exc:  # the whole call failed (e.g. connection lost)
                for p in batch:
                    p.error = exc
                return
            self.calls += 1
            self.completions += len(batch)
            for p, outcome in zip(batch, results, strict=True):
                p.error = error_from_wire(outcome["error"]) if "error" in outcome else None
        finally:
            for p in batch:
                p.done.set()

    async def _one_by_one(self, batch: list[_Pending]) -> None:
        for p in batch:
            try:
                await p.job.complete(p.result)
                p.error = None
            except SluicegateError as exc:
                p.error = exc
