"""systemd integration: socket activation, sd_notify, the watchdog, SIGHUP, the units.

The daemon is started the way systemd starts it: the test binds the listening
socket itself and hands it over as fd 3 with ``LISTEN_FDS=1`` and
``LISTEN_PID`` set to the daemon's own pid (a tiny trampoline sets it, then
execs), and binds the ``$NOTIFY_SOCKET`` datagram socket the daemon reports to.
Every wait is for an event (a datagram, a log line, an exit) under a generous
deadline; nothing asserts how long anything took.
"""

from __future__ import annotations

import hashlib
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import ROOT, RawClient, free_port

UNITS = ROOT / "systemd"
SHIPPED_CONFIG = ROOT / "config" / "sluicegate.toml"
WAIT = 30.0  # seconds: a deadline for events on a busy 2-core machine, not a timing claim

# Runs in the child: move the inherited socket to fd 3, set LISTEN_PID to its
# own pid (which exec keeps), optionally refuse writable+executable memory the
# way MemoryDenyWriteExecute= does, then exec `sluice`.
TRAMPOLINE = r"""
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
if os.environ.get("WATCHDOG_PID") == "self":
    os.environ["WATCHDOG_PID"] = str(os.getpid())
if os.environ.pop("TEST_MDWE", ""):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN): kept across execve.
    if libc.prctl(65, 1, 0, 0, 0) != 0:
        sys.exit(77)
os.execv(sys.executable, [sys.executable, "-m", "daemon.cli.main", *sys.argv[2:]])
"""


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths are limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="sg-", dir="/tmp") as path:
        yield Path(path)


