"""The Python SDK: retry policy, typed errors, both clients, and the worker.

Retry timing runs on pytest-trio's ``autojump_clock`` against an in-memory
fake daemon, so backoff is asserted in virtual seconds. Everything else talks
to a real ``sluice serve`` (the ``daemon`` fixture) and waits for events,
never for time.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import socket
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from daemon.client import (
    Client,
    Conflict,
    ConnectionLost,
    Forbidden,
    FrameTooLarge,
    InvalidArgument,
    LeaseLost,
    NotFound,
    QueueFull,
    QuotaExceeded,
    RateLimited,
    RetryPolicy,
    ShuttingDown,
    SluicegateError,
    TooManyWaiters,
    TrioClient,
    TrioJob,
    Unauthenticated,
    Worker,
    error_from_wire,
    resolve_socket,
)
from daemon.config import ConfigError
from daemon.sdk.protocol import Answer, ClientProtocol, Orphaned, PushEvent
from tests.support import DaemonProcess, RawClient

# -- the retry policy (pure) ---------------------------------------------------


def test_backoff_doubles_from_500ms_to_a_30s_cap_with_20_percent_jitter():
    policy = RetryPolicy(rng=random.Random(7))
    twin = random.Random(7)
    expected = [min(30.0, 0.5 * 2 ** (n - 1)) * twin.uniform(0.8, 1.2) for n in range(1, 12)]
    assert [policy.delay(n) for n in range(1, 12)] == pytest.approx(expected)
    # Nominal 0.5, 1, 2, 4 ... 16, then the cap: every delay within ±20% of it.
    for n, delay in enumerate(expected, start=1):
        nominal = min(30.0, 0.5 * 2 ** (n - 1))
        assert nominal * 0.8 <= delay <= nominal * 1.2
    assert RetryPolicy(jitter=0).delay(100) == 30.0


def test_retry_after_is_honoured_with_the_same_jitter():
    policy = RetryPolicy(rng=random.Random(3))
    twin = random.Random(3)
    assert policy.delay(1, retry_after=5) == pytest.approx(5 * twin.uniform(0.8, 1.2))
    assert policy.delay(9, retry_after=2) == pytest.approx(2 * twin.uniform(0.8, 1.2))
    spread = [RetryPolicy(rng=random.Random(s)).delay(4, retry_after=10) for s in range(200)]
    assert 8 <= min(spread) < 8.5 and 11.5 < max(spread) <= 12


def test_only_429_is_retried_10_times_or_forever_for_a_waiting_claim():
    policy = RetryPolicy()
    full = error_from_wire({"code": "queue_full", "message": "m", "status": 429})
    quota = error_from_wire({"code": "quota_exceeded", "message": "m", "status": 403})
    assert policy.should_retry(full, 9) and not policy.should_retry(full, 10)
    assert policy.should_retry(full, 10_000, waiting=True)
    assert not policy.should_retry(quota, 1)
    assert not policy.should_retry(ValueError("x"), 1)
    # One setting changes both.
    three = RetryPolicy(max_attempts=3)
    assert three.limit(waiting=False) == three.limit(waiting=True) == 3
    assert not three.should_retry(full, 3, waiting=True)
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_errors_are_typed_by_code_and_by_status_for_unknown_codes():
    err = error_from_wire(
        {
            "code": "rate_limited",
            "message": "request rate limit exceeded",
            "status": 429,
            "retry_after": 3,
            "limit": "request_rate",
        }
    )
    assert isinstance(err, RateLimited) and err.retryable
    assert (err.code, err.retry_after, err.limit) == ("rate_limited", 3, "request_rate")
    assert isinstance(error_from_wire({"code": "queue_full", "status": 429}), RateLimited)
    assert isinstance(error_from_wire({"code": "too_many_waiters", "status": 429}), RateLimited)
    assert type(error_from_wire({"code": "lease_lost", "status": 409})) is LeaseLost
    assert type(error_from_wire({"code": "shutting_down", "status": 503})) is ShuttingDown
    future = error_from_wire({"code": "brand_new", "message": "m", "status": 429})
    assert isinstance(future, RateLimited) and future.code == "brand_new"
    odd = error_from_wire({"code": "x", "status": 418})
    assert type(odd) is SluicegateError and not odd.retryable
    invalid = error_from_wire({"code": "invalid_argument", "status": 422, "field": "priority"})
    assert isinstance(invalid, InvalidArgument) and invalid.field == "priority"


# -- the sans-IO core ------------------------------------------------------------


def _frame(**fields: Any) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_protocol_routes_answers_by_id_and_releases_what_an_abandoned_claim_took():
    proto = ClientProtocol()
    claim_id, line = proto.request("claim_next", {"queues": ["q"], "wait_ms": 1000})
    assert json.loads(line) == {
        "id": claim_id,
        "op": "claim_next",
        "queues": ["q"],
        "wait_ms": 1000,
    }
    status_id, _ = proto.request("status", {})
    # Out of order, split across reads, with an event in between.
    data = _frame(id=status_id, ok=True, queues=[]) + _frame(event="doorbell", queue="q", pending=1)
    items = proto.feed(data[:10]) + proto.feed(data[10:])
    assert isinstance(items[0], Answer) and items[0].req_id == status_id
    assert items[0].result() == {"queues": []}
    assert isinstance(items[1], PushEvent) and items[1].frame["queue"] == "q"
    proto.abandon(claim_id)
    job = {"id": "j1", "lease": "abc"}
    (orphaned,) = proto.feed(_frame(id=claim_id, ok=True, jobs=[{"job": job}], empty=False))
    assert orphaned == Orphaned([job])
    releases = [json.loads(x) for x in proto.release_orphans(orphaned.jobs).splitlines()]
    assert [(r["op"], r["job_id"], r["lease"], r["answer"]) for r in releases] == [
        ("release", "j1", "abc", "minimal")]  # fmt: skip
    # The release answers are dropped: nobody waits for them.
    assert proto.feed(_frame(id=releases[0]["id"], ok=True, job=job)) == []
    assert proto.outstanding == 0


def test_socket_resolution_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLUICEGATE_SOCKET", raising=False)
    monkeypatch.delenv("SLUICEGATE_CONFIG", raising=False)
    assert str(resolve_socket()) == "sluicegate-data/sluicegate.sock"
    (tmp_path / "sluicegate.toml").write_text('[daemon]\nstate_dir = "/srv/sg"\n')
    assert str(resolve_socket()) == "/srv/sg/sluicegate.sock"
    other = tmp_path / "other.toml"
    other.write_text('[daemon]\nsocket = "/run/sg.sock"\n[quotas.x]\nnonsense = 1\n')
    monkeypatch.setenv("SLUICEGATE_CONFIG", str(other))
    assert str(resolve_socket()) == "/run/sg.sock"
    assert str(resolve_socket(config=tmp_path / "sluicegate.toml")) == "/srv/sg/sluicegate.sock"
    monkeypatch.setenv("SLUICEGATE_SOCKET", "/env.sock")
    assert str(resolve_socket(config=other)) == "/env.sock"
    assert str(resolve_socket("/explicit.sock")) == "/explicit.sock"
    monkeypatch.delenv("SLUICEGATE_SOCKET")
    (tmp_path / "broken.toml").write_text("[daemon\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve_socket(config=tmp_path / "broken.toml")


# -- retries, on a virtual clock -----------------------------------------------


async def _fake_daemon(
    stream: trio.abc.Stream, answers: list[dict[str, Any]], seen: list[tuple[float, dict]]
) -> None:
    """Answer each request with the next of ``answers``, noting when it came."""
    buf = b""
    for answer in answers:
        while b"\n" not in buf:
            buf += await stream.receive_some(65536)
        line, buf = buf.split(b"\n", 1)
        request = json.loads(line)
        seen.append((trio.current_time(), request))
        await stream.send_all(_frame(id=request["id"], **answer))


def _refusal(code: str, **details: Any) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": code, "status": 429, **details}}


async def test_trio_client_retries_a_429_after_retry_after_with_jitter(autojump_clock):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    answers = [_refusal("rate_limited", retry_after=3)] * 2 + [
        {"ok": True, "job": {"id": "j"}, "duplicate": False, "folded": False, "shed": False}
    ]
    seen: list[tuple[float, dict]] = []
    twin = random.Random(11)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fake_daemon, server_stream, answers, seen)
            retry = RetryPolicy(rng=random.Random(11))
            async with TrioClient.over(client_stream, retry=retry) as client:
                result = await client.enqueue("q", "t", {"n": 1})
    assert result["job"] == {"id": "j"}
    assert [r["op"] for _, r in seen] == ["enqueue"] * 3
    gaps = [seen[1][0] - seen[0][0], seen[2][0] - seen[1][0]]
    assert gaps == pytest.approx([3 * twin.uniform(0.8, 1.2), 3 * twin.uniform(0.8, 1.2)])


async def test_trio_client_gives_up_after_max_attempts_with_exponential_backoff(autojump_clock):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    seen: list[tuple[float, dict]] = []
    twin = random.Random(5)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fake_daemon, server_stream, [_refusal("queue_full")] * 3, seen)
            retry = RetryPolicy(max_attempts=3, rng=random.Random(5))
            async with TrioClient.over(client_stream, retry=retry) as client:
                with pytest.raises(QueueFull) as caught:
                    await client.enqueue("q", "t")
    assert caught.value.status == 429 and len(seen) == 3
    assert seen[2][0] - seen[0][0] == pytest.approx(
        0.5 * twin.uniform(0.8, 1.2) + 1.0 * twin.uniform(0.8, 1.2)
    )


async def test_a_waiting_claim_rides_out_any_number_of_429s(autojump_clock):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    answers = [_refusal("too_many_waiters", retry_after=5)] * 14 + [
        {"ok": True, "jobs": [], "empty": True}
    ]
    seen: list[tuple[float, dict]] = []
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fake_daemon, server_stream, answers, seen)
            async with TrioClient.over(client_stream) as client:
                assert await client.claim_next(["q"], wait_ms=1000) == []
                # A claim that does not wait is a plain call: 10 attempts.
                nursery.start_soon(
                    _fake_daemon, server_stream, [_refusal("too_many_waiters")] * 10, seen
                )
                with pytest.raises(TooManyWaiters):
                    await client.claim_next(["q"])
    assert len(seen) == 25
    assert 14 * 5 * 0.8 <= seen[14][0] - seen[0][0] <= 14 * 5 * 1.2


def _unavailable(**details: Any) -> dict[str, Any]:
    return {"ok": False, "error": {"code": "unavailable", "message": "the database is "
                                   "unavailable", "status": 503, **details}}  # fmt: skip


async def test_a_worker_waits_out_unavailable_claims_and_claims_again(autojump_clock, caplog):
    """``unavailable`` (nothing written: a store that cannot write, a daemon whose
    database is not open yet) does not end a worker: it waits the retry policy's
    delay (the daemon's ``retry_after``, else a backoff) and claims again, logging
    the outage once and its end once. ``shutting_down`` still ends it."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    answers = (
        [_unavailable(retry_after=3)] * 2
        + [_unavailable()] * 2
        + [{"ok": True, "jobs": [], "empty": True}]
    )
    seen: list[tuple[float, dict]] = []
    twin = random.Random(7)
    caplog.set_level(logging.INFO, logger="sluicegate.worker")
    answered = trio.Event()

    async def daemon() -> None:
        await _fake_daemon(server_stream, answers, seen)
        answered.set()

    with trio.fail_after(300):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon)
            async with TrioClient.over(
                client_stream, retry=RetryPolicy(rng=random.Random(7))
            ) as client:
                worker = Worker(client, ["q"], lambda job: None, wait_ms=1000)
                async with trio.open_nursery() as inner:
                    await inner.start(worker.run)
                    await answered.wait()
                    await trio.sleep(1)  # the worker claims again, unanswered: still alive
                    assert worker.statistics().stopping is False
                    worker.stop()
    assert [r["op"] for _, r in seen] == ["claim_next"] * 5
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
    jitters = [twin.uniform(0.8, 1.2) for _ in range(4)]
    # retry_after 3, twice; then the backoff of the third and fourth refusal: 2 s, 4 s.
    assert gaps == pytest.approx([3 * jitters[0], 3 * jitters[1], 2 * jitters[2], 4 * jitters[3]])
    messages = [r.getMessage() for r in caplog.records]
    assert sum("claims refused" in m for m in messages) == 1
    assert sum("claims answered again" in m for m in messages) == 1

    client_stream, server_stream = trio.testing.memory_stream_pair()
    refused = {"ok": False, "error": {"code": "shutting_down", "message": "draining",
                                      "status": 503}}  # fmt: skip
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fake_daemon, server_stream, [refused], [])
            async with TrioClient.over(client_stream) as client:
                with pytest.raises(ShuttingDown):
                    await Worker(client, ["q"], lambda job: None).run()


