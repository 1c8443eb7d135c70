"""The socket server's accept loop, on a fake listener and Trio's virtual clock:
running out of descriptors is one log line per episode, no traceback, and a
back-off rather than a busy loop."""

from __future__ import annotations

import errno
import logging
from types import SimpleNamespace

import pytest
import trio
from prometheus_client import CollectorRegistry

from daemon.transport.socket_server import BACKOFF_S, SocketServer


class Listener:
    """``accept`` fails with EMFILE ``failures`` times, then hands out ``streams``."""

    def __init__(self, failures: int, streams: list[object]) -> None:
        self.failures = failures
        self.streams = streams
        self.attempts = 0
        self.done = trio.Event()

    async def accept(self) -> object:
        await trio.lowlevel.checkpoint()
        self.attempts += 1
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        if self.streams:
            return self.streams.pop(0)
        self.done.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


def fake_core() -> SimpleNamespace:
    return SimpleNamespace(
        writer=SimpleNamespace(after_commit=[]),
        metrics=SimpleNamespace(registry=CollectorRegistry()),
        config=SimpleNamespace(daemon=SimpleNamespace(idle_timeout=0)),
    )


async def test_emfile_is_one_line_per_episode_and_backs_off(
    autojump_clock, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="sluicegate.socket")
    # One client gets through after the episode; with a cap of 0 it is refused,
    # which needs no Connection (and shows the cap's own one line).
    client = SimpleNamespace(socket=SimpleNamespace(fileno=lambda: -1, close=lambda: None))
    listener = Listener(failures=50, streams=[client])
    server = SocketServer(fake_core(), max_connections=0)  # type: ignore[arg-type]
    t0 = trio.current_time()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._accept_loop, listener, nursery)
            await listener.done.wait()
            nursery.cancel_scope.cancel()
    assert listener.attempts == 52
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "accept failed: too many open files; pausing accepts",
        "accepts resumed after 50 failed attempts",
        "connection cap reached: 0 open (daemon.max_connections); refusing new connections",
    ]
    assert server.statistics().refused_total == 1
    assert all(r.exc_info is None for r in caplog.records)
    # Backed off: doubling from the first wait up to the longest, never spinning.
    waits, delay = 0.0, BACKOFF_S[0]
    for _ in range(50):
        waits += delay
        delay = min(delay * 2, BACKOFF_S[1])
    assert trio.current_time() - t0 == pytest.approx(waits)