class ActivatedDaemon:
    """``sluice serve`` started as systemd starts it: a passed socket, NOTIFY_SOCKET.

    One selector watches both the notify socket and the daemon's output, so a
    wait ends at the awaited datagram or log line, or at once when the daemon
    exits.
    """

    def __init__(self, workdir: Path, extra_config: str = "", *, socket_in_config: bool = False,
                 http: str = "") -> None:  # fmt: skip
        self.workdir = workdir
        self.state = workdir / "state"
        self.socket = workdir / "activated.sock"
        self.config_path = workdir / "sluicegate.toml"
        # Unless asked, the config names another socket path: the daemon must serve
        # the passed socket and never bind that one.
        self.config_socket = self.socket if socket_in_config else self.state / "own.sock"
        self.base_config = (
            "[daemon]\n"
            f'state_dir = "{self.state}"\n'
            f'socket = "{self.config_socket}"\n'
            f'http = "{http}"\n' + extra_config
        )
        self.config_path.write_text(self.base_config)
        self.notify_path = workdir / "notify.sock"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(self.notify_path))
        self.notify.setblocking(False)
        self.notified: list[str] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.socket))
        self.listener.listen(64)
        self.proc: subprocess.Popen[bytes] | None = None
        self.output = ""
        self.output_ended = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.notify, selectors.EVENT_READ)

    def start(self, env: dict[str, str] | None = None) -> None:
        fd = self.listener.fileno()
        environ = {
            k: v for k, v in os.environ.items() if not k.startswith(("LISTEN_", "WATCHDOG_"))
        }
        environ.pop("JOURNAL_STREAM", None)
        environ.update({"NOTIFY_SOCKET": str(self.notify_path), **(env or {})})
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAMPOLINE, str(fd), "serve", "--config",
             str(self.config_path)],
            cwd=self.workdir,
            env=environ,
            pass_fds=[fd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)

    # -- events -----------------------------------------------------------------

    def _take_datagrams(self) -> None:
        while True:
            try:
                data = self.notify.recv(4096)
            except BlockingIOError:
                return
            self.notified += data.decode().splitlines()

    def _pump(self, timeout: float) -> None:
        """Take whatever arrives within ``timeout``: datagrams and output."""
        for key, _ in self._selector.select(max(0.0, timeout)):
            if key.fileobj is self.notify:
                self._take_datagrams()
                continue
            assert self.proc is not None and self.proc.stdout is not None
            try:
                data = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                continue
            if data:
                self.output += data.decode(errors="replace")
            else:
                self._selector.unregister(self.proc.stdout)
                self.proc.stdout.close()
                self.output_ended = True
                self._take_datagrams()  # everything sent before the exit is queued

    def _wait(self, done: Callable[[], object], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if self.output_ended or left <= 0:
                raise AssertionError(
                    f"no {what} (daemon {'exited' if self.output_ended else 'still running'}); "
                    f"notified {self.notified}; output:\n{self.output}"
                )
            self._pump(left)

    def wait_notify(self, message: str, timeout: float = WAIT) -> None:
        """Wait for one more datagram line ``message`` than seen so far."""
        seen = self.notified.count(message)
        self._wait(lambda: self.notified.count(message) > seen, message, timeout)

    def wait_for_log(self, pattern: str, timeout: float = WAIT) -> None:
        """Wait until the daemon prints a line matching ``pattern`` (a regex)."""
        start = len(self.output)
        self._wait(lambda: re.search(pattern, self.output[start:]), f"log /{pattern}/", timeout)

    def wait_exit(self, timeout: float = WAIT) -> int:
        """Wait for the daemon to exit, reading its output to the end."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self.output_ended and time.monotonic() < deadline:
            self._pump(deadline - time.monotonic())
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    # -- actions ----------------------------------------------------------------

    def client(self) -> RawClient:
        return RawClient(self.socket, timeout=WAIT)

    def send(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        return self.wait_exit()

    def close(self) -> None:
        """Release everything; kill the daemon if a test left it running."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(WAIT)
            if self.proc.stdout is not None and not self.proc.stdout.closed:
                self._selector.unregister(self.proc.stdout)
                self.proc.stdout.close()
        self._selector.close()
        self.listener.close()
        self.notify.close()


@pytest.fixture
def activated(short_dir: Path) -> Iterator[ActivatedDaemon]:
    daemon = ActivatedDaemon(short_dir)
    try:
        yield daemon
    finally:
        daemon.close()


def _status_answers(daemon: ActivatedDaemon) -> dict[str, Any]:
    client = daemon.client()
    try:
        hello = client.ok("hello", client="test_systemd")
        assert hello["protocol"] == 1
        return client.ok("status")
    finally:
        client.close()


# -- (a) socket activation, READY, STOPPING, the watchdog ----------------------


@pytest.mark.e2e
def test_ready_once_the_passed_socket_serves_and_sigterm_stops(activated: ActivatedDaemon):
    activated.start()
    activated.wait_notify("READY=1")
    # READY=1 is in hand: the passed socket must answer right now.
    status = _status_answers(activated)
    assert status["namespace"] == "default" and status["daemon"]["store"] == "sqlite"
    # It served the socket it was given and bound none of its own.
    assert not activated.config_socket.exists()
    assert activated.notified.count("READY=1") == 1

    activated.send(signal.SIGTERM)
    activated.wait_notify("STOPPING=1")
    assert activated.wait_exit() == 0
    assert "serving socket=LISTEN_FDS" in activated.output
    assert activated.notified.count("READY=1") == 1
    # systemd's socket stays where the socket unit put it.
    assert activated.socket.exists()


@pytest.mark.e2e
def test_requests_queued_before_start_are_served(activated: ActivatedDaemon):
    """With socket activation, a client may connect before the daemon runs."""
    early = activated.client()
    try:
        req = early.request("status")
        activated.start()
        activated.wait_notify("READY=1")
        answer = early.answer(req)
        assert answer["ok"] and answer["namespace"] == "default"
    finally:
        early.close()
    assert activated.stop() == 0


@pytest.mark.e2e
def test_passed_socket_file_survives_a_stop_when_the_config_names_it(short_dir: Path):
    """The shipped config names /run/sluicegate/sluicegate.sock, the socket unit's path."""
    daemon = ActivatedDaemon(short_dir, socket_in_config=True)
    try:
        daemon.start()
        daemon.wait_notify("READY=1")
        _status_answers(daemon)
        assert daemon.stop() == 0
        assert daemon.socket.exists(), "the daemon removed the socket systemd owns"
    finally:
        daemon.close()


@pytest.mark.e2e
def test_no_ready_when_the_daemon_cannot_serve(short_dir: Path):
    """A store that cannot be opened: the daemon exits non-zero and never says READY=1."""
    unusable = short_dir / "db-is-a-directory"
    unusable.mkdir()
    daemon = ActivatedDaemon(short_dir, extra_config=f'database = "{unusable}"\n')
    try:
        daemon.start()
        assert daemon.wait_exit() != 0
        assert "READY=1" not in daemon.notified
    finally:
        daemon.close()


@pytest.mark.e2e
@pytest.mark.parametrize("watchdog_pid", [None, "self"])
def test_watchdog_pings(activated: ActivatedDaemon, watchdog_pid: str | None):
    env = {"WATCHDOG_USEC": "200000"}
    if watchdog_pid is not None:
        env["WATCHDOG_PID"] = watchdog_pid  # the trampoline puts the daemon's pid here
    activated.start(env)
    activated.wait_notify("READY=1")
    activated.wait_notify("WATCHDOG=1")
    activated.wait_notify("WATCHDOG=1")  # it keeps pinging
    assert activated.stop() == 0


# -- (c) SIGHUP -----------------------------------------------------------------


@pytest.mark.e2e
def test_sighup_with_a_broken_config_keeps_serving(short_dir: Path):
    port = free_port()
    activated = ActivatedDaemon(short_dir, http=f"127.0.0.1:{port}")
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT)
    try:
        activated.start()
        activated.wait_notify("READY=1")
        # One round trip first: daemon/main.py starts its signal task with start_soon
        # just before READY=1, so a signal sent the instant READY=1 arrives can still
        # meet the default disposition (SIGHUP then kills the daemon).
        _status_answers(activated)

        activated.config_path.write_text(activated.base_config + "this is [not toml\n")
        activated.send(signal.SIGHUP)
        activated.wait_for_log(r"ERROR .*reload refused, keeping the last good config")
        assert activated.proc is not None and activated.proc.poll() is None
        _status_answers(activated)  # still open mode: the last good config holds
        health = http.get("/healthz").json()
        assert health["status"] == "degraded" and health["problems"], health

        # A good file is taken at the next SIGHUP: tokens now guard new connections.
        token = "sighup-test-token"
        activated.config_path.write_text(
            activated.base_config
            + "\n[[tokens]]\n"
            + 'name = "t"\n'
            + f'sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
        )
        activated.send(signal.SIGHUP)
        activated.wait_for_log(r"config reloaded from ")
        health = http.get("/healthz").json()
        assert (health["status"], health.get("problems")) == ("ok", None)
        client = activated.client()
        try:
            assert client.error("status")["code"] == "unauthenticated"
            client.ok("hello", token=token)
            client.ok("status")
        finally:
            client.close()

        activated.send(signal.SIGTERM)
        activated.wait_notify("STOPPING=1")
        assert activated.wait_exit() == 0
    finally:
        http.close()
        activated.close()