async def test_a_403_surfaces_at_once_with_its_code_for_the_caller_to_branch_on(autojump_clock):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    monthly = {"ok": False, "error": {
        "code": "quota_exceeded", "status": 403, "limit": "monthly_jobs_quota", "value": 9,
        "max": 9, "message": "monthly_jobs_quota exceeded: 9 >= 9; the block lifts at the next "
        "calendar month"}}  # fmt: skip
    seen: list[tuple[float, dict]] = []
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fake_daemon, server_stream, [monthly], seen)
            async with TrioClient.over(client_stream) as client:
                started = trio.current_time()
                with pytest.raises(QuotaExceeded) as caught:
                    await client.enqueue("q", "t")
                assert trio.current_time() == started  # no wait, no second attempt
    assert len(seen) == 1 and not caught.value.retryable
    assert (caught.value.code, caught.value.status, caught.value.limit) == (
        "quota_exceeded", 403, "monthly_jobs_quota")  # fmt: skip


def test_sync_client_retries_through_its_sleep_function():
    ours, theirs = socket.socketpair()
    answers = [
        _refusal("rate_limited", retry_after=2),
        _refusal("rate_limited"),
        {"ok": True, "jobs": [], "next": None},
    ]
    requests: list[dict[str, Any]] = []

    def fake_daemon() -> None:
        with theirs, theirs.makefile("rb") as lines:
            for answer in answers:
                requests.append(json.loads(lines.readline()))
                theirs.sendall(_frame(id=requests[-1]["id"], **answer))

    thread = threading.Thread(target=fake_daemon)
    thread.start()
    slept: list[float] = []
    twin = random.Random(9)
    with Client(sock=ours, retry=RetryPolicy(rng=random.Random(9)), sleep=slept.append) as client:
        assert client.list() == {"jobs": [], "next": None}
    thread.join()
    assert [r["id"] for r in requests] == [1, 2, 3]
    assert slept == pytest.approx([2 * twin.uniform(0.8, 1.2), 1.0 * twin.uniform(0.8, 1.2)])


