"""The SDK reconnects a connection the daemon closed as idle, and nothing else.

A producer that enqueues once in a while outlives ``[daemon] idle_timeout``:
the daemon closes its connection silently, and the next call opens a new one,
says ``hello`` again (so its jobs stay in the token's namespace) and goes
through. A request the daemon may have read when the connection dropped is
never sent again: that call raises ``ConnectionLost``, and so do later ones.

Waits are for events (the open-connections gauge, the waiting-claims gauge),
never for an amount of time.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import trio

from daemon.client import Client, ConnectionLost, TrioClient
from tests.support import DaemonProcess, RawClient, metric, token_tables, wait_until

pytestmark = pytest.mark.e2e

TOKEN = "tok-producer-4242"
IDLE_WITH_TOKENS = 'idle_timeout = "1s"\n' + token_tables(
    {"name": "producer", "token": TOKEN, "namespace": "reports", "grants": ["produce", "consume"]}
)


def open_connections(daemon: DaemonProcess) -> float:
    return metric(daemon.metrics(), "sluicegate_socket_connections") or 0


def wait_for_idle_close(daemon: DaemonProcess) -> None:
    """Until the daemon has closed every socket connection (the client's, as idle)."""
    wait_until(lambda: open_connections(daemon) == 0, timeout=30, what="the idle close")


def namespace_of(daemon: DaemonProcess, job_id: str) -> str:
    """The job's namespace, read on a connection of its own."""
    with RawClient(daemon.socket) as raw:
        raw.ok("hello", token=TOKEN)
        return raw.ok("get", job_id=job_id)["job"]["namespace"]


def test_the_sync_client_reconnects_after_an_idle_close(
    make_daemon: Callable[..., DaemonProcess],
):
    daemon = make_daemon(IDLE_WITH_TOKENS)
    with Client(daemon.socket, token=TOKEN, client_name="cron") as client:
        first = client.enqueue("daily", "t", {"n": 1})["job"]
        wait_for_idle_close(daemon)
        # Without the new hello this would be unauthenticated.
        second = client.enqueue("daily", "t", {"n": 2})["job"]
        assert client.get(second["id"])["payload"] == {"n": 2}
        wait_for_idle_close(daemon)
        third = client.enqueue("daily", "t", {"n": 3})["job"]
    jobs = (first, second, third)
    assert [j["namespace"] for j in jobs] == ["reports"] * 3
    assert [namespace_of(daemon, j["id"]) for j in jobs] == ["reports"] * 3


async def test_the_trio_client_reconnects_after_an_idle_close(
    make_daemon: Callable[..., DaemonProcess],
):
    daemon = make_daemon(IDLE_WITH_TOKENS)
    with trio.fail_after(60):
        async with TrioClient.connect(daemon.socket, token=TOKEN, client_name="cron") as client:
            first = (await client.enqueue("daily", "t", {"n": 1}))["job"]
            # In a thread: the client's reader runs meanwhile and sees the EOF.
            await trio.to_thread.run_sync(wait_for_idle_close, daemon)
            second = (await client.enqueue("daily", "t", {"n": 2}))["job"]
            assert (await client.get(second["id"]))["payload"] == {"n": 2}
            assert client.outstanding == 0
    assert [first["namespace"], second["namespace"]] == ["reports", "reports"]
    assert namespace_of(daemon, second["id"]) == "reports"


def test_the_sync_client_never_sends_again_a_request_in_flight(
    make_daemon: Callable[..., DaemonProcess],
):
    daemon = make_daemon('idle_timeout = "1s"\n')
    with Client(daemon.socket) as client:
        waiting = client.submit("claim_next", queues=["q"], wait_ms=60_000)
        wait_until(lambda: daemon.waiting_claims() == 1, what="the claim to wait")
        daemon.kill()  # the connection drops with the claim in flight
        with pytest.raises(ConnectionLost):
            client.result(waiting)
        daemon.start()
        with pytest.raises(ConnectionLost):  # the daemon is back; the client stays lost
            client.status()
    with RawClient(daemon.socket) as raw:
        job = raw.ok("enqueue", queue="q", type="t")["job"]
        assert raw.ok("get", job_id=job["id"])["job"]["status"] == "pending"
    assert daemon.waiting_claims() == 0


async def test_the_trio_client_never_sends_again_a_call_in_flight(
    make_daemon: Callable[..., DaemonProcess],
):
    daemon = make_daemon('idle_timeout = "1s"\n')
    with trio.fail_after(60):
        async with TrioClient.connect(daemon.socket) as client:
            async with trio.open_nursery() as nursery:
                lost: list[BaseException] = []

                async def claim() -> None:
                    try:
                        await client.claim_next(["q"], wait_ms=60_000)
                    except ConnectionLost as exc:
                        lost.append(exc)

                nursery.start_soon(claim)
                await trio.to_thread.run_sync(
                    partial(wait_until, lambda: daemon.waiting_claims() == 1)
                )
                await trio.to_thread.run_sync(daemon.kill)
            assert len(lost) == 1
            await trio.to_thread.run_sync(daemon.start)
            with pytest.raises(ConnectionLost):
                await client.status()
    assert daemon.waiting_claims() == 0
