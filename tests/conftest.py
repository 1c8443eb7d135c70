"""Shared fixtures: a real daemon per test (end-to-end) on a temp dir."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support import DaemonProcess, RawClient


@pytest.fixture
def daemon(tmp_path) -> Iterator[DaemonProcess]:
    """A running ``sluice serve`` in open mode with HTTP on a free port."""
    proc = DaemonProcess(tmp_path)
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.stop()


@pytest.fixture
def make_daemon(tmp_path) -> Iterator[Callable[..., DaemonProcess]]:
    """A factory of running daemons with their own config lines; all stopped at teardown.

    ``make_daemon(extra_config="max_frame_bytes = 65536\\n", http=True)``: the
    extra lines are appended to the ``[daemon]`` section (tables may follow).
    """
    made: list[DaemonProcess] = []

    def make(extra_config: str = "", *, http: bool = True, start: bool = True) -> DaemonProcess:
        workdir = tmp_path / f"daemon{len(made)}"
        workdir.mkdir()
        proc = DaemonProcess(workdir, extra_config=extra_config, http=http)
        made.append(proc)
        if start:
            proc.start()
        return proc

    yield make
    for proc in made:
        proc.cleanup()


@pytest.fixture
def connect() -> Iterator[Callable[[DaemonProcess], RawClient]]:
    """Open socket clients that are closed at teardown: ``connect(daemon)``."""
    opened: list[RawClient] = []

    def open_client(daemon: DaemonProcess, timeout: float = 10) -> RawClient:
        client = RawClient(daemon.socket, timeout=timeout)
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()