# -- reconnecting after the daemon closed an idle connection ---------------------

HELLO = {"ok": True, "namespace": "n", "grants": ["produce"], "queues": ["*"], "protocol": 1}
ENQUEUED = {"ok": True, "job": {"id": "j"}, "duplicate": False, "folded": False, "shed": False}


class _ScriptedDaemon:
    """A fake daemon on a unix socket path, served by a thread.

    Its n-th connection reads one request per entry of ``script[n]`` and answers
    it with that entry (None: no answer), then, if ``farewell`` has bytes for it,
    waits for ``say_farewell[n]`` and sends them, and closes. ``seen[n]`` holds
    the requests the n-th connection read; ``closed[n]`` is set once it closed.
    Connections past the script wait in the listen backlog, where
    :meth:`extra_connections` finds them.
    """

    def __init__(
        self,
        path: Path,
        script: list[list[dict[str, Any] | None]],
        farewell: dict[int, bytes] | None = None,
    ) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.listener.settimeout(10)
        self.seen: list[list[dict[str, Any]]] = [[] for _ in script]
        self.closed = [threading.Event() for _ in script]
        self.say_farewell = [threading.Event() for _ in script]
        self.thread = threading.Thread(target=self._serve, args=(script, farewell or {}))
        self.thread.start()

    def _serve(self, script: list[list[dict[str, Any] | None]], farewell: dict[int, bytes]) -> None:
        for n, answers in enumerate(script):
            conn, _ = self.listener.accept()
            with conn, conn.makefile("rb") as lines:
                for answer in answers:
                    request = json.loads(lines.readline())
                    self.seen[n].append(request)
                    if answer is not None:
                        conn.sendall(_frame(id=request["id"], **answer))
                if n in farewell:
                    self.say_farewell[n].wait(10)
                    conn.sendall(farewell[n])
            self.closed[n].set()

    def extra_connections(self) -> int:
        self.thread.join(10)
        self.listener.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def close(self) -> None:
        self.thread.join(10)
        self.listener.close()


