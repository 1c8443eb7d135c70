"""The pure pieces of start-up: the connection cap, the file limit, the pid lock,
the socket file's ownership, and the once-per-episode log filter."""

from __future__ import annotations

import logging
import os
import resource
import socket
from pathlib import Path

import pytest
import trio

from daemon.logs import OncePerEpisode
from daemon.pid_lock import PidLock, read_pid
from daemon.startup import (
    MIN_RESERVE_FDS,
    StartupError,
    connection_cap,
    raise_file_limit,
    reserve_fds,
)
from daemon.transport.socket_server import SocketFile, bind_unix_socket


@pytest.mark.parametrize(
    ("nofile", "reserve"), [(256, 128), (1024, 128), (20_000, 2_500), (65_536, 8_192)]
)
def test_reserve_is_at_least_128_or_an_eighth(nofile: int, reserve: int):
    assert reserve_fds(nofile) == reserve


def test_derived_cap_is_the_limit_minus_the_reserve():
    assert connection_cap(0, 1024) == (1024 - MIN_RESERVE_FDS, None)
    assert connection_cap(0, 65_536) == (65_536 - 8_192, None)
    assert connection_cap(0, 100) == (1, None)  # never zero


def test_configured_cap_is_kept_when_the_limit_allows_it():
    assert connection_cap(2000, 20_000) == (2000, None)
    assert connection_cap(896, 1024) == (896, None)


def test_configured_cap_above_the_limit_is_lowered_with_a_warning():
    cap, warning = connection_cap(5000, 1024)
    assert cap == 896
    assert warning is not None and "max_connections 5000" in warning and "896" in warning


def test_raise_file_limit_raises_the_soft_limit_to_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 512:
        pytest.skip("needs a finite hard limit of at least 512")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert raise_file_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_second_lock_is_refused_naming_the_holders_pid(tmp_path: Path):
    path = tmp_path / "sluicegate.lock"
    first = PidLock(path, f"state directory {tmp_path}")
    first.acquire()
    try:
        assert read_pid(path) == os.getpid()
        with pytest.raises(StartupError) as refused:
            PidLock(path, f"state directory {tmp_path}").acquire()
        assert refused.value.status == 2
        assert refused.value.message == (
            f"another daemon (pid {os.getpid()}) is running on state directory {tmp_path} "
            f"(lock {path})"
        )
    finally:
        first.release()
    # Released: the next one takes it (the file stays in place).
    again = PidLock(path, "x")
    again.acquire()
    again.release()


def test_a_lock_in_a_missing_directory_is_a_startup_error(tmp_path: Path):
    with pytest.raises(StartupError, match=r"cannot create lock file .*: no such file"):
        PidLock(tmp_path / "missing" / "sluicegate.lock", "x").acquire()


def close(listener: trio.SocketListener) -> None:
    """Close a listener outside a Trio run (its own close needs one)."""
    os.close(listener.socket.detach())


def test_socket_file_is_removed_only_while_it_is_ours(tmp_path: Path):
    path = tmp_path / "s.sock"
    listener, ours = bind_unix_socket(path)
    try:
        path.unlink()  # deleted by someone; another process binds the path
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other.bind(str(path))
        try:
            assert not ours.remove()
            assert path.exists()
        finally:
            other.close()
    finally:
        close(listener)


def test_own_socket_file_is_removed(tmp_path: Path):
    path = tmp_path / "s.sock"
    listener, ours = bind_unix_socket(path)
    close(listener)
    assert isinstance(ours, SocketFile) and ours.remove()
    assert not path.exists()
    assert not ours.remove()  # already gone: nothing to do


def test_a_live_socket_path_is_a_startup_error(tmp_path: Path):
    path = tmp_path / "s.sock"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(path))
    live.listen(1)
    try:
        with pytest.raises(StartupError, match="is in use by a live daemon"):
            bind_unix_socket(path)
    finally:
        live.close()


def test_once_per_episode_keeps_one_record_without_its_traceback():
    keep = OncePerEpisode(quiet_s=3600)

    def record() -> logging.LogRecord:
        try:
            raise OSError(24, "Too many open files")
        except OSError as exc:
            return logging.LogRecord(
                "trio", logging.ERROR, "", 0, "accept", (), (OSError, exc, None)
            )

    first = record()
    assert keep.filter(first) and first.exc_info is None
    assert not keep.filter(record())
