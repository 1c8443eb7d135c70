"""A worker process for the SIGSTOP test (tests/chaos/test_sigstop.py).

``python -m tests.chaos.stopped_worker SOCKET QUEUE LEASE_MS GO_FILE``: claims one
job, then heartbeats its lease every tenth of a second until ``GO_FILE`` exists
(or a heartbeat is refused), then completes it, as a naive worker that was
frozen would. Each step is one JSON line on stdout with the wall time ``t``
(ms): ``claimed`` (the job), ``heartbeat`` (the new expiry), ``complete`` (the
answer frame).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.support import RawClient


def say(**line: object) -> None:
    print(json.dumps({"t": int(time.time() * 1000), **line}), flush=True)


def main(socket: str, queue: str, lease_ms: int, go: Path) -> None:
    with RawClient(socket) as client:
        jobs = []
        while not jobs:
            jobs = client.ok("claim_next", queues=[queue], lease_ms=lease_ms, wait_ms=1000)["jobs"]
        job = jobs[0]["job"]
        say(op="claimed", job=job)
        while not go.exists():
            beat = client.call("heartbeat", job_id=job["id"], lease=job["lease"],
                               lease_ms=lease_ms)  # fmt: skip
            if not beat["ok"]:
                break
            say(op="heartbeat", lease_expires_at=beat["lease_expires_at"])
            time.sleep(0.1)
        say(op="complete", answer=client.call("complete", job_id=job["id"], lease=job["lease"]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
