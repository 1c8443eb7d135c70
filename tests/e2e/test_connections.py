"""Connection floods and idle connections on a real ``sluice serve`` (issue 13, item 6).

With a shell's soft limit of 1024 open files, 2,000 idle socket connections
used to lock the daemon out: new clients and /healthz timed out and the log
repeated ``accept failed`` with tracebacks ten times a second. The daemon now
raises its soft limit, caps connections (one ``unavailable`` line over the
cap), closes idle connections, and logs one line per episode.

The daemon's limits are set in the child before exec (``preexec_fn``); this
test process raises its own soft limit to hold thousands of sockets. Waits are
for events (a closed connection, a gauge), never for an amount of time.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support import DaemonProcess, RawClient, metric, wait_until

UNAVAILABLE = {
    "id": None,
    "ok": False,
    "error": {"code": "unavailable", "message": "too many connections", "status": 503},
}
NEEDED_FDS = 4600  # 2,000 clients, the daemon's log, httpx, pytest: with room


@pytest.fixture
def many_fds() -> Iterator[int]:
    """Raise this process's soft open-file limit; yield the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < NEEDED_FDS:
        pytest.skip(f"hard open-file limit {hard} < {NEEDED_FDS}")
    if soft != resource.RLIM_INFINITY and soft < NEEDED_FDS:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NEEDED_FDS, hard))
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def nofile(soft: int, hard: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving the daemon these open-file limits."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_connections(daemon: DaemonProcess) -> float:
    return metric(daemon.metrics(), "sluicegate_socket_connections") or 0


def connect_many(daemon: DaemonProcess, n: int, clients: list[RawClient]) -> None:
    """Open ``n`` connections, in order; a full listen backlog (EAGAIN on a unix
    socket) is waited out, as a client library would."""

    def connect() -> RawClient | None:
        try:
            return RawClient(daemon.socket, timeout=30)
        except BlockingIOError:
            return None

    for _ in range(n):
        clients.append(wait_until(connect, timeout=30, interval=0.005, what="a backlog slot"))


def close_all(clients: list[RawClient]) -> None:
    for client in clients:
        client.close()
    clients.clear()


def healthz(daemon: DaemonProcess) -> int:
    with daemon.http() as http:
        return http.get("/healthz").status_code


def test_2000_connections_at_a_soft_limit_of_1024(
    make_daemon: Callable[..., DaemonProcess], many_fds: int
):
    daemon = make_daemon("max_connections = 2000\n", start=False)
    daemon.start(preexec_fn=nofile(1024, many_fds))
    wait_until(lambda: open_connections(daemon) == 0, what="the readiness probe's close")
    clients: list[RawClient] = []
    try:
        connect_many(daemon, 2000, clients)
        # Every one of the 2,000 is served (the soft limit was raised)...
        for client in clients:
            assert client.ok("status")["namespace"] == "default"
        # ...and the next one is over the cap: one line, then closed.
        with RawClient(daemon.socket) as over:
            assert over.read_until_closed(timeout=30) == [UNAVAILABLE]
        assert healthz(daemon) == 200
        assert clients[0].ok("status")["ok"]
        samples = daemon.metrics()
        assert metric(samples, "sluicegate_socket_connections") == 2000
        assert metric(samples, "sluicegate_socket_connections_refused_total") == 1
        # One line when the cap is hit; one when it clears, with the count.
        close_all(clients)
        wait_until(lambda: "connection cap cleared" in daemon.log_text(), timeout=30)
    finally:
        close_all(clients)
    log = daemon.log_text()
    assert log.count("connection cap reached") == 1, log
    assert log.count("connection cap cleared") == 1
    assert "1 connections refused" in log
    assert "accept failed" not in log and "Traceback" not in log


def test_a_flood_past_a_hard_limit_of_1024_is_refused_and_the_daemon_keeps_serving(
    make_daemon: Callable[..., DaemonProcess], many_fds: int
):
    """The soft limit cannot rise: the derived cap keeps a reserve for the store
    and HTTP, so /healthz and the clients already connected keep working."""
    daemon = make_daemon(start=False)
    daemon.start(preexec_fn=nofile(1024, 1024))
    samples = daemon.metrics()
    cap = metric(samples, "sluicegate_socket_connections_max")
    assert cap is not None and 0 < cap < 1024
    wait_until(lambda: open_connections(daemon) == 0, what="the readiness probe's close")
    clients: list[RawClient] = []
    try:
        connect_many(daemon, 1200, clients)
        # Accepted in connection order: the first `cap` are served, the rest refused.
        for client in clients[int(cap) :]:
            assert client.read_until_closed(timeout=30) == [UNAVAILABLE]
        for client in clients[: int(cap)]:
            assert client.ok("status")["ok"]
        assert healthz(daemon) == 200
        assert clients[0].ok("status")["ok"]
        assert clients[int(cap) - 1].ok("status")["ok"]
    finally:
        close_all(clients)
    log = daemon.log_text()
    assert log.count("connection cap reached") == 1, log
    assert "accept failed" not in log and "Traceback" not in log


def test_an_idle_connection_is_closed(make_daemon: Callable[..., DaemonProcess], connect):
    daemon = make_daemon('idle_timeout = "1s"\n')
    silent = connect(daemon)
    assert silent.read_until_closed(timeout=30) == []
    talked = connect(daemon)
    talked.ok("status")
    assert talked.read_until_closed(timeout=30) == []
    wait_until(lambda: open_connections(daemon) == 0, timeout=30)


def test_many_idle_connections_are_all_cut_and_a_talking_one_stays(
    make_daemon: Callable[..., DaemonProcess], connect
):
    """One sweeper for every connection (daemon/transport/idle.py): a crowd of
    silent connections is cut, each about its own timeout, while one that
    talks more often than the timeout keeps its connection past several."""
    daemon = make_daemon('idle_timeout = "1s"\n')
    silent = [connect(daemon) for _ in range(40)]
    talker = connect(daemon)
    for _ in range(5):  # 5 x 0.5 s: well past the 1 s timeout, never idle that long
        assert talker.ok("status")["ok"]
        time.sleep(0.5)
    for conn in silent:
        assert conn.read_until_closed(timeout=30) == []
    assert talker.ok("status")["ok"]


def test_a_waiting_claim_is_not_idle(make_daemon: Callable[..., DaemonProcess], connect):
    daemon = make_daemon('idle_timeout = "1s"\n')
    worker = connect(daemon, timeout=120)
    waiting = worker.request("claim_next", queues=["q"], wait_ms=60_000)
    wait_until(lambda: daemon.waiting_claims() == 1, what="the claim to wait")
    # A connection opened after the claim began is cut as idle; the worker's
    # claim has waited longer than that, and is still there.
    later = connect(daemon)
    assert later.read_until_closed(timeout=30) == []
    producer = connect(daemon)
    job = producer.ok("enqueue", queue="q", type="t")["job"]
    answer = worker.answer(waiting)
    assert answer["ok"] and [j["job"]["id"] for j in answer["jobs"]] == [job["id"]]
    # Once the claim is answered the worker's connection may go idle too.
    assert worker.read_until_closed(timeout=30) == []


def test_a_subscriber_is_not_idle(make_daemon: Callable[..., DaemonProcess], connect):
    daemon = make_daemon('idle_timeout = "1s"\n')
    subscriber = connect(daemon)
    subscriber.ok("subscribe", queues=["q"])
    later = connect(daemon)
    assert later.read_until_closed(timeout=30) == []
    assert subscriber.ok("status")["ok"]


def test_idle_timeout_zero_never_closes(make_daemon: Callable[..., DaemonProcess], connect):
    daemon = make_daemon("idle_timeout = 0\n")
    quiet = connect(daemon)
    quiet.ok("status")
    # Nothing to wait for but the absence of an event: check the connection
    # outlives a short-timeout daemon's idle cut, on that daemon's own clock.
    other = make_daemon('idle_timeout = "1s"\n')
    assert connect(other).read_until_closed(timeout=30) == []
    assert quiet.ok("status")["ok"]
