"""A workload against a real daemon that records a :class:`~tests.chaos.history.History`:
producer and worker threads on raw sockets, and a nemesis that kills and restarts
the daemon (``kill -9``) at seeded random instants.

Producers enqueue batches (``enqueue_many``) of jobs named by a key in their
payload; workers claim (``claim_next``) and complete. A lost connection makes the
operations in flight indeterminate (*info*) and the thread reconnects once the
daemon is back; a refusal is a definite *fail* (a refused call writes nothing).
At the end the daemon is drained and its final state read (key -> status).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.chaos.history import COMPLETE, FAIL, INFO, OK, History
from tests.support import DaemonProcess, RawClient

#: What a lost daemon looks like to a raw client.
LOST = (OSError, ConnectionError, ValueError)


class Workload:
    """Producers, workers and the drain, recording into ``history``."""

    def __init__(
        self,
        daemon: DaemonProcess,
        history: History,
        *,
        jobs: int,
        queues: tuple[str, ...] = ("q0", "q1"),
        producers: int = 2,
        workers: int = 3,
        batch: int = 20,
        claim_max: int = 10,
        lease_ms: int = 2000,
        job_args: Callable[[str], dict[str, Any]] | None = None,
        groups: Callable[[dict[str, Any]], tuple[str, ...]] | None = None,
        name: str = "",
        hold_s: float = 0.0,
    ) -> None:
        """``job_args(key)``: more arguments of each job (budgets); ``groups(job)``:
        the limits a delivered job counts in (default: its queue); ``name``
        prefixes its threads' names and so its keys (two workloads, one history);
        ``hold_s``: how long a worker works on what it claimed before completing."""
        self.daemon = daemon
        self.history = history
        self.name = name
        self.jobs = jobs
        self.queues = list(queues)
        self.batch = batch
        self.claim_max = claim_max
        self.lease_ms = lease_ms
        self.job_args = job_args or (lambda _key: {})
        self.groups = groups or (lambda _job: ())
        self.hold_s = hold_s
        self.acked = 0
        self._produced = 0
        self._lock = threading.Lock()
        self.stop_producing = threading.Event()
        self.stop_working = threading.Event()
        self.errors: list[BaseException] = []
        #: (verb, code) -> refusals the daemon answered (the clean ones of a fault).
        self.refusals: Counter[tuple[str, str]] = Counter()
        #: Connections to the daemon lost mid-call (a crash; never a refusal).
        self.drops = 0
        self._producers = [
            threading.Thread(target=self._guard, args=(self._produce, f"{name}p{i}"), daemon=True)
            for i in range(producers)
        ]
        self._threads = self._producers + [
            threading.Thread(target=self._guard, args=(self._work, f"{name}w{i}"), daemon=True)
            for i in range(workers)
        ]

    # -- threads ---------------------------------------------------------------

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _guard(self, fn: Callable[[str], None], name: str) -> None:
        try:
            fn(name)
        except BaseException as exc:  # a bug of the harness: the test fails on it
            self.errors.append(exc)

    def _connect(self, stop: threading.Event) -> RawClient | None:
        """A client once the daemon answers (it may be restarting); None when stopped."""
        while not stop.is_set():
            try:
                return RawClient(self.daemon.socket, timeout=10)
            except OSError:
                time.sleep(0.02)
        return None

    def _produce(self, name: str) -> None:
        client = None
        n = 0
        while not self.stop_producing.is_set():
            with self._lock:
                if self._produced >= self.jobs:
                    break
                size = min(self.batch, self.jobs - self._produced)
                self._produced += size
            client = client or self._connect(self.stop_producing)
            if client is None:
                break
            queues = self.queues
            invokes = [self.history.enqueue(name, f"{name}-{i}", queues[i % len(queues)])
                       for i in range(n, n + size)]  # fmt: skip
            n += size
            items = [{"queue": op.queue, "type": "t", "payload": {"k": op.key},
                      **self.job_args(op.key)} for op in invokes]  # fmt: skip
            try:
                frame = client.call("enqueue_many", jobs=items)
            except LOST as exc:
                for op in invokes:
                    self.history.enqueued(op, INFO, error=repr(exc))
                with self._lock:
                    self._produced -= size  # indeterminate: made again under new keys
                    self.drops += 1
                client.close()
                client = None
                continue
            if frame["ok"]:
                for op, result in zip(invokes, frame["results"], strict=True):
                    self.history.enqueued(op, OK, result["job"])
                with self._lock:
                    self.acked += len(invokes)
            else:
                for op in invokes:
                    self.history.enqueued(op, FAIL, error=frame["error"]["code"])
                with self._lock:
                    self._produced -= size  # refused: made again under new keys
                    self.refusals["enqueue_many", frame["error"]["code"]] += 1
        if client is not None:
            client.close()

    def _work(self, name: str) -> None:
        client = None
        while not self.stop_working.is_set():
            client = client or self._connect(self.stop_working)
            if client is None:
                return
            try:
                self._work_once(name, client)
            except LOST:
                with self._lock:
                    self.drops += 1
                client.close()
                client = None
        if client is not None:
            client.close()

    def _work_once(self, name: str, client: RawClient) -> None:
        frame = client.call(
            "claim_next", queues=self.queues, max=self.claim_max, lease_ms=self.lease_ms,
            wait_ms=100,
        )  # fmt: skip
        if not frame["ok"]:
            with self._lock:
                self.refusals["claim_next", frame["error"]["code"]] += 1
            time.sleep(0.05)  # unavailable, shutting down: try again
            return
        jobs = [entry["job"] for entry in frame["jobs"]]
        for job in jobs:
            self.history.claimed(name, job, self.groups(job))
        if jobs and self.hold_s:
            time.sleep(self.hold_s)  # the work
        self.settle(name, client, jobs)

    def settle(self, name: str, client: RawClient, jobs: list[dict[str, Any]]) -> None:
        """Complete ``jobs`` (pipelined: the answers may come in any order); a
        lost daemon makes the unanswered ones indeterminate."""
        invokes = [self.history.finish(name, COMPLETE, job) for job in jobs]
        unanswered = dict(enumerate(invokes))
        try:
            sent = {client.request("complete", job_id=job["id"], lease=job["lease"]): i
                    for i, job in enumerate(jobs)}  # fmt: skip
            while unanswered:
                frame = client.read()
                if "event" in frame and "id" not in frame:
                    continue
                op = unanswered.pop(sent[frame["id"]])
                error = None if frame["ok"] else frame["error"]["code"]
                self.history.finished(op, OK if error is None else FAIL, error=error)
                if error is not None:
                    with self._lock:
                        self.refusals["complete", error] += 1
        except LOST as exc:
            for op in unanswered.values():
                self.history.finished(op, INFO, error=repr(exc))
            raise

    # -- the end -----------------------------------------------------------------

    def producing(self) -> bool:
        """Whether a producer is still at work."""
        return any(thread.is_alive() for thread in self._producers)

    def more(self, n: int) -> None:
        """``n`` jobs more, made by a new producer (under keys of its own)."""
        with self._lock:
            self.jobs += n
        name = f"{self.name}p{len(self._producers)}"
        thread = threading.Thread(target=self._guard, args=(self._produce, name), daemon=True)
        self._producers.append(thread)
        thread.start()

    def wait_produced(self, timeout: float) -> None:
        """Wait until the producers are done (every job acknowledged)."""
        deadline = time.monotonic() + timeout
        for thread in self._producers:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._check_errors()
        if any(t.is_alive() for t in self._producers):
            raise AssertionError(f"{self.acked} of {self.jobs} acknowledged in {timeout}s")

    def drain(self, timeout: float, unfinished: Callable[[], int] | None = None) -> None:
        """Wait until no job is scheduled, pending or running (``unfinished``
        counts them; default: the daemon's ``status``); stop the workers."""
        deadline = time.monotonic() + timeout
        unfinished = unfinished or self._unfinished
        try:
            while time.monotonic() < deadline:
                self._check_errors()
                if unfinished() == 0:
                    return
                time.sleep(0.2)
            raise AssertionError(f"not drained after {timeout}s: {unfinished()} left")
        finally:
            self.stop_working.set()
            for thread in self._threads:
                thread.join(30)
            self._check_errors()

    def _unfinished(self) -> int:
        try:
            with RawClient(self.daemon.socket) as c:
                rows = c.ok("status")["queues"]
        except LOST:
            return -1
        return sum(r[s] for r in rows for s in ("scheduled", "pending", "running"))

    def _check_errors(self) -> None:
        if self.errors:
            raise self.errors[0]

    def final_state(self) -> dict[str, str]:
        """key -> status of every job in the store now."""
        state: dict[str, str] = {}
        with RawClient(self.daemon.socket) as c:
            after = None
            while True:
                page = c.ok("list", limit=1000, **({"after": after} if after else {}))
                for job in page["jobs"]:
                    key = (job.get("payload") or {}).get("k")
                    if key is not None:
                        state[key] = job["status"]
                if not (after := page["next"]):
                    return state


def storm(daemon: DaemonProcess, workload: Workload, rng: random.Random, kills: int,
          timeout: float) -> int:  # fmt: skip
    """Kill -9 and restart ``daemon`` ``kills`` times while ``workload`` produces
    (:func:`faults`). Returns the kills done."""
    return faults(workload, rng, kills, timeout,
                  lambda _i: crash_and_restart(daemon, workload.history))  # fmt: skip


def faults(workload: Workload, rng: random.Random, count: int, timeout: float,
           fault: Callable[[int], object]) -> int:  # fmt: skip
    """Run ``fault(i)`` ``count`` times while ``workload`` produces: the i-th once
    the i-th of ``count`` seeded random job counts is acknowledged, after a
    seeded random delay of up to 50 ms. Returns the faults done."""
    thresholds = sorted(rng.randrange(workload.jobs) for _ in range(count))
    deadline = time.monotonic() + timeout
    done = 0
    for threshold in thresholds:
        while workload.acked < threshold:
            workload._check_errors()
            if time.monotonic() > deadline:
                raise AssertionError(f"{workload.acked} of {workload.jobs} acknowledged in time")
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))
        fault(done)
        done += 1
    return done


def crash_and_restart(daemon: DaemonProcess, history: History) -> None:
    """``kill -9`` the daemon and start it again on the same state."""
    daemon.kill()
    history.crash()
    daemon.start(timeout=60)
    history.restart()
