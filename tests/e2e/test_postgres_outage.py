"""PostgreSQL stopped under a serving daemon (issue 15): writes answer
``unavailable``, the daemon stays up, and once the database is back it serves
again without a restart, with every acknowledged job still there.

A throwaway cluster of its own (``pg_ctl stop -m immediate``, then start), not
the session's server, which other tests share.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import postgres
from tests.postgres_cluster import ThrowawayCluster, find_bindir
from tests.support import DaemonProcess, wait_until

# Each test runs its own throwaway cluster: not parametrized over the stores.
pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _bindir():
    bindir = find_bindir()
    if bindir is None:
        postgres.unavailable("initdb and pg_ctl not found (a throwaway cluster is needed)",
                             os.environ)  # fmt: skip
    return bindir


def _enqueue(client, i: int) -> dict:
    return client.call("enqueue", queue="q", type="t", payload={"i": i})


def test_a_database_stopped_under_the_daemon_answers_unavailable_then_recovers(tmp_path):
    # Commits reach the server's WAL before they are answered, so an immediate
    # stop (a crash of the server process) keeps every acknowledged job.
    crash_safe = ThrowawayCluster(_bindir(), settings="synchronous_commit = on\n")
    with crash_safe as cluster, postgres.fresh_database(cluster.admin_dsn) as dsn:
        daemon = DaemonProcess(tmp_path, f'database = "{dsn}"\n')
        daemon.start(timeout=30)
        try:
            with daemon.client() as c, daemon.http() as http:
                acked = [_enqueue(c, i)["job"]["id"] for i in range(5)]
                cluster.halt()
                refused = _enqueue(c, 99)
                assert not refused["ok"]
                assert refused["error"]["code"] == "unavailable", refused
                assert "database is unavailable" in refused["error"]["message"]
                assert http.get("/healthz").status_code == 503
                assert daemon.proc is not None and daemon.proc.poll() is None  # still up
                cluster.resume()
                after = wait_until(lambda: _enqueue(c, 100).get("ok"), timeout=30,
                                   interval=0.2, what="writes to work again")  # fmt: skip
                assert after
                wait_until(lambda: http.get("/healthz").status_code == 200, timeout=30,
                           what="/healthz to recover")  # fmt: skip
                listed = {j["id"] for j in c.ok("list", queue="q", limit=100)["jobs"]}
                assert set(acked) <= listed
        finally:
            daemon.cleanup()


def test_healthz_finds_a_database_stopped_under_an_idle_daemon_then_its_return(tmp_path):
    """No write meets the outage: ``/healthz``'s own probe finds it (503, the
    ``database`` section unreachable), and the committer's probe its return."""
    with ThrowawayCluster(_bindir()) as cluster, postgres.fresh_database(cluster.admin_dsn) as dsn:
        daemon = DaemonProcess(tmp_path, f'database = "{dsn}"\n')
        daemon.start(timeout=30)
        try:
            with daemon.http() as http:
                first = http.get("/healthz")
                assert first.status_code == 200, first.text
                assert first.json()["database"]["reachable"] is True
                cluster.halt()
                down = wait_until(lambda: (r := http.get("/healthz")).status_code == 503 and r,
                                  timeout=30, what="/healthz 503")  # fmt: skip
                body = down.json()
                assert body["status"] == "unavailable"
                assert body["database"]["reachable"] is False
                assert body["database"]["store"] == "postgresql"
                assert any("database is unavailable" in p for p in body["problems"]), body
                assert daemon.proc is not None and daemon.proc.poll() is None  # still up
                cluster.resume()
                up = wait_until(lambda: (r := http.get("/healthz")).status_code == 200 and r,
                                timeout=30, what="/healthz to recover")  # fmt: skip
                assert up.json()["status"] == "ok" and up.json()["database"]["reachable"]
        finally:
            daemon.cleanup()


@contextlib.contextmanager
def _waiting_for_its_database(tmp_path: Path) -> Iterator[tuple[ThrowawayCluster, DaemonProcess]]:
    """A daemon started while its database is down, once it has logged a failed
    attempt; the cluster is resumed at the end (the database is dropped through it)."""
    with ThrowawayCluster(_bindir()) as cluster, postgres.fresh_database(cluster.admin_dsn) as dsn:
        cluster.halt()
        daemon = DaemonProcess(tmp_path, f'database = "{dsn}"\n')
        daemon.start(wait=False)
        try:
            wait_until(lambda: "retrying in" in daemon.log_text(), timeout=30,
                       what="a failed attempt logged")  # fmt: skip
            yield cluster, daemon
        finally:
            daemon.cleanup()
            if cluster.halted:
                cluster.resume()


def test_a_database_down_at_start_is_answered_unavailable_until_it_comes_up(tmp_path):
    """The daemon retries the database with backoff and is not silent meanwhile:
    each socket frame is answered ``unavailable`` (its id kept, ``retry_after``
    set), ``/healthz`` is 503 naming the database; once it is up, the daemon
    serves on the same socket and port, a client reconnecting as after a restart."""
    with _waiting_for_its_database(tmp_path) as (cluster, daemon):
        with daemon.client() as c:
            c.send_raw(b'{"id": 7, "op": "enqueue", "queue": "q", "type": "t"}\n')
            c.send_raw(b"not json\n")
            first, second = c.read(), c.read()
        assert first["id"] == 7 and second["id"] is None
        for frame in (first, second):
            error = frame["error"]
            assert error["code"] == "unavailable" and error["status"] == 503
            assert error["message"].startswith("the database is unavailable: ")
            assert error["message"].endswith("; the daemon is starting; retry later")
            assert error["retry_after"] >= 1
        with daemon.client() as c:  # a line past max_frame_bytes: closed, as while serving
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                c.send_raw(b"x" * (2 << 20))  # closed while it is sent
            assert c.read_until_closed() == []
        with daemon.http() as http:
            health = http.get("/healthz")
            api = http.post("/api/v1/jobs", json={"queue": "q", "type": "t"})
        assert health.status_code == 503 and api.status_code == 503
        assert health.json()["status"] == "unavailable"
        assert health.json()["database"]["reachable"] is False
        assert api.json()["code"] == "unavailable"
        assert int(api.headers["retry-after"]) >= 1
        assert daemon.proc is not None and daemon.proc.poll() is None

        cluster.resume()
        wait_until(lambda: " serving socket=" in daemon.log_text(), timeout=60,
                   what="the daemon to serve once the database is up")  # fmt: skip
        with daemon.client() as c:
            job = c.ok("enqueue", queue="q", type="t")["job"]
            assert c.ok("get", job_id=job["id"])["job"]["status"] == "pending"
        with daemon.http() as http:
            assert http.get("/healthz").status_code == 200


def test_a_daemon_waiting_for_its_database_ignores_sighup_and_stops_on_sigterm(tmp_path):
    """While the database does not answer at start, SIGHUP (a reload) is logged
    and ignored, and SIGTERM stops the start cleanly: status 0, the socket file
    removed, one line saying so."""
    with _waiting_for_its_database(tmp_path) as (_cluster, daemon):
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP ignored" in daemon.log_text(), what="SIGHUP logged")
        assert daemon.proc.poll() is None
        assert daemon.stop(signal.SIGTERM) == 0
        assert "stopped by SIGTERM before the database answered" in daemon.log_text()
        assert not daemon.socket.exists()