@pytest.fixture
def scripted(tmp_path):
    made: list[_ScriptedDaemon] = []

    def make(script: list, farewell: dict[int, bytes] | None = None) -> _ScriptedDaemon:
        fake = _ScriptedDaemon(tmp_path / f"fake{len(made)}.sock", script, farewell)
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.close()


def _ops(requests: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(r["op"], r.get("token", r.get("queue"))) for r in requests]


def _reconnects(caplog: pytest.LogCaptureFixture) -> int:
    return sum("reconnected to" in r.getMessage() for r in caplog.records)


def test_sync_client_reconnects_after_an_idle_close_and_says_hello_again(scripted, caplog):
    caplog.set_level(logging.DEBUG, logger="sluicegate.client")
    fake = scripted([[HELLO, ENQUEUED], [HELLO, ENQUEUED]])
    with Client(fake.path, token="t0k", client_name="producer") as client:
        client.enqueue("q1", "t")
        assert fake.closed[0].wait(10)  # closed while nothing was outstanding
        assert client.enqueue("q2", "t")["job"] == {"id": "j"}
        assert client.outstanding == 0
    hello = {"op": "hello", "token": "t0k", "client": "producer"}
    assert [{k: r[k] for k in hello} for r in (fake.seen[0][0], fake.seen[1][0])] == [hello] * 2
    assert _ops(fake.seen[0]) == [("hello", "t0k"), ("enqueue", "q1")]
    assert _ops(fake.seen[1]) == [("hello", "t0k"), ("enqueue", "q2")]
    # Found closed before the enqueue was numbered: the new hello comes first.
    assert [r["id"] for r in fake.seen[1]] == [3, 4]
    assert _reconnects(caplog) == 1 and fake.extra_connections() == 0


def test_sync_client_sends_again_a_request_whose_send_found_the_connection_closed(scripted):
    # Unread bytes make the connection look open; the send then fails with EPIPE.
    notice = _frame(event="notice")
    fake = scripted([[HELLO, ENQUEUED], [HELLO, ENQUEUED]], farewell={0: notice})
    with Client(fake.path, token="t0k") as client:
        client.enqueue("q1", "t")
        fake.say_farewell[0].set()  # after the answer was read: the notice stays unread
        assert fake.closed[0].wait(10)
        assert client.enqueue("q2", "t")["job"] == {"id": "j"}
        assert client.outstanding == 0
        assert list(client.events) == [{"event": "notice"}]  # read before reconnecting
    assert _ops(fake.seen[0]) == [("hello", "t0k"), ("enqueue", "q1")]
    # The very line whose send failed (id 3), sent once, after the new hello.
    assert [(r["id"], r["op"]) for r in fake.seen[1]] == [(4, "hello"), (3, "enqueue")]


def test_sync_client_never_sends_again_a_request_the_daemon_may_have_read(scripted):
    fake = scripted([[None]])  # read, then closed without an answer
    with Client(fake.path) as client:
        with pytest.raises(ConnectionLost):
            client.enqueue("q", "t")
        assert client.outstanding == 1
        with pytest.raises(ConnectionLost):  # and no reconnect later either
            client.status()
    assert _ops(fake.seen[0]) == [("enqueue", "q")]
    assert fake.extra_connections() == 0


def test_sync_client_does_not_reconnect_a_subscriber_or_a_given_socket(scripted):
    fake = scripted([[{"ok": True}]])
    with Client(fake.path) as client:
        client.subscribe(["q"])
        assert fake.closed[0].wait(10)
        with pytest.raises(ConnectionLost):
            client.status()
    assert fake.extra_connections() == 0
    ours, theirs = socket.socketpair()
    theirs.close()
    with Client(sock=ours) as client, pytest.raises(ConnectionLost):
        client.status()


def test_sync_client_that_cannot_reconnect_raises_and_tries_again_on_the_next_call(scripted):
    first = scripted([[ENQUEUED]])
    with Client(first.path) as client:
        client.enqueue("q", "t")
        first.close()
        first.path.unlink()  # the daemon is gone
        with pytest.raises(ConnectionLost, match="cannot reconnect"):
            client.status()
        back = _ScriptedDaemon(first.path, [[{"ok": True, "queues": []}]])
        try:
            assert client.status() == {"queues": []}
        finally:
            back.close()


