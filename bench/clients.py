"""The benchmark's client processes: producers, batch workers, one-at-a-time clients.

Each runs in its own process (multiprocessing ``spawn``), so the client side
never shares the daemon's GIL. A process imports, pre-encodes what it can,
waits on the start barrier, then connects and runs; it puts one
:class:`Report` on the result queue. Times are ``time.perf_counter()``, which
on Linux is ``CLOCK_MONOTONIC`` and so comparable across processes: the
parent takes the first send and the last answer over all reports.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from wire import WireClient, WireError

QUEUE = "bench"
_NL = orjson.OPT_APPEND_NEWLINE


@dataclass
class Shared:
    """What the parent shares with every client process of one phase."""

    barrier: Any  # multiprocessing.Barrier: every client plus the parent
    stop: Any  # multiprocessing.Event: give up (a stall, or the parent failed)
    done: Any  # multiprocessing.Value('q'): jobs completed so far, all clients
    results: Any  # multiprocessing.Queue of Report


@dataclass
class Report:
    """What one client process did."""

    role: str
    jobs: int = 0
    first_send: float | None = None
    last_answer: float | None = None
    #: Seconds from sending claim_next to its answer, for claims that got jobs.
    claim_latencies: list[float] = field(default_factory=list)
    empty_claims: int = 0
    errors: list[str] = field(default_factory=list)
    #: CPU seconds (user + system) this process used from the start barrier on.
    cpu_seconds: float = 0.0

    def started(self) -> None:
        """The run begins: CPU used before (imports, pre-encoding) is not counted."""
        self.cpu_seconds = -_cpu()

    def finish(self, shared: Shared) -> None:
        """Note this process's CPU time and hand the report to the parent."""
        self.cpu_seconds += _cpu()
        shared.results.put(self)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _add_done(shared: Shared, n: int) -> None:
    with shared.done.get_lock():
        shared.done.value += n


def _start(shared: Shared, socket_path: str, report: Report) -> WireClient:
    shared.barrier.wait(timeout=120)
    report.started()
    return WireClient(socket_path)


def producer(socket_path: str, jobs: int, first: int, batch: int, window: int,
             shared: Shared, extra: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Enqueue ``jobs`` jobs with ``enqueue_many`` batches, ``window`` in flight.

    ``extra`` is merged into every job (e.g. ``budgets``: bench/cluster.py).
    """
    report = Report("producer")
    more = extra or {}
    frames: list[tuple[int, bytes]] = []
    for req_id, start in enumerate(range(first, first + jobs, batch), start=1):
        stop = min(start + batch, first + jobs)
        body = [{"queue": QUEUE, "type": "bench", "payload": {"n": n}, **more}
                for n in range(start, stop)]  # fmt: skip
        frame = {"id": req_id, "op": "enqueue_many", "jobs": body}
        frames.append((stop - start, orjson.dumps(frame, option=_NL)))
    sizes = {req_id: n for req_id, (n, _f) in enumerate(frames, start=1)}
    try:
        client = _start(shared, socket_path, report)
        sent = 0
        outstanding = 0
        report.first_send = time.perf_counter()
        while sent < len(frames) or outstanding:
            while sent < len(frames) and outstanding < window:
                client.send(frames[sent][1])
                sent += 1
                outstanding += 1
            answer = client.read()
            outstanding -= 1
            n = sizes.pop(answer["id"])
            if not answer.get("ok") or len(answer["results"]) != n:
                report.errors.append(f"enqueue_many: {answer.get('error')}")
                break
            report.jobs += n
        report.last_answer = time.perf_counter()
        client.close()
    except (OSError, WireError, KeyError) as exc:
        report.errors.append(f"producer: {exc!r}")
    report.finish(shared)


def batch_worker(socket_path: str, total: int, max_claim: int, wait_ms: int, many: bool,
                 shared: Shared) -> None:  # fmt: skip
    """Claim up to ``max_claim`` jobs at a time and complete them: one
    ``complete_many`` per batch (``many``), else one pipelined ``complete`` each.

    Stops when ``total`` jobs have been completed by all workers together.
    """
    report = Report("worker")
    claim = {"queues": [QUEUE], "max": max_claim, "wait_ms": wait_ms}
    try:
        client = _start(shared, socket_path, report)
        while shared.done.value < total and not shared.stop.is_set():
            sent_at = time.perf_counter()
            answer = client.call("claim_next", **claim)
            answered_at = time.perf_counter()
            if not answer.get("ok"):
                report.errors.append(f"claim_next: {answer.get('error')}")
                break
            jobs = answer["jobs"]
            if not jobs:
                report.empty_claims += 1
                continue
            report.claim_latencies.append(answered_at - sent_at)
            if report.first_send is None:
                report.first_send = sent_at
            completions = [{"job_id": j["job"]["id"], "lease": j["job"]["lease"]} for j in jobs]
            if many:  # one complete_many per claimed batch (a batch completer)
                done = client.call("complete_many", jobs=completions)
                failed = [r for r in done.get("results", ()) if "error" in r]
                if not done.get("ok") or failed:
                    report.errors.append(f"complete_many: {done.get('error') or failed[:3]}")
            else:  # one complete per job, pipelined
                ids = client.request_many(("complete", c) for c in completions)
                waiting = set(ids)
                for _ in ids:
                    done = client.read()
                    waiting.discard(done["id"])
                    if not done.get("ok"):
                        report.errors.append(f"complete: {done.get('error')}")
                if waiting:
                    report.errors.append(f"complete: {len(waiting)} answers missing")
            report.last_answer = time.perf_counter()
            if report.errors:
                break
            report.jobs += len(jobs)
            _add_done(shared, len(jobs))
        client.close()
    except (OSError, WireError, KeyError) as exc:
        report.errors.append(f"worker: {exc!r}")
    report.finish(shared)


def single_client(socket_path: str, jobs: int, first: int, shared: Shared,
                  extra: dict[str, Any] | None = None) -> None:  # fmt: skip
    """``jobs`` times: enqueue one job, claim one, complete it; one request in flight.

    ``extra`` is merged into every enqueue, as in :func:`producer`.
    """
    report = Report("single")
    more = extra or {}
    claim = {"queues": [QUEUE], "max": 1, "wait_ms": 1000}
    try:
        client = _start(shared, socket_path, report)
        report.first_send = time.perf_counter()
        for n in range(first, first + jobs):
            if shared.stop.is_set():
                break
            answer = client.call("enqueue", queue=QUEUE, type="bench", payload={"n": n}, **more)
            if not answer.get("ok"):
                report.errors.append(f"enqueue: {answer.get('error')}")
                break
            while True:  # never empty in practice: this client's own job is pending
                sent_at = time.perf_counter()
                answer = client.call("claim_next", **claim)
                answered_at = time.perf_counter()
                if not answer.get("ok") or answer["jobs"] or shared.stop.is_set():
                    break
                report.empty_claims += 1
            if not answer.get("ok") or not answer["jobs"]:
                report.errors.append(f"claim_next: {answer.get('error')}")
                break
            report.claim_latencies.append(answered_at - sent_at)
            job = answer["jobs"][0]["job"]
            answer = client.call("complete", job_id=job["id"], lease=job["lease"])
            if not answer.get("ok"):
                report.errors.append(f"complete: {answer.get('error')}")
                break
            report.jobs += 1
            if report.jobs % 100 == 0:
                _add_done(shared, 100)
        report.last_answer = time.perf_counter()
        _add_done(shared, report.jobs % 100)
        client.close()
    except (OSError, WireError, KeyError) as exc:
        report.errors.append(f"single: {exc!r}")
    report.finish(shared)
