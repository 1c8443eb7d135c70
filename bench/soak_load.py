"""The load of ``bench/soak.py``: producers, workers and the ledger they write.

Producers enqueue batches in three queues (``plain``; ``budgeted``, each job
bound to a ``while_in_flight`` budget; ``windowed``, under a queue policy with
an in-flight cap and claims per hourly window), each job tagged with a
sequence number in its payload. One job in ten fails its first attempt.
Workers claim without waiting (so a claim's time is the daemon's, not an idle
wait), complete or fail, and record every delivery. A connection the daemon's
kill -9 broke is reopened until the daemon answers again.

The :class:`Ledger` is the checker's history: acknowledged enqueues (sequence
number to job id), sequence numbers sent but never answered (indeterminate),
deliveries per job with the daemon's life (kill epoch) each was in, the fails
the workers sent, and completions. From it, at the end: lost (acknowledged,
never completed), unexpected (delivered, never sent), recovered (an
indeterminate enqueue delivered later), and duplicates: a delivery of a job
not failed since its last delivery, explained when a kill fell in between.

A ``complete`` that a kill cut off before its answer is indeterminate too: if it
committed, the job is never delivered again, so the ledger would call it lost.
:meth:`Ledger.confirm` asks the daemon (``get``) about each such job still
missing, and counts it as completed, unanswered, only when the daemon says
``completed``.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from wire import WireClient, WireError

QUEUES = ("plain", "budgeted", "windowed")
BUDGET = "soak-budget"
#: One job in FAIL_EVERY fails its first attempt (retried after RETRY_MS).
FAIL_EVERY = 10
RETRY_MS = 200
BATCH = 20


class Ledger:
    """What the clients saw, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epoch = 0  # kills so far: the daemon's life a delivery falls in
        self.sent: set[int] = set()
        self.acked: dict[int, str] = {}
        self.indeterminate: set[int] = set()
        self.deliveries: dict[str, list[int]] = defaultdict(list)  # job id -> epochs
        self.failed_since: set[str] = set()  # failed by a worker, not delivered again yet
        self.fails = 0
        self.completed: set[str] = set()
        self.unanswered: set[str] = set()  # completes a kill cut off before their answer
        self.completed_unanswered: set[str] = set()  # of those, completed says the daemon
        self.duplicates = 0
        self.explained = 0
        self.unexpected = 0
        self.delivered_seqs: set[int] = set()
        self.latencies: list[float] = []  # claim calls since the sampler last took them
        self.lease_lost = 0

    def delivered(self, job: dict[str, Any]) -> None:
        """Record a delivery; classify it if it is not the job's first."""
        job_id, seq = job["id"], job["payload"]["seq"]
        with self.lock:
            if seq not in self.sent:
                self.unexpected += 1
            self.delivered_seqs.add(seq)
            seen = self.deliveries[job_id]
            if seen and job_id not in self.failed_since:
                self.duplicates += 1
                self.explained += seen[-1] != self.epoch and job_id not in self.completed
            self.failed_since.discard(job_id)
            seen.append(self.epoch)

    def counts(self) -> dict[str, int]:
        """The checker's figures."""
        with self.lock:
            acked = set(self.acked.values())
            return {
                "sent": len(self.sent),
                "acked": len(acked),
                "indeterminate": len(self.indeterminate),
                "completed": len(self.completed & acked),
                "completed_unanswered": len(self.completed_unanswered & acked),
                "lost": len(acked - self.completed - self.completed_unanswered),
                "unexpected": self.unexpected,
                "recovered": len(self.indeterminate & self.delivered_seqs),
                "deliveries": sum(len(d) for d in self.deliveries.values()),
                "fails": self.fails,
                "duplicated": self.duplicates,
                "duplicated_unexplained": self.duplicates - self.explained,
                "lease_lost": self.lease_lost,
            }

    def confirm(self, client: WireClient) -> None:
        """Ask the daemon about each missing job whose ``complete`` went unanswered."""
        with self.lock:
            missing = set(self.acked.values()) - self.completed - self.completed_unanswered
            ask = sorted(missing & self.unanswered)
        for job_id in ask:
            reply = client.call("get", job_id=job_id)
            if reply.get("ok") and reply["job"]["status"] == "completed":
                with self.lock:
                    self.completed_unanswered.add(job_id)


