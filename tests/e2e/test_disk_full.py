"""Issue 13, item 4: a full disk is an outage the daemon reports, not a bug.
SQLite only: the full filesystem is the one under the database file; on
PostgreSQL the server's outage is tests/e2e/test_postgres_outage.py.

A real ``sluice serve`` keeps its state on a 20 MB tmpfs; a filler file takes
the rest of it. Writes answer ``unavailable`` (with ``retry_after``), never
``internal``; reads keep working; ``/healthz`` answers 503 naming the store.
Deleting the filler recovers both without a restart: first ``/healthz`` (the
committer's probe, with no write from anyone), then enqueues.

Mounting a tmpfs needs root (CI runs as root). Without it a loop file cannot be
mounted either, so the test skips outside CI, saying why; under ``CI=true`` it
fails instead of skipping. The store-level seam (``PRAGMA max_page_count``, a
real SQLITE_FULL) is covered without a mount by tests/unit/test_store_health.py.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import DaemonProcess, sqlite_only, wait_until

# SQLite only: a full filesystem under the database file.
pytestmark = [pytest.mark.e2e, sqlite_only]

PAYLOAD = "x" * 65_536


def _mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``path``; the reason when this process may not."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run mount: {exc}"
    return None if done.returncode == 0 else f"mount -t tmpfs failed: {done.stderr.strip()}"


@pytest.fixture
def small_state(make_daemon) -> Iterator[Callable[..., DaemonProcess]]:
    """``small_state(size)``: a started daemon whose state_dir is a tmpfs of ``size``.

    The daemon is stopped before the tmpfs is unmounted.
    """
    made: list[DaemonProcess] = []

    def make(size: str = "20m", extra_config: str = "") -> DaemonProcess:
        daemon = make_daemon(extra_config, start=False)
        reason = _mount_tmpfs(daemon.state, size)
        if reason is not None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI must mount a tmpfs for this test (it runs as root): {reason}")
            pytest.skip(f"needs a small filesystem and cannot mount one here: {reason}")
        made.append(daemon)
        daemon.start()
        return daemon

    yield make
    for daemon in made:
        daemon.cleanup()
        subprocess.run(["umount", str(daemon.state)], capture_output=True, timeout=30)


def _fill(directory: Path) -> Path:
    """Write a filler file in ``directory`` until the filesystem is full."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096):
            block = b"\0" * chunk
            try:
                while True:
                    f.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


def test_sqlite_only_a_full_disk_answers_unavailable_and_recovers_without_a_restart(
    small_state, connect
):
    daemon = small_state("20m")
    c = connect(daemon)
    first = c.ok("enqueue", queue="q", type="t", payload={"n": 1})["job"]["id"]
    for i in range(5):
        c.ok("enqueue", queue="q", type="t", payload={"n": i})
    filler = _fill(daemon.state)

    # Enqueue until the store refuses; the refusal is the outage, not a bug.
    refusal = None
    for i in range(400):
        frame = c.call("enqueue", queue="q", type="t", payload={"blob": PAYLOAD, "i": i})
        if not frame["ok"]:
            refusal = frame["error"]
            break
    assert refusal is not None, "400 enqueues of 64 KiB fit on a full 20 MB tmpfs?"
    assert refusal["code"] == "unavailable", refusal
    assert refusal["status"] == 503 and refusal["retry_after"] >= 1, refusal
    assert refusal["message"] == "the store cannot write: database or disk is full; retry later"
    again = c.error("enqueue", queue="q", type="t", payload={"blob": PAYLOAD})
    assert again["code"] == "unavailable", again

    with daemon.http() as http:
        health = http.get("/healthz")
        assert health.status_code == 503, health.text
        body = health.json()
        assert body["status"] == "unavailable", body
        problem = body["problems"][0]
        assert problem.startswith("store: the store cannot write: database or disk"), body
        refused = http.post("/jobs", json={"queue": "q", "type": "t", "payload": PAYLOAD})
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "unavailable" and refused.headers["retry-after"], refused

    # Reads need no space; a claim may or may not find room in the WAL, but is
    # never a bug.
    assert c.ok("get", job_id=first)["job"]["id"] == first
    assert len(c.ok("list", queue="q")["jobs"]) >= 6
    claim = c.call("claim_next", queues=["q"], wait_ms=0)
    assert claim["ok"] or claim["error"]["code"] == "unavailable", claim

    # Space comes back: /healthz recovers by itself (no write from anyone),
    # then enqueues are accepted again, all without a restart.
    pid = daemon.proc.pid
    filler.unlink()
    with daemon.http() as http:
        wait_until(
            lambda: http.get("/healthz").status_code == 200,
            timeout=30,
            interval=0.1,
            what="/healthz 200 after the filler was deleted",
        )
        assert http.get("/healthz").json()["status"] in ("ok", "degraded")
    c.ok("enqueue", queue="q", type="t", payload={"blob": PAYLOAD})
    assert daemon.proc.pid == pid and daemon.proc.poll() is None
    log = daemon.log_text()
    assert "internal error" not in log, log
    assert log.count("the store cannot write") == 1, log  # once per episode
    assert "the store writes again" in log, log


def test_sqlite_only_a_start_on_a_full_disk_is_one_line_naming_the_path_and_the_cause(small_state):
    daemon = small_state("20m")
    assert daemon.stop() == 0
    filler = _fill(daemon.state)
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "serve", "--config", str(daemon.config_path)],
        cwd=daemon.workdir, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.startswith("sluice: ")]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [line] = lines
    database = daemon.state / "sluicegate.db"
    assert line.startswith(f"sluice: cannot open the database {database}: "), line
    assert "full" in line, line  # "database or disk is full", or "(the filesystem is full)"
    filler.unlink()
    daemon.start()  # space again: it starts, with its jobs
