"""Reloading the config file on a running daemon: SIGHUP, and the settings watcher.

A reload never lowers security by accident: a file that would open the daemon
(no ``[[tokens]]`` left, a token table that does not parse, no file at all),
remove ``metrics_token`` or widen the HTTP listener is refused, the last good
settings stay, and ``/healthz`` is degraded naming the reason. Keys that need a
restart keep their running values and the rest of the reload applies. A quota
table provisioned from the file leaves the store with the table. The watcher
notices an edit of the file without a SIGHUP.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import httpx
import pytest

from tests.support import DaemonProcess, free_port, token_tables, wait_until

pytestmark = pytest.mark.e2e

TOKEN_A = "tok-a-0123456789"
TOKEN_B = "tok-b-9876543210"
TOKENS = token_tables(
    {"name": "owner-a", "token": TOKEN_A, "namespace": "A", "grants": ["produce", "consume",
                                                                        "manage"]},
    {"name": "owner-b", "token": TOKEN_B, "namespace": "B", "grants": ["produce", "consume"],
     "hashed": True},
)  # fmt: skip


def job(queue: str = "q") -> dict[str, Any]:
    return {"queue": queue, "type": "t", "payload": {}}


def healthz(daemon: DaemonProcess) -> dict[str, Any]:
    """The ``/healthz`` body without its ``database`` section (which
    tests/e2e/test_operations.py checks)."""
    with daemon.http() as http:
        response = http.get("/healthz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body.pop("database")["reachable"] is True
    return body


def degraded(daemon: DaemonProcess, *words: str) -> list[str] | None:
    """The ``/healthz`` problems once one of them names every one of ``words``."""
    body = healthz(daemon)
    problems = body.get("problems", [])
    if body["status"] == "degraded" and any(all(w in p for w in words) for p in problems):
        return problems
    return None


def daemon_lines(daemon: DaemonProcess) -> str:
    """The ``[daemon]`` section the test daemon was started with (no tables)."""
    return daemon.config_path.read_text().split("\n[", 1)[0] + "\n"


def sighup(daemon: DaemonProcess) -> None:
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)


def assert_tokens_still_required(daemon: DaemonProcess, connect) -> None:
    """Anonymous calls are refused; A's and B's tokens still open their namespaces."""
    anonymous = connect(daemon)
    err = anonymous.error("list", namespace="A")
    assert err["code"] == "unauthenticated", err
    for token, namespace in ((TOKEN_A, "A"), (TOKEN_B, "B")):
        c = connect(daemon)
        assert c.ok("hello", token=token)["namespace"] == namespace
        assert c.ok("status")["namespace"] == namespace


# -- item 1: a reload never lowers security -------------------------------------------------


def _empty(daemon: DaemonProcess) -> None:
    daemon.config_path.write_bytes(b"")


def _no_tokens(daemon: DaemonProcess) -> None:
    daemon.config_path.write_text(daemon_lines(daemon))


def _malformed_token(daemon: DaemonProcess) -> None:
    daemon.config_path.write_text(
        daemon_lines(daemon) + '\n[[tokens]]\nname = "only"\nsha256 = "not-hex"\nnamespace = "A"\n'
    )


def _missing(daemon: DaemonProcess) -> None:
    daemon.config_path.unlink()


def _wide_http(daemon: DaemonProcess) -> None:
    # Also drops B's token: the whole reload is refused, so B keeps working.
    wide = daemon_lines(daemon).replace("127.0.0.1:", "0.0.0.0:")
    tokens_a = TOKENS.split("\n\n[[tokens]]")[0] + "\n"
    daemon.config_path.write_text(wide + tokens_a)


def _no_metrics_token(daemon: DaemonProcess) -> None:
    daemon.config_path.write_text(
        daemon.config_path.read_text().replace('metrics_token = "scrape-me"\n', "")
    )


LOWERING = {
    "empty file": (_empty, ["open mode"]),
    "no tokens": (_no_tokens, ["open mode"]),
    "malformed token": (_malformed_token, ["tokens[0].sha256"]),
    "missing file": (_missing, ["cannot read"]),
    "http widened": (_wide_http, ["daemon.http", "0.0.0.0"]),
    "metrics_token removed": (_no_metrics_token, ["daemon.metrics_token"]),
}


@pytest.mark.parametrize("edit", LOWERING.values(), ids=LOWERING.keys())
def test_a_reload_that_would_lower_security_is_refused(make_daemon, connect, edit):
    change, words = edit
    daemon = make_daemon('metrics_token = "scrape-me"\n' + TOKENS)
    good = daemon.config_path.read_text()
    owner = connect(daemon)
    owner.ok("hello", token=TOKEN_A)
    queued = owner.ok("enqueue", **job())["job"]["id"]
    assert healthz(daemon) == {"status": "ok"}

    change(daemon)
    sighup(daemon)
    problems = wait_until(lambda: degraded(daemon, str(daemon.config_path), *words),
                          what=f"/healthz degraded naming {words}")  # fmt: skip
    assert any("last good config in force" in p for p in problems), problems
    assert_tokens_still_required(daemon, connect)
    assert [j["id"] for j in owner.ok("list")["jobs"]] == [queued]
    with daemon.http() as http:  # /metrics still wants its bearer
        assert http.get("/metrics").status_code == 401
    assert "config reloaded" not in daemon.log_text()

    # Putting the good file back (and a SIGHUP) returns to ok.
    daemon.config_path.write_text(good)
    sighup(daemon)
    wait_until(lambda: healthz(daemon) == {"status": "ok"}, what="/healthz ok again")
    assert_tokens_still_required(daemon, connect)


def stopped_with_a_job_of_a(make_daemon, connect):
    """A daemon in tokens mode that ran, took a job of namespace A, and stopped."""
    daemon = make_daemon(TOKENS)
    owner = connect(daemon)
    owner.ok("hello", token=TOKEN_A)
    owner.ok("enqueue", **job())
    owner.close()
    assert daemon.stop() == 0
    return daemon


def test_a_restart_with_an_emptied_file_starts_in_open_mode_with_a_warning(make_daemon, connect):
    daemon = stopped_with_a_job_of_a(make_daemon, connect)
    assert "open mode" not in daemon.log_text()

    # The emptied file says "the defaults": open mode, state in ./sluicegate-data, HTTP
    # on 127.0.0.1:7890 (which another process may hold: only the start-up log matters).
    daemon.config_path.write_bytes(b"")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "serve", "--config", str(daemon.config_path)],
        cwd=daemon.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    found = ""
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # until the warning, or the daemon serves or stops
            if "open mode" in line:
                found = line
            if found or "serving" in line or "stopped" in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    line = found
    assert "WARNING" in line and str(daemon.config_path) in line and "[[tokens]]" in line


def test_a_restart_in_open_mode_names_the_namespaces_already_in_the_store(make_daemon, connect):
    daemon = stopped_with_a_job_of_a(make_daemon, connect)

    daemon.config_path.write_text(daemon_lines(daemon))  # same state dir, no tokens
    daemon.start()
    [line] = [x for x in daemon.log_text().splitlines() if "WARNING" in x and "open mode" in x]
    assert "'A'" in line, line
    anonymous = connect(daemon)
    assert anonymous.ok("status")["namespace"] == "default"  # the file's mode


def test_keys_that_need_a_restart_keep_their_running_values_and_the_rest_applies(
    make_daemon, connect
):
    daemon = make_daemon(TOKENS)
    moved = daemon.workdir / "elsewhere.sock"
    new_port = free_port()
    text = daemon.config_path.read_text()
    text = text.replace("[daemon]\n", f'[daemon]\nsocket = "{moved}"\n', 1)
    text = text.replace(f"127.0.0.1:{daemon.port}", f"127.0.0.1:{new_port}")
    third = token_tables({"name": "c", "token": "tok-c-1", "namespace": "C", "grants": ["produce"]})
    daemon.config_path.write_text(text + third)
    sighup(daemon)

    def c_works() -> bool:
        c = connect(daemon)
        return c.call("hello", token="tok-c-1")["ok"]

    wait_until(c_works, what="the new token to apply")
    log = daemon.log_text()
    assert "needs a restart: daemon.socket" in log
    assert "needs a restart: daemon.http" in log
    assert not moved.exists()  # the socket and HTTP listeners stay where they are
    assert healthz(daemon) == {"status": "ok"}
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{new_port}/healthz", timeout=1)


# -- item 2: a quota table provisioned from the file leaves with the table ---------------


BROKEN_QUOTA = '\n[quotas.default]\nmax_pending = "lots"\n'


def _broken_quota_in_force(daemon: DaemonProcess, connect) -> Any:
    base = daemon.config_path.read_text()
    daemon.config_path.write_text(base + BROKEN_QUOTA)
    sighup(daemon)
    wait_until(lambda: degraded(daemon, "namespace 'default'"), what="the namespace failing")
    c = connect(daemon)
    assert c.error("enqueue", **job())["code"] == "quota_unavailable"
    got = c.ok("quota_get")
    assert got["source"] == "config" and got["quota"] is None and "max_pending" in got["error"]
    return base


def test_removing_a_broken_quota_table_recovers_the_namespace_at_the_next_reload(
    make_daemon, connect
):
    daemon = make_daemon()
    base = _broken_quota_in_force(daemon, connect)

    daemon.config_path.write_text(base)
    sighup(daemon)
    wait_until(lambda: healthz(daemon) == {"status": "ok"}, what="/healthz ok")
    c = connect(daemon)
    c.ok("enqueue", **job())
    got = c.ok("quota_get")
    assert (got["quota"], got["source"]) == (None, None)


def test_fixing_a_broken_quota_table_recovers_the_namespace_at_the_next_reload(
    make_daemon, connect
):
    daemon = make_daemon()
    base = _broken_quota_in_force(daemon, connect)

    daemon.config_path.write_text(base + "\n[quotas.default]\nmax_pending = 1\n")
    sighup(daemon)
    wait_until(lambda: healthz(daemon) == {"status": "ok"}, what="/healthz ok")
    c = connect(daemon)
    c.ok("enqueue", **job())
    assert c.error("enqueue", **job())["code"] == "queue_full"
    got = c.ok("quota_get")
    assert (got["source"], got["quota"]["max_pending"]) == ("config", 1)


def test_a_quota_table_removed_while_the_daemon_was_stopped_is_gone_after_restart(
    make_daemon, connect
):
    daemon = make_daemon()
    base = _broken_quota_in_force(daemon, connect)
    assert daemon.stop() == 0

    daemon.config_path.write_text(base)
    daemon.start()
    assert healthz(daemon) == {"status": "ok"}
    c = connect(daemon)
    c.ok("enqueue", **job())
    assert c.ok("quota_get")["source"] is None


# -- item 3: the settings watcher notices an edit without a SIGHUP ----------------------


def test_an_edit_of_the_file_reaches_enqueue_and_dispatch_without_a_sighup(make_daemon, connect):
    daemon = make_daemon()
    base = daemon.config_path.read_text()
    c = connect(daemon)
    c.ok("enqueue_many", jobs=[job(), job()])

    daemon.config_path.write_text(base + "\n[quotas.default]\nmax_pending = 2\nmax_running = 1\n")
    wait_until(lambda: not c.call("enqueue", **job())["ok"], what="max_pending to apply")
    assert c.error("enqueue", **job())["code"] == "queue_full"
    assert len(c.ok("claim_next", queues=["q"], max=2)["jobs"]) == 1  # max_running = 1

    # A broken edit keeps the last good settings and names the file and the error.
    daemon.config_path.write_text(base + "\n[quotas.default\n")
    problems = wait_until(lambda: degraded(daemon, str(daemon.config_path), "not valid TOML"),
                          what="/healthz degraded")  # fmt: skip
    assert any("last good config in force" in p for p in problems)
    assert c.error("enqueue", **job())["code"] == "queue_full"

    # Fixing it returns to ok, and the table's removal frees the namespace.
    daemon.config_path.write_text(base)
    wait_until(lambda: healthz(daemon) == {"status": "ok"}, what="/healthz ok")
    c.ok("enqueue", **job())
    assert "config reloaded" in daemon.log_text()


def test_an_edit_that_would_open_the_daemon_is_refused_without_a_sighup(make_daemon, connect):
    daemon = make_daemon(TOKENS)
    good = daemon.config_path.read_text()
    daemon.config_path.write_bytes(b"")
    wait_until(lambda: degraded(daemon, "open mode"), what="/healthz degraded")
    assert_tokens_still_required(daemon, connect)

    daemon.config_path.write_text(good)
    wait_until(lambda: healthz(daemon) == {"status": "ok"}, what="/healthz ok")
    assert_tokens_still_required(daemon, connect)