def _connect(socket_path: str, stop: threading.Event) -> WireClient | None:
    while not stop.is_set():
        try:
            return WireClient(socket_path, timeout=10)
        except OSError:
            time.sleep(0.1)
    return None


def setup(socket_path: str, rate: float) -> None:
    """The budget and the windowed queue's policy (again after each restart: idempotent)."""
    with WireClient(socket_path) as c:
        if not c.call("budget_get", key=BUDGET).get("ok"):
            c.ok("budget_create", key=BUDGET, allocation=4, strategy={"type": "while_in_flight"})
        per_hour = min(int(rate * 3600), 1_000_000)  # above the queue's share: it drains
        c.ok("policy_set", queue="windowed", max_in_flight=8, max_claims_per_window=per_hour,
             window={"period": "hour", "tz": "UTC", "start": "00:00"})  # fmt: skip


def _job(seq: int) -> dict[str, Any]:
    queue = QUEUES[0] if seq % 10 < 7 else QUEUES[1] if seq % 10 < 9 else QUEUES[2]
    job: dict[str, Any] = {"queue": queue, "type": "soak", "payload": {"seq": seq}}
    if queue == "budgeted":
        job["budgets"] = [{"key": BUDGET}]
    return job


def producer(socket_path: str, ledger: Ledger, first: int, step: int, rate: float,
             stop: threading.Event) -> None:  # fmt: skip
    """Enqueue batches of sequence numbers ``first, first+step, ...`` at ``rate`` jobs/s."""
    seq, began, sent = first, time.monotonic(), 0
    client = _connect(socket_path, stop)
    while client is not None and not stop.is_set():
        ahead = began + sent / rate - time.monotonic()
        if ahead > 0:
            time.sleep(min(ahead, 0.5))
            continue
        seqs = [seq + i * step for i in range(BATCH)]
        seq += BATCH * step  # a batch left indeterminate is not sent again: new jobs follow
        sent += BATCH
        with ledger.lock:
            ledger.sent.update(seqs)
        try:
            results = client.ok("enqueue_many", jobs=[_job(s) for s in seqs])["results"]
        except (OSError, WireError):
            with ledger.lock:
                ledger.indeterminate.update(seqs)
            client.close()
            client = _connect(socket_path, stop)
            continue
        with ledger.lock:
            for s, r in zip(seqs, results, strict=True):
                ledger.acked[s] = r["job"]["id"]
    if client is not None:
        client.close()


def worker(socket_path: str, ledger: Ledger, stop: threading.Event) -> None:
    """Claim (no wait), then complete or fail each job, until ``stop``."""
    client = _connect(socket_path, stop)
    while client is not None and not stop.is_set():
        try:
            began = time.perf_counter()
            jobs = client.ok("claim_next", queues=list(QUEUES), max=10)["jobs"]
            elapsed = time.perf_counter() - began
            with ledger.lock:
                ledger.latencies.append(elapsed)
            if not jobs:
                time.sleep(0.01)
            for item in jobs:
                _finish(client, ledger, item["job"])
        except (OSError, WireError):
            client.close()
            client = _connect(socket_path, stop)
    if client is not None:
        client.close()


def _finish(client: WireClient, ledger: Ledger, job: dict[str, Any]) -> None:
    ledger.delivered(job)
    job_id, lease = job["id"], job["lease"]
    if job["payload"]["seq"] % FAIL_EVERY == 3 and job["attempts"] <= 1:
        answer = client.call("fail", job_id=job_id, lease=lease, error="soak: first attempt",
                             retry_in_ms=RETRY_MS)  # fmt: skip
        if answer.get("ok"):
            with ledger.lock:
                ledger.fails += 1
                ledger.failed_since.add(job_id)
            return
    else:
        try:
            answer = client.call("complete", job_id=job_id, lease=lease)
        except (OSError, WireError):
            with ledger.lock:
                ledger.unanswered.add(job_id)
            raise
        if answer.get("ok"):
            with ledger.lock:
                ledger.completed.add(job_id)
            return
    if (answer.get("error") or {}).get("code") == "lease_lost":
        with ledger.lock:
            ledger.lease_lost += 1
    else:
        raise WireError(f"finish refused: {answer.get('error')}")
