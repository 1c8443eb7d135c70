"""Shared fixtures: a real daemon per test (end-to-end) on a temp dir; the ``e2e`` mark.

Every test that starts a daemon or any other process is marked ``e2e`` (``-m "not
e2e"`` runs the in-process suite alone). A test that uses one of :data:`DAEMON_FIXTURES`
is marked here; a test that starts a process otherwise is marked in its module. The
mark is checked, not trusted: a test without it that starts a process fails, saying so
(a ``subprocess.Popen`` audit hook, for the run phases of tests only).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import DaemonProcess, RawClient

#: Fixtures that start a real ``sluice serve``: a test using any of them (directly or
#: through another fixture) is ``e2e``.
DAEMON_FIXTURES = frozenset({"daemon", "make_daemon", "module_daemon"})

#: Audit events of a new process (``os.system`` and the ``os.spawn*``/``posix_spawn``
#: family as well as ``subprocess``).
_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn"})

#: The test running now and whether it may start processes; None between tests.
_running: tuple[str, bool] | None = None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if DAEMON_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


def _refuse_unmarked_spawn(event: str, args: tuple[Any, ...]) -> None:
    if _running is None or event not in _SPAWN_EVENTS:
        return
    nodeid, may_spawn = _running
    if not may_spawn:
        raise RuntimeError(
            f"{nodeid} starts a process ({event} {args[:2]!r}) but is not marked e2e: "
            "mark it (pytestmark = pytest.mark.e2e) or use a fixture of DAEMON_FIXTURES"
        )


sys.addaudithook(_refuse_unmarked_spawn)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    global _running
    _running = (item.nodeid, item.get_closest_marker("e2e") is not None)
    try:
        return (yield)
    finally:
        _running = None


@pytest.fixture
def daemon(tmp_path) -> Iterator[DaemonProcess]:
    """A running ``sluice serve`` in open mode with HTTP on a free port."""
    proc = DaemonProcess(tmp_path)
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.stop()


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One running open-mode daemon (HTTP on) shared by a module's tests.

    Only for tests that keep to names of their own (queues, keys) and assert nothing
    about the daemon as a whole (counts of every queue, the dead list, metrics totals).
    """
    proc = DaemonProcess(tmp_path_factory.mktemp("daemon"))
    proc.start()
    yield proc
    proc.cleanup()


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
