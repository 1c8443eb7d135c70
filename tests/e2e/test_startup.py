"""Start-up on a real ``sluice serve``: one daemon per state directory and socket,
and every start-up failure is one line on stderr, exit 2, nothing left behind.

Issue 13, items 8 (a stopping daemon deleted another daemon's socket) and 9
(a port in use printed a 64-line traceback after creating the database).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support import ROOT, DaemonProcess, RawClient, free_port, wait_until

STARTUP_TIMEOUT = 60  # seconds: a deadline on a busy machine, not a timing claim


def serve(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``sluice serve`` for ``daemon``'s config to its exit (it must not start)."""
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "serve", "--config", str(daemon.config_path),
         *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
    )  # fmt: skip


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The failure's single stderr line (and nothing on stdout)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    assert lines[0].startswith("sluice: "), lines
    return lines[0]


def set_config(daemon: DaemonProcess, **daemon_keys: str) -> None:
    """Rewrite ``daemon``'s config file with these ``[daemon]`` keys replaced."""
    lines = daemon.config_path.read_text().splitlines()
    keep = [line for line in lines if line.split(" = ")[0] not in daemon_keys]
    extra = [f'{key} = "{value}"' for key, value in daemon_keys.items()]
    daemon.config_path.write_text("\n".join(keep[:1] + extra + keep[1:]) + "\n")


# -- item 8: one daemon per state directory and socket path ----------------------


def test_a_second_daemon_on_the_same_state_dir_is_refused_naming_the_pid(
    make_daemon: Callable[..., DaemonProcess],
):
    first = make_daemon()
    second = make_daemon(start=False)
    set_config(second, state_dir=str(first.state))
    result = serve(second)
    assert result.returncode == 2
    line = one_line(result)
    assert f"pid {first.proc.pid}" in line and str(first.state) in line, line
    # The first daemon was not disturbed.
    with first.client() as client:
        assert client.ok("status")["namespace"] == "default"


def test_a_daemon_on_a_deleted_socket_path_is_refused_and_the_first_stops_cleanly(
    make_daemon: Callable[..., DaemonProcess],
):
    """The issue's repro: delete daemon 1's socket, start daemon 2 on that path."""
    first = make_daemon()
    first.socket.unlink()
    second = make_daemon(start=False)  # its own state directory, the same socket path
    set_config(second, socket=str(first.socket))
    result = serve(second)
    assert result.returncode == 2
    line = one_line(result)
    assert f"pid {first.proc.pid}" in line and str(first.socket) in line, line
    assert first.stop() == 0


def test_a_stopping_daemon_removes_only_the_socket_it_bound(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
):
    """Whoever bound the path after ours was deleted keeps the file (inode check)."""
    first = make_daemon()
    first.socket.unlink()
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # stands in for another daemon
    try:
        other.bind(str(first.socket))
        other.listen(1)
        assert first.stop() == 0
        assert first.socket.exists(), "the stopping daemon removed a socket it did not bind"
        with RawClient(first.socket) as probe:  # still reachable
            assert probe.sock.fileno() >= 0
    finally:
        other.close()


def test_a_stopping_daemon_removes_its_own_socket(make_daemon: Callable[..., DaemonProcess]):
    first = make_daemon()
    assert first.stop() == 0
    assert not first.socket.exists()
    # The lock files stay (removing them would race a starting daemon); the next
    # daemon takes them over.
    first.start()
    with first.client() as client:
        client.ok("status")


def test_a_socket_path_served_by_something_else_is_one_line(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
):
    path = tmp_path / "live.sock"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        live.bind(str(path))
        live.listen(1)
        daemon = make_daemon(start=False)
        set_config(daemon, socket=str(path))
        result = serve(daemon)
        assert result.returncode == 2
        assert one_line(result) == f"sluice: socket {path} is in use by a live daemon"
        assert not (daemon.state / "sluicegate.db").exists()
    finally:
        live.close()


# -- item 9: start-up failures are one line, exit 2, before the store -----------


@pytest.fixture
def taken_port():
    """A TCP port with a listener on it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def test_port_in_use_is_one_line_exit_2_and_no_database(
    make_daemon: Callable[..., DaemonProcess], taken_port: int
):
    daemon = make_daemon(start=False)
    set_config(daemon, http=f"127.0.0.1:{taken_port}")
    result = serve(daemon)
    assert result.returncode == 2
    assert one_line(result) == (
        f"sluice: cannot listen on 127.0.0.1:{taken_port}: address already in use "
        "(set [daemon] http or --http)"
    )
    assert not (daemon.state / "sluicegate.db").exists()
    assert not daemon.socket.exists()
    assert not daemon.state.exists()  # the start made it, and the failure took it back


def test_a_failed_start_keeps_a_state_dir_it_did_not_make(
    make_daemon: Callable[..., DaemonProcess], taken_port: int
):
    daemon = make_daemon(start=False)
    daemon.state.mkdir()
    (daemon.state / "operator-notes.txt").write_text("mine")
    set_config(daemon, http=f"127.0.0.1:{taken_port}")
    assert serve(daemon).returncode == 2
    assert (daemon.state / "operator-notes.txt").read_text() == "mine"
    assert not (daemon.state / "sluicegate.db").exists()


def test_http_option_overrides_the_config(
    make_daemon: Callable[..., DaemonProcess], taken_port: int
):
    daemon = make_daemon(start=False)  # its config names a free port
    result = serve(daemon, "--http", f"127.0.0.1:{taken_port}")
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{taken_port}: address already in use" in one_line(result)


def test_http_option_serves_on_the_address_given(make_daemon: Callable[..., DaemonProcess]):
    daemon = make_daemon(start=False)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "serve", "--config", str(daemon.config_path),
         "--http", f"127.0.0.1:{port}"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=STARTUP_TIMEOUT, interval=0.05, what="/healthz on --http")
    finally:
        proc.terminate()
        assert proc.wait(STARTUP_TIMEOUT) == 0


def test_debug_adds_the_traceback(make_daemon: Callable[..., DaemonProcess], taken_port: int):
    daemon = make_daemon(start=False)
    set_config(daemon, http=f"127.0.0.1:{taken_port}")
    result = serve(daemon, "--debug")
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("sluice: cannot listen on")


def test_state_dir_that_cannot_be_created_is_one_line(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    daemon = make_daemon(start=False)
    set_config(daemon, state_dir=str(blocker / "state"))
    result = serve(daemon)
    assert result.returncode == 2
    assert one_line(result) == (
        f"sluice: cannot create state directory {blocker / 'state'}: not a directory"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_state_dir_is_one_line(make_daemon: Callable[..., DaemonProcess]):
    daemon = make_daemon(start=False)
    daemon.state.mkdir()
    daemon.state.chmod(0o500)
    try:
        result = serve(daemon)
    finally:
        daemon.state.chmod(0o700)
    assert result.returncode == 2
    assert one_line(result) == f"sluice: state directory {daemon.state} is not writable"


def test_database_that_cannot_be_opened_is_one_line(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
):
    unusable = tmp_path / "db-is-a-directory"
    unusable.mkdir()
    daemon = make_daemon(start=False)
    set_config(daemon, database=str(unusable))
    result = serve(daemon)
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith(f"sluice: cannot open the database {unusable}: "), line
    # Nothing was served, so nothing is left: no socket file, no "stopped".
    assert not daemon.socket.exists()
