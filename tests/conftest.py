"""Shared fixtures: a real daemon per test (end-to-end) on a temp dir; the ``e2e`` mark.

Every test that starts a daemon or any other process is marked ``e2e`` (``-m "not
e2e"`` runs the in-process suite alone). A test that uses one of :data:`DAEMON_FIXTURES`
is marked here; a test that starts a process otherwise is marked in its module. The
mark is checked, not trusted: a test without it that starts a process fails, saying so
(a ``subprocess.Popen`` audit hook, for the run phases of tests only).

PostgreSQL (issue 15, :mod:`tests.postgres`): ``pg_dsn`` gives a test a fresh database
on the session's server (``postgres_server``). A test using either, or marked
``postgres``, skips without a server, saying why, and fails so under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import trio_asyncio  # noqa: F401  (imported first, for the policy below)

from tests import forkserver, postgres
from tests.support import DaemonProcess, RawClient

# trio-asyncio (the PostgreSQL store's) makes every asyncio loop created outside
# Trio one of its own. The tests also run plain asyncio outside Trio (Playwright's
# sync API, asyncpg in the PostgreSQL fixtures): this thread keeps asyncio's own
# policy there; inside Trio, trio-asyncio's applies whatever is set here.
asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())

#: Fixtures that start a real ``sluice serve``: a test using any of them (directly or
#: through another fixture) is ``e2e``.
DAEMON_FIXTURES = frozenset({"daemon", "make_daemon", "module_daemon"})

#: Fixtures that need a PostgreSQL server: a test using any of them is ``postgres``.
POSTGRES_FIXTURES = frozenset({"postgres_server", "pg_dsn"})

#: The stores a test's daemons may run on (``daemon_store``).
STORES = ("sqlite", "postgres")

#: Audit events of a new process (``os.system`` and the ``os.spawn*``/``posix_spawn``
#: family as well as ``subprocess``, and a child of :mod:`tests.forkserver`).
_SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", forkserver.AUDIT_EVENT}
)

#: The test running now and whether it may start processes; None between tests.
_running: tuple[str, bool] | None = None

#: True while a session fixture starts or stops its own process (a throwaway
#: PostgreSQL cluster), whichever test's setup or teardown that falls in.
_session_spawning = False


#: Files whose tests run longest (seconds in a CI run of the sixteenth session, on a
#: slow day), given to the workers first. ``--dist loadfile`` hands out whole
#: files in the order :func:`pytest_collection_modifyitems` leaves them (pyproject's
#: ``--no-loadscope-reorder``); xdist's own order, most tests first, gave out the
#: model file (3 tests, 3 minutes on PostgreSQL when the machine is loaded) last,
#: and it ran alone for its whole length at the end of the run.
LONGEST_FIRST = (
    "tests/model/test_model.py",  # 180
    "tests/test_bench_smoke.py",  # 60
    "tests/e2e/test_cluster_exactness.py",  # 45
    "tests/fuzz/test_ci_args.py",  # 31
    "tests/fuzz/test_ci_framing.py",  # 26
)


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _schedule(items: list[pytest.Item]) -> None:
    """The longest files first, then the rest by their number of tests, most first
    (xdist's reorder, which the known lengths replace for those files)."""
    tests = Counter(map(_file, items))
    first = {path: n for n, path in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> tuple[int, int, str]:
        path = _file(item)
        return first.get(path, len(first)), -tests[path], path

    items.sort(key=key)  # stable: a file's tests keep their order


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _schedule(items)
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if DAEMON_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.e2e)
        if POSTGRES_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.postgres)


@contextmanager
def _session_processes() -> Iterator[None]:
    """Let a session fixture start processes here, outside the e2e rule."""
    global _session_spawning
    _session_spawning = True
    try:
        yield
    finally:
        _session_spawning = False