async def _trio_scripted(
    path: Path,
    script: list[list[dict[str, Any] | None]],
    seen: list[list[dict[str, Any]]],
    closed: list[trio.Event],
    *,
    task_status: trio.TaskStatus[trio.SocketListener] = trio.TASK_STATUS_IGNORED,
    shut_first: dict[int, trio.Event] | None = None,
) -> None:
    """The Trio twin of :class:`_ScriptedDaemon`; connections past the script are
    counted in ``seen`` as empty lists. With ``shut_first[n]``, the n-th
    connection first stops reading (the client's sends then fail), sets that
    event, and closes once every task is blocked."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(str(path))
    sock.listen()
    async with trio.SocketListener(sock) as listener:
        task_status.started(listener)
        for n in itertools.count():
            stream = await listener.accept()
            async with stream:
                if n >= len(script):
                    seen.append([])
                    continue
                buf = b""
                for answer in script[n]:
                    while b"\n" not in buf:
                        buf += await stream.receive_some(65536)
                    line, buf = buf.split(b"\n", 1)
                    seen[n].append(json.loads(line))
                    if answer is not None:
                        await stream.send_all(_frame(id=seen[n][-1]["id"], **answer))
                if shut_first and n in shut_first:
                    stream.socket.shutdown(socket.SHUT_RD)
                    shut_first[n].set()
                    await trio.testing.wait_all_tasks_blocked()
            closed[n].set()


async def test_trio_client_reconnects_after_an_idle_close_and_says_hello_again(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="sluicegate.client")
    path = tmp_path / "fake.sock"
    seen: list[list[dict[str, Any]]] = [[], []]
    closed = [trio.Event(), trio.Event()]
    script: list[list[dict[str, Any] | None]] = [[HELLO, ENQUEUED], [HELLO, ENQUEUED]]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(_trio_scripted, path, script, seen, closed)
            async with TrioClient.connect(path, token="t0k", client_name="producer") as client:
                await client.enqueue("q1", "t")
                await closed[0].wait()
                await trio.testing.wait_all_tasks_blocked()  # the reader saw the EOF
                assert (await client.enqueue("q2", "t"))["job"] == {"id": "j"}
                assert client.outstanding == 0
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert [r["client"] for r in (seen[0][0], seen[1][0])] == ["producer", "producer"]
    assert _ops(seen[0]) == [("hello", "t0k"), ("enqueue", "q1")]
    assert _ops(seen[1]) == [("hello", "t0k"), ("enqueue", "q2")]
    assert len(seen) == 2 and _reconnects(caplog) == 1


async def test_trio_client_sends_again_a_call_whose_send_found_the_connection_closed(tmp_path):
    path = tmp_path / "fake.sock"
    seen: list[list[dict[str, Any]]] = [[], []]
    closed = [trio.Event(), trio.Event()]
    shut = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(_trio_scripted, shut_first={0: shut}),
                path,
                [[ENQUEUED], [ENQUEUED]],
                seen,
                closed,
            )
            async with TrioClient.connect(path) as client:
                await client.enqueue("q1", "t")
                await shut.wait()  # the daemon no longer reads: the send fails
                assert (await client.enqueue("q2", "t"))["job"] == {"id": "j"}
                assert client.outstanding == 0
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert _ops(seen[0]) == [("enqueue", "q1")]
    assert _ops(seen[1]) == [("enqueue", "q2")]
    assert len(seen) == 2


@pytest.mark.parametrize("case", ["in flight", "subscribed"])
async def test_trio_client_does_not_reconnect_when_that_could_lose_or_repeat_anything(
    tmp_path, case
):
    path = tmp_path / "fake.sock"
    seen: list[list[dict[str, Any]]] = [[]]
    closed = [trio.Event()]
    script: list[list[dict[str, Any] | None]] = [[None] if case == "in flight" else [{"ok": True}]]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(_trio_scripted, path, script, seen, closed)
            async with TrioClient.connect(path) as client:
                if case == "in flight":
                    with pytest.raises(ConnectionLost):
                        await client.enqueue("q", "t")  # read, then closed unanswered
                else:
                    await client.subscribe(["q"])
                    await closed[0].wait()
                    await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(ConnectionLost):
                    await client.status()
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert len(seen) == 1  # no second connection


async def test_trio_client_over_a_given_stream_does_not_reconnect():
    client_stream, server_stream = trio.testing.memory_stream_pair()
    with trio.fail_after(10):
        async with TrioClient.over(client_stream) as client:
            await server_stream.aclose()
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(ConnectionLost):
                await client.status()


# -- against a real daemon -----------------------------------------------------
#
# One daemon serves the module (``module_daemon``): each test keeps to queues of its
# own and asserts nothing about the daemon as a whole. A test that does (the dead
# list) has a daemon of its own (``daemon``).


def test_sync_client_job_life_and_typed_errors(daemon):
    with Client(daemon.socket) as client:
        assert client.hello(client="test")["namespace"] == "default"
        job = client.enqueue("q", "t", {"n": 1}, priority=5)["job"]
        (claimed,) = client.claim_next(["q"])
        assert (claimed.id, claimed.payload, claimed.attempt) == (job["id"], {"n": 1}, 1)
        assert claimed.heartbeat() >= claimed.job["lease_expires_at"]
        with pytest.raises(Conflict) as conflict:
            client.claim(job["id"])
        assert conflict.value.details["job_status"] == "running"
        done = claimed.complete({"ok": True})
        assert done["status"] == "completed" and claimed.finished
        with pytest.raises(LeaseLost):
            claimed.complete()
        assert client.get(job["id"])["result"] == {"ok": True}
        with pytest.raises(NotFound):
            client.get("no-such-job")
        with pytest.raises(InvalidArgument) as invalid:
            client.enqueue("q", "t", priority=70000)
        assert invalid.value.field == "priority"
        # fail and release through handles; the empty claim says so.
        client.enqueue_many([{"queue": "r", "type": "t"}, {"queue": "r", "type": "t"}])
        first, second = client.claim_next(["r"], max=2)
        assert first.fail("boom", dead=True)["status"] == "dead"
        assert second.release()["attempts"] == 0
        assert client.claim_next(["nothing"]) == []
        assert [j["id"] for j in client.dead_list()["jobs"]] == [first.id]
        replay = client.dead_replay([first.id])
        assert replay["results"][0]["job"]["status"] == "pending"


def test_sync_client_pipelines_and_reads_answers_out_of_order(module_daemon):
    with Client(module_daemon.socket) as client:
        waiting = client.submit("claim_next", queues=["later"], wait_ms=10_000)
        status = client.submit("status")
        assert client.result(status)["namespace"] == "default"
        enqueued = client.enqueue("later", "t")["job"]
        assert client.result(waiting)["jobs"][0]["job"]["id"] == enqueued["id"]
        assert client.outstanding == 0


async def test_trio_client_answers_out_of_order_while_a_claim_waits(module_daemon):
    order: list[str] = []
    with trio.fail_after(20):
        async with TrioClient.connect(module_daemon.socket) as client:
            claimed: list[TrioJob] = []

            async def wait_for_work() -> None:
                claimed.extend(await client.claim_next(["slow"], wait_ms=15_000))
                order.append("claim")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_work)
                await trio.testing.wait_all_tasks_blocked()  # the claim is sent
                await client.enqueue("other", "t")
                order.append("enqueue other")
                assert (await client.status())["namespace"] == "default"
                order.append("status")
                await client.enqueue("slow", "t", {"x": 1})
            assert order == ["enqueue other", "status", "claim"]
            assert claimed[0].payload == {"x": 1}
            await claimed[0].complete()


async def test_trio_client_delivers_doorbells(module_daemon):
    send, receive = trio.open_memory_channel[dict](10)
    with trio.fail_after(20):
        async with TrioClient.connect(module_daemon.socket, on_event=send.send_nowait) as client:
            await client.subscribe(["bells"])
            await client.enqueue("bells", "t")
            event = await receive.receive()
    assert event == {"event": "doorbell", "queue": "bells", "pending": 1}
    send.close()
    receive.close()


async def test_a_cancelled_claim_gives_back_what_it_took(module_daemon):
    with trio.fail_after(20):
        async with TrioClient.connect(module_daemon.socket) as client:
            with trio.move_on_after(0.2):
                await client.claim_next(["orphans"], wait_ms=15_000)
            assert client.outstanding == 1  # the daemon still holds the claim
            job = (await client.enqueue("orphans", "t"))["job"]
            # The claim's answer comes, then the answer to the release it caused.
            await _wait_until(lambda: client.outstanding == 0)
            again = await client.get(job["id"])
    assert again["status"] == "pending" and again["attempts"] == 0
    assert again["updated_at"] >= job["created_at"] and again["lease"] is None


async def test_errors_leave_the_trio_client_unwrapped(module_daemon):
    with trio.fail_after(20), pytest.raises(NotFound):
        async with TrioClient.connect(module_daemon.socket) as client:
            await client.get("missing")


async def test_a_frame_too_large_is_reported_as_such_not_as_a_broken_pipe(module_daemon):
    huge = "x" * 2_000_000
    with Client(module_daemon.socket) as client, pytest.raises(FrameTooLarge):
        client.enqueue("q", "t", huge)
    with trio.fail_after(20), pytest.raises(FrameTooLarge):
        async with TrioClient.connect(module_daemon.socket) as trio_client:
            await trio_client.enqueue("q", "t", huge)


TOKENS = """
[[tokens]]
name = "reports"
token = "s3cret"
grants = ["produce", "consume"]
queues = ["reports.*"]
"""


@pytest.mark.e2e
async def test_a_token_says_hello_on_connect(tmp_path, monkeypatch):
    proc = DaemonProcess(tmp_path, extra_config=TOKENS, http=False)
    proc.start()
    try:
        with Client(proc.socket) as anonymous, pytest.raises(Unauthenticated):
            anonymous.status()
        with pytest.raises(Unauthenticated):
            Client(proc.socket, token="wrong")
        with Client(proc.socket, token="s3cret") as client:
            assert client.enqueue("reports.daily", "t")["job"]["namespace"] == "default"
            with pytest.raises(Forbidden):
                client.enqueue("payroll", "t")
        monkeypatch.setenv("SLUICEGATE_TOKEN", "s3cret")
        with trio.fail_after(20):
            async with TrioClient.connect(proc.socket) as trio_client:
                (job,) = await trio_client.claim_next(["reports.daily"])
                await job.complete()
    finally:
        proc.stop()


# -- the worker ----------------------------------------------------------------


async def _wait_until(predicate: Any) -> None:
    """Poll state another process moves (the daemon's answers); no event to wait on."""
    while not predicate():  # noqa: ASYNC110
        await trio.sleep(0.01)


async def test_worker_completes_with_the_result_and_fails_with_the_exception(module_daemon):
    async def handler(job: TrioJob) -> Any:
        if job.payload["n"] == 2:
            raise ValueError("bad input")
        return {"double": job.payload["n"] * 2}

    with trio.fail_after(30):
        async with TrioClient.connect(module_daemon.socket) as client:
            results = await client.enqueue_many(
                [{"queue": "w", "type": "t", "payload": {"n": n}} for n in range(4)]
            )
            ids = [r["job"]["id"] for r in results]
            worker = Worker(client, ["w"], handler, concurrency=2, wait_ms=1000)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await _wait_until(lambda: worker.statistics().completed == 3)
                await _wait_until(lambda: worker.statistics().failed == 1)
                worker.stop()
            jobs = [await client.get(i) for i in ids]
    assert [j["status"] for j in jobs] == ["completed", "completed", "scheduled", "completed"]
    assert jobs[3]["result"] == {"double": 6}
    assert jobs[2]["error"] == "ValueError: bad input"
    assert worker.statistics().running == 0


async def test_a_worker_rides_out_a_daemon_restart_and_claims_from_the_new_one(daemon, caplog):
    """A restart drops the worker's connection with its waiting claim in flight:
    the worker connects again (backing off while the socket does not answer)
    and goes on claiming from the restarted daemon, on the same client."""
    done: list[int] = []

    async def handler(job: TrioJob) -> None:
        done.append(job.payload["n"])

    caplog.set_level(logging.INFO, logger="sluicegate.worker")
    with trio.fail_after(60):
        async with TrioClient.connect(daemon.socket) as client:
            worker = Worker(client, ["r"], handler, wait_ms=10_000)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await client.enqueue("r", "t", {"n": 1})
                await _wait_until(lambda: done == [1])
                await _wait_until(lambda: daemon.waiting_claims() == 1)  # its claim waits
                await trio.to_thread.run_sync(daemon.stop)
                await trio.sleep(1)  # the worker tries the closed socket meanwhile
                await trio.to_thread.run_sync(daemon.start)
                with RawClient(daemon.socket) as raw:
                    raw.ok("enqueue", queue="r", type="t", payload={"n": 2})
                await _wait_until(lambda: done == [1, 2])
                await _wait_until(lambda: worker.statistics().completed == 2)
                worker.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("claims lost the connection" in m for m in messages) == 1
    assert sum("claims answered again" in m for m in messages) == 1


async def test_a_worker_stopped_while_its_daemon_is_away_returns_at_once(daemon, caplog):
    """Stopping a worker that is backing off between reconnects ends its wait
    (here every backoff is 24-36 s: a stop that waited it out would time out)."""
    caplog.set_level(logging.WARNING, logger="sluicegate.worker")
    slow = RetryPolicy(base=30.0)
    async with TrioClient.connect(daemon.socket, retry=slow) as client:
        worker = Worker(client, ["away"], lambda job: None, wait_ms=10_000)
        returned = trio.Event()

        async def run() -> None:
            await worker.run()
            returned.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await _wait_until(lambda: daemon.waiting_claims() == 1)
            await trio.to_thread.run_sync(daemon.stop)  # never started again
            await _wait_until(lambda: any("claims lost" in r.getMessage() for r in caplog.records))
            worker.stop()
            with trio.fail_after(5):
                await returned.wait()


async def test_a_worker_over_a_given_stream_still_ends_when_its_connection_is_lost():
    client_stream, server_stream = trio.testing.memory_stream_pair()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:

            async def daemon_that_leaves() -> None:
                await server_stream.receive_some(65536)  # the claim
                await server_stream.aclose()

            nursery.start_soon(daemon_that_leaves)
            async with TrioClient.over(client_stream) as client:
                with pytest.raises(ConnectionLost):
                    await Worker(client, ["q"], lambda job: None).run()


async def test_worker_runs_plain_functions_in_threads(module_daemon):
    def handler(job: TrioJob) -> str:
        return f"seen {job.payload}"

    with trio.fail_after(30):
        async with TrioClient.connect(module_daemon.socket) as client:
            job = (await client.enqueue("threads", "t", "hello"))["job"]
            worker = Worker(client, ["threads"], handler)
            assert worker.threaded
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await _wait_until(lambda: worker.statistics().completed == 1)
                worker.stop()
            assert (await client.get(job["id"]))["result"] == "seen hello"


async def test_worker_stop_lets_jobs_finish_within_grace_and_releases_the_rest(module_daemon):
    finish_quick = trio.Event()

    async def handler(job: TrioJob) -> None:
        if job.payload == "quick":
            await finish_quick.wait()
        else:
            await trio.sleep_forever()

    with trio.fail_after(30):
        async with TrioClient.connect(module_daemon.socket) as client:
            quick = (await client.enqueue("g", "t", "quick"))["job"]
            stuck = (await client.enqueue("g", "t", "stuck"))["job"]
            worker = Worker(client, ["g"], handler, concurrency=2, grace=0.5)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await _wait_until(lambda: worker.statistics().running == 2)
                worker.stop()
                finish_quick.set()
            stats = worker.statistics()
            assert (stats.completed, stats.released, stats.running) == (1, 1, 0)
            assert (await client.get(quick["id"]))["status"] == "completed"
            released = await client.get(stuck["id"])
    assert released["status"] == "pending" and released["attempts"] == 0


async def test_cancelling_the_worker_is_a_graceful_stop(module_daemon):
    started, finish = trio.Event(), trio.Event()

    async def handler(job: TrioJob) -> str:
        started.set()
        await finish.wait()
        return "done"

    with trio.fail_after(30):
        async with TrioClient.connect(module_daemon.socket) as client:
            job = (await client.enqueue("c", "t"))["job"]
            worker = Worker(client, ["c"], handler, grace=20)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.run)
                await started.wait()
                nursery.cancel_scope.cancel()
                # The claim loop is cancelled; the running job is still allowed to finish.
                finish.set()
            assert (await client.get(job["id"]))["result"] == "done"