# -- MemoryDenyWriteExecute= ------------------------------------------------------


@pytest.mark.e2e
def test_daemon_runs_with_memory_deny_write_execute(activated: ActivatedDaemon):
    """The unit sets MemoryDenyWriteExecute=yes; the kernel's PR_SET_MDWE is the same rule.

    Exercises the socket, SQLite, orjson, msgpack and hypercorn under it.
    """
    port = free_port()
    activated.config_path.write_text(
        activated.base_config.replace('http = ""', f'http = "127.0.0.1:{port}"')
    )
    activated.start({"TEST_MDWE": "1"})
    try:
        activated.wait_notify("READY=1")
    except AssertionError:
        if activated.stop(signal.SIGKILL) == 77:
            pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+)")
        raise
    client = activated.client()
    try:
        job = client.ok("enqueue", queue="q", type="t", payload={"n": 1})["job"]
        claimed = client.ok("claim_next", queues=["q"])["jobs"][0]["job"]
        done = client.ok("complete", job_id=job["id"], lease=claimed["lease"], result={"x": 1})
        assert done["job"]["status"] == "completed"
    finally:
        client.close()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as http:
        health = http.get("/healthz").json()
        assert (health["status"], health["database"]["reachable"]) == ("ok", True)
        assert b"sluicegate_jobs_completed" in http.get("/metrics").content
        packed = http.get(f"/jobs/{job['id']}", headers={"accept": "application/msgpack"})
        assert packed.headers["content-type"] == "application/msgpack"
    assert activated.stop() == 0


# -- (b) the unit files --------------------------------------------------------

analyze = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(analyze is None, reason="systemd-analyze is not installed")


def _sluice_executable() -> str:
    candidate = Path(sys.executable).with_name("sluice")
    found = str(candidate) if candidate.exists() else shutil.which("sluice")
    assert found, "the sluice console script is not installed"
    return found


def _unit_value(unit: Path, key: str) -> str:
    values = [line.split("=", 1)[1] for line in unit.read_text().splitlines()
              if line.startswith(f"{key}=")]  # fmt: skip
    assert len(values) == 1, (key, values)
    return values[0]


