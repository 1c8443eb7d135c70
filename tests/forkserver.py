"""``sluice`` processes forked from an interpreter that has imported Sluicegate already.

A ``python -m daemon.cli.main serve`` spends about 0.55 s of CPU importing before it
does anything (trio, hypercorn, the board, sqlite-utils, the verbs), and the suite
starts a daemon in every one of its ~600 end-to-end tests: on two cores that import
alone was a third of the suite's time. So each pytest worker keeps one *forkserver*,
a ``python -m tests.forkserver`` that imports :data:`PRELOAD` once and then, per
request, forks a child that runs :func:`daemon.cli.main.main` with the request's
arguments, working directory, environment and output files. The child is a real
``sluice`` process (its own pid, signals, exit status, ``kill -9``) that has
skipped only the interpreter's start-up and the imports; it runs the same code from
``main(argv)`` on, and exits the way the interpreter does (non-daemon threads joined,
``atexit`` run, streams flushed).

Where a fork could differ from a fresh interpreter, :func:`usable` says no and the
caller executes ``python -m daemon.cli.main`` as before: extra ``Popen`` arguments
(``pass_fds``, ``preexec_fn``, pipes), and an environment that differs from the
forkserver's in what is read before ``main`` runs (``LD_PRELOAD``, libfaketime,
``PYTHON*``, the failpoints read at import). ``SLUICEGATE_TEST_FORK=0`` executes
every process.

The protocol on the forkserver's stdin and stdout is JSON lines: a request
``{"argv", "cwd", "env", "stdout", "stderr"}`` is answered ``{"pid": N}``; when a
child exits, ``{"exited": N, "code": C}`` follows (``C`` as ``Popen.returncode``:
``-signal`` for a signal).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: What a forked child has imported already: ``sluice``'s entry point and the daemon.
PRELOAD = ("daemon.cli.main", "daemon.main")

#: Environment read before ``main`` runs (by the loader, the interpreter, the C
#: library's zone and locale, or at import): a child whose environment differs from
#: the forkserver's here is executed.
_STARTUP_ENV = ("LD_PRELOAD", "FAKETIME", "PYTHON", "TZ", "LANG", "LC_", "SLUICEGATE_FAILPOINTS")

#: ``sys.audit`` event of a fork, so that the e2e rule (tests/conftest.py) sees it.
AUDIT_EVENT = "sluicegate.fork"


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_ENV)}


class ForkedProcess:
    """The part of :class:`subprocess.Popen` the tests use, for a forked child."""

    def __init__(self, server: _Client, pid: int, status: _Exit, args: list[str]) -> None:
        self._server = server
        self._status = status
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status, or None while the child runs."""
        if self.returncode is None:
            self.returncode = self._server.exit_code(self._status, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child's exit; :class:`subprocess.TimeoutExpired` after ``timeout``."""
        if self.returncode is None:
            code = self._server.exit_code(self._status, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the child, unless it has exited (as ``Popen.send_signal``)."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Exit:
    """One child's exit status, once the forkserver reports it.

    Kept per child, not per pid: the kernel reuses pids (32,768 by default, and a
    suite run forks and executes many more), so an earlier child's exit under a
    pid must never be read as a later child's (CI once saw a daemon "exit 0" at
    start with an empty log)."""

    code: int | None = None


class _Client:
    """This process's forkserver: started on first use, ended with the process."""

    def __init__(self, command: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            command or [sys.executable, "-m", "tests.forkserver"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_BASE_ENV,
        )
        self._lock = threading.Lock()
        self._pids: queue.Queue[tuple[int, _Exit] | None] = queue.Queue()
        self._running: dict[int, _Exit] = {}  # pid -> the exit of the child now under it
        self._exited = threading.Condition()
        self._closed = False
        threading.Thread(target=self._read, name="forkserver", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "pid" in message:
                # An earlier child's exit under this pid came before, on this pipe.
                status = self._running[message["pid"]] = _Exit()
                self._pids.put((message["pid"], status))
            else:
                with self._exited:
                    self._running.pop(message["exited"]).code = message["code"]
                    self._exited.notify_all()
        with self._exited:
            self._closed = True
            self._exited.notify_all()
        self._pids.put(None)

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], stdout: Path,
              stderr: Path | None) -> ForkedProcess:  # fmt: skip
        sys.audit(AUDIT_EVENT, argv)
        request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(stdout),
                   "stderr": str(stderr) if stderr else None}  # fmt: skip
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            child = self._pids.get(timeout=30)
        if child is None:
            raise RuntimeError("the forkserver exited")
        return ForkedProcess(self, *child, ["sluice", *argv])

    def exit_code(self, status: _Exit, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._exited:
            while status.code is None:
                if self._closed:
                    raise RuntimeError("the forkserver exited before its child")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._exited.wait(left)
            return status.code

    def close(self) -> None:
        """End the forkserver (its children are their tests' to stop)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


_client: _Client | None = None
_client_lock = threading.Lock()
#: The environment the forkserver starts with: this process's when it was imported
#: (at collection, before any test changed it).
_BASE_ENV = dict(os.environ)


def usable(env: dict[str, str], popen: dict[str, Any] | None = None) -> bool:
    """Whether a child with this environment and these ``Popen`` arguments may be forked."""
    if popen or os.environ.get("SLUICEGATE_TEST_FORK") == "0":
        return False
    return _startup_env(env) == _startup_env(_BASE_ENV)


def spawn(argv: list[str], *, cwd: Path, env: dict[str, str], stdout: Path,
          stderr: Path | None = None) -> ForkedProcess:  # fmt: skip
    """Fork ``sluice argv`` (stdout appended to ``stdout``, stderr to ``stderr`` or there)."""
    global _client
    with _client_lock:
        if _client is None or _client.proc.poll() is not None:
            _client = _Client()
    return _client.spawn(argv, cwd, env, stdout, stderr)


def shutdown() -> None:
    """End this process's forkserver, if it started one (at the end of the session)."""
    global _client
    with _client_lock:
        if _client is not None:
            _client.close()
            _client = None


# -- the forkserver itself (python -m tests.forkserver) --


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m daemon.cli.main ARGV``, never return."""
    code: Any = 1
    try:
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        err = (
            os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if request["stderr"]
            else out
        )
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the control pipes, the selector's
        os.environ.clear()
        os.environ.update(request["env"])
        main_path = str(ROOT / "daemon" / "cli" / "main.py")
        sys.argv = [main_path, *request["argv"]]
        sys.path[0] = request["cwd"]  # as ``-m`` run there would have it
        from daemon.cli.main import main

        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    try:  # the interpreter's own exit: threads joined, atexit, streams flushed
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit((code or 0) & 0xFF)


def _serve() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending = b""

    def send(message: dict[str, Any]) -> None:
        os.write(1, json.dumps(message).encode() + b"\n")

    while True:
        for key, _events in selector.select():
            if key.data is None:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    return  # the tests' process has gone: its children are its to stop
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        _child(request)
                    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                    send({"pid": pid})
            else:
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(key.data, 0)
                send({"exited": key.data, "code": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    _serve()
