"""The suite's forkserver (tests/forkserver.py) gives what an executed ``sluice`` gives.

Every end-to-end test relies on it, so it is checked against the real thing: the
same output, exit status, environment and working directory as ``python -m
daemon.cli.main``, a signal's status as ``Popen`` reports it, and the cases it must
leave to an executed interpreter.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forkserver
from tests.support import DaemonProcess, sluice

pytestmark = pytest.mark.e2e


def executed(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", *args],
        capture_output=True, text=True, timeout=60, cwd=cwd, env={**os.environ, **env},
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["no-such-command"],  # argparse: exit 2, usage on stderr
        ["config", "check", "--config", "missing.toml"],  # a config error, one line
        ["config", "check"],  # the config named by SLUICEGATE_CONFIG, relative to cwd
        ["status", "--socket", "nowhere.sock"],  # cannot connect
    ],
)
def test_a_forked_run_answers_as_an_executed_one(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "mine.toml").write_text('[daemon]\nlease = "nonsense"\n')
    env = {"SLUICEGATE_CONFIG": "mine.toml", "SLUICEGATE_SOCKET": "nowhere.sock"}
    forked = sluice(*args, cwd=tmp_path, env=env)
    real = executed(*args, cwd=tmp_path, env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode, real.stdout, real.stderr,
    )  # fmt: skip
    assert forked.returncode != 0 or args == ["--help"]


def test_a_forked_daemon_stops_on_sigterm_with_status_0_and_reports_a_kill_as_popen_does(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = DaemonProcess(tmp_path / "a"), DaemonProcess(tmp_path / "b")
    try:
        first.start()
        assert isinstance(first.proc, forkserver.ForkedProcess)
        assert first.proc.poll() is None
        with first.client() as client:
            job = client.ok("enqueue", queue="q", type="t")["job"]
        assert first.stop(signal.SIGTERM) == 0
        first.start()  # the same store: the job kept, as after any restart
        with first.client() as client:
            assert client.ok("get", job_id=job["id"])["job"]["status"] == "pending"

        second.start()
        second.kill()
        assert second.proc is not None and second.proc.returncode == -signal.SIGKILL
        with pytest.raises(ProcessLookupError):
            os.kill(second.proc.pid, 0)  # reaped: no zombie left behind
    finally:
        first.cleanup()
        second.cleanup()


def test_what_a_fork_cannot_reproduce_is_executed(monkeypatch: pytest.MonkeyPatch) -> None:
    here = dict(os.environ)
    assert forkserver.usable(here)
    assert not forkserver.usable(here, {"pass_fds": (5,)})
    assert not forkserver.usable({**here, "LD_PRELOAD": "/usr/lib/faketime/libfaketime.so.1"})
    assert not forkserver.usable({**here, "FAKETIME": "+1h"})
    assert not forkserver.usable({**here, "PYTHONHASHSEED": "1"})
    assert not forkserver.usable({**here, "TZ": "America/Los_Angeles"})
    assert not forkserver.usable({**here, "SLUICEGATE_FAILPOINTS": "commit_before=exit"})
    monkeypatch.setenv("SLUICEGATE_TEST_FORK", "0")
    assert not forkserver.usable(here)


def test_a_pid_the_kernel_reuses_is_not_reported_as_its_earlier_childs_exit(
    tmp_path: Path,
) -> None:
    """A stand-in forkserver answers two spawns with the same pid, the first one's
    exit between them: the second child runs until its own exit is reported (CI saw
    a daemon "exited 0" at start with an empty log: its pid's earlier exit)."""
    script = tmp_path / "reuse.py"
    script.write_text(
        "import json, sys\n"
        "def send(m):\n"
        "    print(json.dumps(m), flush=True)\n"
        "sys.stdin.readline(); send({'pid': 4242}); send({'exited': 4242, 'code': 0})\n"
        "sys.stdin.readline(); send({'pid': 4242})\n"
        "sys.stdin.readline(); send({'exited': 4242, 'code': -9}); send({'pid': 4343})\n"
        "sys.stdin.read()\n"
    )
    client = forkserver._Client([sys.executable, str(script)])
    try:
        args = dict(cwd=tmp_path, env={}, stdout=tmp_path / "out", stderr=None)
        first = client.spawn(["serve"], **args)
        assert first.wait(timeout=10) == 0
        second = client.spawn(["serve"], **args)
        assert second.pid == first.pid
        assert second.poll() is None  # running, not the first one's 0
        client.spawn(["ends the second"], **args)  # the stand-in then reports its exit
        assert second.wait(timeout=10) == -9
    finally:
        client.close()
