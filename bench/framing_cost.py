"""What framing, parsing and answer encoding cost a request: design (c)'s ceiling.

Issue 16's design (c) moves framing and JSON to a second thread or process.
The most it could take off the event loop is what that work costs, measured
here without the loop: the one-at-a-time path's three requests (``enqueue``,
``claim_next`` of one, ``complete``), each a frame fed to the daemon's
:class:`~daemon.transport.framing.LineFramer` and its full answer (a job
object) encoded by :func:`~daemon.transport.framing.encode_ok`, timed by the
thread's CPU. Compare it with the daemon's CPU a request in
``bench/throughput.py --phases single`` (its µs a job over three).

    .venv/bin/python bench/framing_cost.py [--requests 60000] [--repeat 5]

Prints µs a request; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import orjson

from daemon.transport.framing import LineFramer, encode_ok

JOB = {
    "id": "01JE0000000000000000000000", "namespace": "default", "queue": "bench",
    "type": "bench", "payload": {"n": 12345}, "priority": 32768, "status": "running",
    "attempts": 1, "max_attempts": 25, "ready_at": 1764700000000,
    "created_at": 1764700000000, "lease": "01JE0000000000000000000001",
    "lease_expires_at": 1764700030000, "budgets": [], "unique_key": None, "error": None,
    "result": None, "dead": None, "admission": None,
}  # fmt: skip
FRAMES = [
    {"id": 1, "op": "enqueue", "args": {"queue": "bench", "type": "bench", "payload": {"n": 1}}},
    {"id": 2, "op": "claim_next", "args": {"queues": ["bench"], "max": 1}},
    {"id": 3, "op": "complete", "args": {"job_id": JOB["id"], "lease": JOB["lease"]}},
]
ANSWERS = [
    {"job": {**JOB, "status": "pending", "lease": None, "lease_expires_at": None}},
    {"jobs": [{"job": JOB}]},
    {"job": {**JOB, "status": "completed", "lease": None}},
]


def one_run(requests: int) -> float:
    """µs of CPU a request over ``requests`` requests (three verbs in turn)."""
    framer = LineFramer(1 << 20)
    lines = [orjson.dumps(f) + b"\n" for f in FRAMES]
    rounds = max(1, requests // len(lines))
    began = time.thread_time()
    for _ in range(rounds):
        for line, answer in zip(lines, ANSWERS, strict=True):
            (event,) = framer.feed(line)
            encode_ok(event.id, answer)  # type: ignore[union-attr]
    return (time.thread_time() - began) / (rounds * len(lines)) * 1e6


def main() -> int:
    """Parse, run, print."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=60_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    runs = [one_run(args.requests) for _ in range(args.repeat)]
    print(f"framing, parsing and answer encoding: {statistics.median(runs):.1f} µs a request "
          f"(median of {len(runs)}: {', '.join(f'{r:.1f}' for r in runs)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