async def test_worker_heartbeats_keep_the_lease(module_daemon):
    with trio.fail_after(30):
        async with TrioClient.connect(module_daemon.socket) as client:

            async def handler(job: TrioJob) -> None:
                first = job.job["lease_expires_at"]
                # Returns once a heartbeat (every lease_ms / 3) has moved the expiry.
                while (await client.get(job.id))["lease_expires_at"] == first:  # noqa: ASYNC110
                    await trio.sleep(0.05)

            job = (await client.enqueue("hb", "t"))["job"]
            worker = Worker(client, ["hb"], handler, lease_ms=600)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await _wait_until(lambda: worker.statistics().completed == 1)
                worker.stop()
            assert (await client.get(job["id"]))["status"] == "completed"


async def test_the_batch_completer_gathers_completions_while_a_call_is_in_flight(autojump_clock):
    from daemon.sdk.completer import BatchCompleter

    client_stream, server_stream = trio.testing.memory_stream_pair()
    lost = {"code": "lease_lost", "message": "gone", "status": 409}
    answers = [
        {"ok": True, "results": [{"job_id": "a", "state": "completed"}]},
        {"ok": True, "results": [{"job_id": "?", "error": lost},
                                 {"job_id": "?", "state": "completed"}]},
    ]  # fmt: skip
    seen: list[tuple[float, dict]] = []

    def job(job_id: str) -> TrioJob:
        return TrioJob(client, {"id": job_id, "lease": "l-" + job_id, "attempts": 1})

    outcomes: dict[str, str] = {}

    async def complete(completer: BatchCompleter, j: TrioJob) -> None:
        try:
            await completer.complete(j, {"by": j.id})
            outcomes[j.id] = "completed" if j.finished else "?"
        except SluicegateError as exc:
            outcomes[j.id] = exc.code

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fake_daemon, server_stream, answers, seen)
            async with TrioClient.over(client_stream) as client:
                completer = BatchCompleter(client)
                async with trio.open_nursery() as inner:
                    await inner.start(completer.run)
                    async with trio.open_nursery() as jobs:
                        jobs.start_soon(complete, completer, job("a"))
                        await trio.testing.wait_all_tasks_blocked()  # "a" is in flight...
                        jobs.start_soon(complete, completer, job("b"))  # ...these gather
                        jobs.start_soon(complete, completer, job("c"))
                    inner.cancel_scope.cancel()
                with pytest.raises(TypeError):  # an unencodable result: this job only
                    await completer.complete(job("d"), object())
    assert [r["op"] for _, r in seen] == ["complete_many", "complete_many"]
    assert [len(r["jobs"]) for _, r in seen] == [1, 2]
    first, second = seen[1][1]["jobs"]  # b and c, in the order their tasks ran
    assert {first["job_id"], second["job_id"]} == {"b", "c"}
    assert second == {"job_id": second["job_id"], "lease": "l-" + second["job_id"],
                      "result": {"by": second["job_id"]}}  # fmt: skip
    # The daemon's answers are positional: the first of the batch lost its lease.
    assert outcomes == {"a": "completed", first["job_id"]: "lease_lost",
                        second["job_id"]: "completed"}  # fmt: skip
    assert (completer.calls, completer.completions) == (2, 3)


async def test_a_busy_worker_completes_in_batches(module_daemon):
    async def handler(job: TrioJob) -> int:
        await trio.sleep(0.01)  # real time: the jobs finish close together
        return job.payload["n"]

    with trio.fail_after(30):
        async with TrioClient.connect(module_daemon.socket) as client:
            results = await client.enqueue_many(
                [{"queue": "many", "type": "t", "payload": {"n": n}} for n in range(60)]
            )
            worker = Worker(client, ["many"], handler, concurrency=20, wait_ms=1000)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await _wait_until(lambda: worker.statistics().completed == 60)
                worker.stop()
            jobs = [await client.get(r["job"]["id"]) for r in results]
    assert [j["result"] for j in jobs] == list(range(60))
    completer = worker._completer
    assert completer.completions == 60 and completer.calls < 60  # batched