@pytest.mark.e2e
@needs_analyze
def test_units_verify(tmp_path: Path):
    # The units point at /opt/sluicegate/bin/sluice, which this machine need not
    # have: verify a copy whose ExecStart names the sluice installed here.
    original = _unit_value(UNITS / "sluicegate.service", "ExecStart")
    program = original.split()[0]
    for name in ("sluicegate.service", "sluicegate.socket"):
        text = (UNITS / name).read_text()
        (tmp_path / name).write_text(text.replace(program, _sluice_executable()))
    copy = subprocess.run(
        [analyze, "verify", str(tmp_path / "sluicegate.service"),
         str(tmp_path / "sluicegate.socket")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert copy.returncode == 0, copy.stdout + copy.stderr
    assert copy.stdout.strip() == "" and copy.stderr.strip() == "", copy.stdout + copy.stderr

    # The shipped units: the missing program is the one complaint allowed.
    shipped = subprocess.run(
        [analyze, "verify", str(UNITS / "sluicegate.service"), str(UNITS / "sluicegate.socket")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    complaints = [line for line in (shipped.stdout + shipped.stderr).splitlines() if line.strip()]
    allowed = f"Command {program} is not executable"
    assert all(allowed in line for line in complaints), complaints


@pytest.mark.e2e
@needs_analyze
def test_service_exposure_score_is_at_most_2(tmp_path: Path):
    result = subprocess.run(
        [analyze, "security", "--offline=yes", str(UNITS / "sluicegate.service")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    match = re.search(r"Overall exposure level for sluicegate\.service: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match[1]) <= 2.0, result.stdout


def test_units_and_shipped_config_agree():
    service = UNITS / "sluicegate.service"
    sock = UNITS / "sluicegate.socket"
    assert _unit_value(service, "Type") == "notify"
    exec_start = _unit_value(service, "ExecStart").split()
    assert exec_start[1:] == ["serve", "--config", "/etc/sluicegate/sluicegate.toml"]
    assert _unit_value(service, "ExecReload") == "/bin/kill -HUP $MAINPID"
    assert _unit_value(sock, "ListenStream") == "/run/sluicegate/sluicegate.sock"
    assert _unit_value(sock, "SocketMode") == "0660"
    assert _unit_value(sock, "SocketGroup") == _unit_value(service, "Group") == "sluicegate"
    assert _unit_value(sock, "Service") == "sluicegate.service"

    from daemon.config import load_config

    config = load_config(SHIPPED_CONFIG)
    assert config.daemon.socket == _unit_value(sock, "ListenStream")
    assert config.daemon.state_dir == "/var/lib/" + _unit_value(service, "StateDirectory")
    # The watchdog pings every WatchdogSec/2; a stop has shutdown_grace to drain.
    stop_s = int(_unit_value(service, "TimeoutStopSec").removesuffix("s"))
    assert stop_s * 1000 > config.daemon.shutdown_grace


@pytest.mark.e2e
@pytest.mark.skipif(
    not (shutil.which("systemd-sysusers") and shutil.which("systemd-tmpfiles")),
    reason="systemd-sysusers/systemd-tmpfiles are not installed",
)
def test_sysusers_and_tmpfiles_snippets(tmp_path: Path):
    (tmp_path / "etc").mkdir()
    for tool, name in (("systemd-sysusers", "sluicegate.sysusers.conf"),
                       ("systemd-tmpfiles", "sluicegate.tmpfiles.conf")):  # fmt: skip
        args = [tool, f"--root={tmp_path}"] + (["--create"] if "tmpfiles" in tool else []) + ["-"]
        with open(UNITS / name, "rb") as snippet:
            done = subprocess.run(args, stdin=snippet, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    users = {line.split(":")[0]: line.split(":") for line in
             (tmp_path / "etc/passwd").read_text().splitlines()}  # fmt: skip
    assert users["sluicegate"][6] == "/usr/sbin/nologin"
    groups = {line.split(":")[0] for line in (tmp_path / "etc/group").read_text().splitlines()}
    assert "sluicegate" in groups
    uid = int(users["sluicegate"][2])
    for path, mode in (("var/lib/sluicegate", 0o700), ("run/sluicegate", 0o750)):
        st = (tmp_path / path).stat()
        assert (st.st_mode & 0o7777, st.st_uid) == (mode, uid), path
