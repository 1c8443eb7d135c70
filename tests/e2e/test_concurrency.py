"""Many clients at once: racing claims, and a client that stops reading."""

from __future__ import annotations

import fcntl
import struct
import termios
import threading
import time
from collections import Counter

import pytest

from tests.support import RawClient, wait_until

pytestmark = pytest.mark.e2e

N_CLIENTS = 20
N_JOBS = 100


def test_twenty_connections_racing_claim_each_job_exactly_once(daemon, connect):
    producer = connect(daemon)
    # Half the jobs exist before the race, half arrive while claims wait.
    producer.ok("enqueue_many", jobs=[{"queue": "q", "type": "t"}] * (N_JOBS // 2))
    start = threading.Barrier(N_CLIENTS + 1)
    produced = threading.Event()
    claimed: list[list[str]] = [[] for _ in range(N_CLIENTS)]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with RawClient(daemon.socket) as c:
                start.wait(10)
                while True:
                    done = produced.is_set()
                    got = c.ok("claim_next", queues=["q"], max=1 + i % 3, wait_ms=200)
                    claimed[i].extend(j["job"]["id"] for j in got["jobs"])
                    if got["empty"] and done:
                        return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(N_CLIENTS)]
    for t in threads:
        t.start()
    start.wait(10)
    for _ in range(N_JOBS // 10):
        producer.ok("enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 5)
    produced.set()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    every = [job_id for ids in claimed for job_id in ids]
    counts = Counter(every)
    assert [job_id for job_id, n in counts.items() if n > 1] == []
    assert len(counts) == N_JOBS
    assert sum(1 for ids in claimed if ids) > 1  # it was a race, not one client's run
    (row,) = producer.ok("status")["queues"]
    assert (row["pending"], row["running"]) == (0, N_JOBS)
    assert {j["attempts"] for j in producer.ok("list", limit=1000)["jobs"]} == {1}


def _unread_bytes(sock) -> int:
    buf = fcntl.ioctl(sock.fileno(), termios.FIONREAD, struct.pack("i", 0))
    return struct.unpack("i", buf)[0]


def test_client_that_stops_reading_does_not_stall_others(make_daemon, connect):
    daemon = make_daemon("max_send_buffer_bytes = 4194304\n")
    y, x = connect(daemon), connect(daemon)
    big = y.ok("enqueue", queue="big", type="t", payload="x" * 60_000)["job"]["id"]
    request = b'{"id":1,"op":"get","job_id":"%s"}\n' % big.encode()

    # Phase 1: X asks for ~2.4 MB of answers and reads none: the kernel buffers
    # between the daemon and X fill up and the daemon's writes to X block.
    x.sock.sendall(request * 40)
    wait_until(lambda: _unread_bytes(x.sock) > 100_000, what="X's socket buffer to fill")

    # Y is served promptly all the while.
    for i in range(20):
        started = time.monotonic()
        job_id = y.ok("enqueue", queue="work", type="t", payload={"i": i})["job"]["id"]
        lease = y.ok("claim", job_id=job_id)["job"]["lease"]
        y.ok("complete", job_id=job_id, lease=lease)
        assert time.monotonic() - started < 2, f"round trip {i} stalled"
    # ...while X was still connected (a unix socket whose peer closed refuses sends).
    x.sock.sendall(b'{"id":2,"op":"status"}\n')

    # Phase 2: X keeps pipelining until the daemon has had enough and cuts it off.
    try:
        for _ in range(2000):
            x.sock.sendall(request * 10)
    except (BrokenPipeError, ConnectionResetError):
        pass
    frames = x.read_until_closed(timeout=10)
    assert len(frames) < 40  # cut off with most of even phase 1's answers unsent
    assert all(f.get("ok") for f in frames)

    # Y never noticed.
    job_id = y.ok("enqueue", queue="work", type="t")["job"]["id"]
    assert y.ok("claim_next", queues=["work"])["jobs"][0]["job"]["id"] == job_id
    assert y.ok("status")["queues"][1]["completed"] == 20