def _refuse_unmarked_spawn(event: str, args: tuple[Any, ...]) -> None:
    if _running is None or event not in _SPAWN_EVENTS or _session_spawning:
        return
    nodeid, may_spawn = _running
    if not may_spawn:
        raise RuntimeError(
            f"{nodeid} starts a process ({event} {args[:2]!r}) but is not marked e2e: "
            "mark it (pytestmark = pytest.mark.e2e) or use a fixture of DAEMON_FIXTURES"
        )


sys.addaudithook(_refuse_unmarked_spawn)


def pytest_sessionfinish() -> None:
    forkserver.shutdown()


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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.Server]:
    """The session's PostgreSQL server (:mod:`tests.postgres`: the environment variable,
    the default DSN, else a throwaway cluster); none skips or fails, saying why.
    """
    with ExitStack() as stack:
        with _session_processes():
            found = stack.enter_context(postgres.session_server(os.environ))
        if isinstance(found, postgres.NoServer):
            postgres.unavailable(found.reason, os.environ)
        yield found
        with _session_processes():
            stack.close()


@pytest.fixture(autouse=True)
def _postgres_gate(request: pytest.FixtureRequest) -> None:
    """A test marked ``postgres`` has a server, or skips (fails under CI) before it runs."""
    if request.node.get_closest_marker("postgres") is not None:
        request.getfixturevalue("postgres_server")


@pytest.fixture
def pg_dsn(postgres_server: postgres.Server) -> Iterator[str]:
    """The DSN of a fresh, empty database of its own, dropped after the test."""
    with postgres.fresh_database(postgres_server.admin_dsn) as dsn:
        yield dsn


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The end-to-end suite (``tests/e2e``) and the fault harnesses of ``tests/chaos``
    that start a daemon run on both stores: each of those tests
    is parametrized over ``daemon_store`` = ``sqlite`` and ``postgres`` (the latter
    marked ``postgres``: it skips without a server, and fails so under ``CI=true``).

    Not parametrized: tests that choose their own database (``pg_dsn``,
    ``postgres_server``: the PostgreSQL-only tests), and tests marked
    ``sqlite_only`` (SQLite's file, WAL and filesystem; their names say
    ``sqlite``). ``SLUICEGATE_TEST_STORE=sqlite`` or ``=postgres`` runs one store
    only, and with ``=postgres`` every other test that starts a daemon (the CLI,
    the SDK, the board, systemd) runs on PostgreSQL too.
    """
    if "daemon_store" not in metafunc.fixturenames:
        return
    definition = metafunc.definition
    if POSTGRES_FIXTURES.intersection(metafunc.fixturenames) or definition.get_closest_marker(
        "postgres"
    ):
        return
    chosen = os.environ.get("SLUICEGATE_TEST_STORE")
    if chosen in STORES:
        stores = [chosen]
    elif "tests/e2e/" in (path := definition.nodeid.replace(os.sep, "/")) or (
        "tests/chaos/" in path and DAEMON_FIXTURES.intersection(metafunc.fixturenames)
    ):
        stores = list(STORES)
    else:
        return  # SQLite: the fixture's default
    if definition.get_closest_marker("sqlite_only") is not None and stores != ["sqlite"]:
        stores = ["sqlite"] if "sqlite" in stores else []
    skip = pytest.mark.skip(reason="SQLite only (SLUICEGATE_TEST_STORE=postgres)")
    metafunc.parametrize("daemon_store", [
        pytest.param(s, marks=pytest.mark.postgres) if s == "postgres" else s for s in stores
    ] or [pytest.param("sqlite", marks=skip)])  # fmt: skip


@pytest.fixture(autouse=True)
def daemon_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store the test's daemons run on (see :func:`pytest_generate_tests`):
    ``postgres`` gives each test a fresh database of its own (``pg_dsn``), which
    every daemon it starts uses unless the test names a database
    (``tests/support.py``, ``SLUICEGATE_TEST_DATABASE``)."""
    store = getattr(request, "param", "sqlite")
    if store == "postgres":
        monkeypatch.setenv("SLUICEGATE_TEST_DATABASE", request.getfixturevalue("pg_dsn"))
    return store
