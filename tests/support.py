"""Helpers for end-to-end tests: a real ``sluice serve`` and a raw socket client."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests import forkserver

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RawClient:
    """A blocking JSON-lines client that speaks the protocol by hand."""

    def __init__(self, path: str | Path, timeout: float = 10) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()  # e.g. a stale socket file after kill -9: no ResourceWarning
            raise
        self.file = self.sock.makefile("rwb")
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def send_raw(self, data: bytes) -> None:
        self.file.write(data)
        self.file.flush()

    def read(self) -> dict[str, Any]:
        line = self.file.readline()
        if not line:
            raise ConnectionError("the daemon closed the connection")
        return json.loads(line)

    def request(self, op: str, **args: Any) -> int:
        req_id = next(self._ids)
        self.send_raw(json.dumps({"id": req_id, "op": op, **args}).encode() + b"\n")
        return req_id

    def answer(self, req_id: int) -> dict[str, Any]:
        """Read frames until the answer to ``req_id`` (events are kept aside)."""
        while True:
            frame = self.read()
            if "event" in frame and "id" not in frame:
                self.events.append(frame)
                continue
            if frame.get("id") == req_id:
                return frame
            raise AssertionError(f"unexpected frame {frame}")

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        return self.answer(self.request(op, **args))

    def ok(self, op: str, **args: Any) -> dict[str, Any]:
        frame = self.call(op, **args)
        assert frame["ok"], frame
        return frame

    def error(self, op: str, **args: Any) -> dict[str, Any]:
        frame = self.call(op, **args)
        assert not frame["ok"], frame
        return frame["error"]

    # -- added for the end-to-end suite (tests/e2e) --

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def send_frame(self, frame: Any) -> None:
        """Send one JSON value as a line, whatever its shape (for bad-input tests)."""
        self.send_raw(json.dumps(frame).encode() + b"\n")

    def read_until_closed(self, timeout: float = 10) -> list[dict[str, Any]]:
        """Read frames until the daemon closes the connection; return them.

        When the daemon closes with bytes of ours unread, Linux reports
        ECONNRESET instead of EOF; both mean "closed". Fails if the connection
        is still open after ``timeout``.
        """
        frames: list[dict[str, Any]] = []
        self.sock.settimeout(timeout)
        try:
            while True:
                line = self.file.readline()
                if not line:
                    return frames
                if line.endswith(b"\n"):
                    frames.append(json.loads(line))
        except (ConnectionResetError, BrokenPipeError):
            return frames
        except TimeoutError:
            raise AssertionError(f"the daemon kept the connection open; read {frames}") from None

    def close(self) -> None:
        try:
            self.file.close()
        except OSError:  # bytes left unsent on a connection the daemon closed
            pass
        finally:
            self.sock.close()


class DaemonProcess:
    """A real ``sluice serve`` on a temp dir, with its own config file."""

    def __init__(self, workdir: Path, extra_config: str = "", http: bool = True) -> None:
        self.workdir = workdir
        self.state = workdir / "state"
        self.socket = self.state / "sluicegate.sock"
        self.port = free_port() if http else None
        self.http_url = f"http://127.0.0.1:{self.port}" if http else None
        self.config_path = workdir / "sluicegate.toml"
        # SLUICEGATE_TEST_DATABASE: run on that database (e.g. a PostgreSQL DSN)
        # unless the test names its own.
        database = os.environ.get("SLUICEGATE_TEST_DATABASE", "")
        if database and "database =" not in extra_config:
            extra_config = f'database = "{database}"\n' + extra_config
        #: The PostgreSQL DSN the daemon runs on, or None (the SQLite file in its state dir).
        self.dsn = database if database.startswith("postgresql://") else None
        self.config_path.write_text(
            "[daemon]\n"
            f'state_dir = "{self.state}"\n'
            f'http = "{f"127.0.0.1:{self.port}" if http else ""}"\n'
            'lease = "60s"\n' + extra_config
        )
        self.proc: subprocess.Popen[bytes] | forkserver.ForkedProcess | None = None
        self.log = workdir / "daemon.log"

    def start(
        self,
        timeout: float = 20,
        env: dict[str, str] | None = None,
        *,
        wait: bool = True,
        **popen: Any,
    ) -> None:
        """Start ``sluice serve`` (forked, :mod:`tests.forkserver`, where it may be) and,
        with ``wait``, wait until it serves: its "serving" line logged (the socket
        listens earlier, before the store is open and migrated), its socket and HTTP,
        if any, answering."""
        self._logf = open(self.log, "ab")  # noqa: SIM115
        self._log_from = self._logf.tell()
        argv = ["serve", "--config", str(self.config_path)]
        full_env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | forkserver.ForkedProcess
        if forkserver.usable(full_env, popen):
            self.proc = forkserver.spawn(argv, cwd=self.workdir, env=full_env, stdout=self.log)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli.main", *argv],
                cwd=self.workdir,
                stdout=self._logf,
                stderr=subprocess.STDOUT,
                env=full_env,
                **popen,
            )
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}:\n{self.log_text()}")
            if self._ready():
                return
            time.sleep(0.02)
        raise TimeoutError(f"daemon did not start:\n{self.log_text()}")

    def _ready(self) -> bool:
        if not self.socket.exists():
            return False
        with open(self.log, "rb") as log:
            log.seek(self._log_from)
            if b" serving socket=" not in log.read():
                return False
        try:
            client = RawClient(self.socket, timeout=2)
        except OSError:
            return False
        client.close()
        if self.http_url:
            try:
                httpx.get(self.http_url + "/healthz", timeout=2)
            except httpx.HTTPError:
                return False
        return True

    def client(self) -> RawClient:
        return RawClient(self.socket)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the daemon's database, as another process sharing
        it would (``?`` parameters; SQLite or PostgreSQL, whichever it runs on)."""
        if self.dsn is None:
            with closing(sqlite3.connect(self.state / "sluicegate.db")) as db, db:
                return db.execute(statement, params).fetchall()
        from daemon.store.postgres import numbered

        async def run() -> list[tuple[Any, ...]]:
            conn = await asyncpg.connect(self.dsn, timeout=5)
            try:
                return [tuple(r) for r in await conn.fetch(numbered(statement), *params)]
            finally:
                await conn.close()

        from tests.postgres import run_asyncio

        return run_asyncio(run())

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.http_url or "", headers=headers, timeout=10)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._logf.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self._logf.close()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    # -- added for the end-to-end suite (tests/e2e) --

    def metrics(self, token: str | None = None) -> dict:
        """Scrape ``/metrics`` and parse it (see :func:`parse_metrics`)."""
        with self.http(token) as http:
            response = http.get("/metrics")
        assert response.status_code == 200, response.text
        return parse_metrics(response.text)

    def waiting_claims(self) -> float:
        """Claims waiting for work, from the ``sluicegate_waiting_claims`` gauge."""
        return metric(self.metrics(), "sluicegate_waiting_claims") or 0

    def cleanup(self) -> None:
        """Stop the daemon if it runs (SIGTERM, then SIGKILL) and close its log file."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        logf = getattr(self, "_logf", None)
        if logf is not None and not logf.closed:
            logf.close()


def sluice(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``sluice args...`` as a user does, in a process of its own (forked where it
    may be, :mod:`tests.forkserver`): the completed process with text output (``env``
    is added to this process's environment)."""
    full_env = {**os.environ, **(env or {})}
    if not forkserver.usable(full_env):
        return subprocess.run(
            [sys.executable, "-m", "daemon.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=full_env,
        )
    with tempfile.TemporaryDirectory(prefix="sluice-run-") as outputs:
        out, err = Path(outputs) / "stdout", Path(outputs) / "stderr"
        run = forkserver.spawn(
            list(args), cwd=cwd or Path.cwd(), env=full_env, stdout=out, stderr=err
        )
        try:
            code = run.wait(timeout)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
            raise
        return subprocess.CompletedProcess(run.args, code, _text(out), _text(err))


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


#: Marks a test that holds on SQLite only (its file, WAL and filesystem; PostgreSQL's
#: outage is tested apart): it runs on SQLite alone (tests/conftest.py).
sqlite_only = pytest.mark.sqlite_only


def wait_until(predicate: Any, timeout: float = 10, interval: float = 0.01, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``.

    For conditions the daemon makes true shortly (a waiter registered, a buffer
    filled), never to assert how long something took.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


MetricKey = tuple[str, frozenset[tuple[str, str]]]


def parse_metrics(text: str) -> dict[MetricKey, float]:
    """Prometheus text to ``{(sample name, frozenset(label items)): value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[MetricKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def metric(samples: dict[MetricKey, float], name: str, **labels: str) -> float | None:
    """One sample's value from :func:`parse_metrics` output, or None when absent."""
    return samples.get((name, frozenset(labels.items())))


def token_tables(*tokens: dict[str, Any]) -> str:
    """``[[tokens]]`` tables for a test config.

    Each token is ``{name, namespace, grants, token, queues?, hashed?,
    write_rate?, write_burst?}``; with ``hashed`` the table holds the token's
    sha256 instead of the token.
    """
    tables = []
    for t in tokens:
        secret = (
            f'sha256 = "{hashlib.sha256(t["token"].encode()).hexdigest()}"'
            if t.get("hashed")
            else f'token = "{t["token"]}"'
        )
        lines = [
            "[[tokens]]",
            f'name = "{t["name"]}"',
            secret,
            f'namespace = "{t["namespace"]}"',
            f"grants = {json.dumps(list(t['grants']))}",
        ]
        if "queues" in t:
            lines.append(f"queues = {json.dumps(list(t['queues']))}")
        if "write_rate" in t:
            lines.append(f'write_rate = "{t["write_rate"]}"')
        if "write_burst" in t:
            lines.append(f"write_burst = {t['write_burst']}")
        tables.append("\n".join(lines))
    return "\n" + "\n\n".join(tables) + "\n"
