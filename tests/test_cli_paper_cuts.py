"""Issue 13's paper cuts of the command line, each against a real ``sluice serve``.

11: the socket is found from any directory, and a failure lists what was tried;
12: ``sluice audit``; 13: ``show`` and ``get`` are one another; 14: ``sluice
work`` prefixes the job's lines with its id; 16: long operations draw a
progress bar on a terminal, and nothing else otherwise.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.client import Client
from tests.test_cli import STAMP, _start_worker, _stop_worker, json_doc, sluice, wait_for

NO_ENV = {"SLUICEGATE_SOCKET": "", "SLUICEGATE_CONFIG": ""}
#: The systemd socket unit's path (systemd/sluicegate.socket).
SYSTEMD_SOCKET = Path("/run/sluicegate/sluicegate.sock")


# -- 11: finding the socket ---------------------------------------------------------


def test_the_socket_is_found_from_another_directory(daemon, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**NO_ENV, "SLUICEGATE_CONFIG": str(daemon.config_path)}
    by_env = sluice("status", "--json", env=env, cwd=elsewhere)
    assert json_doc(by_env)["namespace"] == "default"
    # A ./sluicegate.toml naming a socket that is not there (a stale copy) is
    # searched past: the daemon's default state directory is next.
    (elsewhere / "sluicegate.toml").write_text('[daemon]\nsocket = "/nonexistent/x.sock"\n')
    (elsewhere / "sluicegate-data").symlink_to(daemon.state, target_is_directory=True)
    found = sluice("status", "--json", env=NO_ENV, cwd=elsewhere)
    assert json_doc(found)["namespace"] == "default"
    # Its own socket, when it exists, comes first.
    (elsewhere / "sluicegate.toml").write_text(daemon.config_path.read_text())
    (elsewhere / "sluicegate-data").unlink()
    assert json_doc(sluice("status", "--json", env=NO_ENV, cwd=elsewhere))["namespace"] == "default"


def test_an_explicit_socket_is_used_as_given_and_a_failure_lists_what_was_tried(daemon, tmp_path):
    if SYSTEMD_SOCKET.exists():
        pytest.skip(f"{SYSTEMD_SOCKET} exists on this machine")
    empty = tmp_path / "empty"
    empty.mkdir()
    searched = sluice("status", env=NO_ENV, cwd=empty)
    assert searched.returncode == 1 and searched.stdout == ""
    lines = searched.stderr.splitlines()
    assert lines[0] == "sluice: cannot connect to the daemon; tried:"
    assert lines[1] == "  sluicegate-data/sluicegate.sock (the default state directory): absent"
    assert lines[2] == f"  {SYSTEMD_SOCKET} (systemd): absent"
    assert "sluice serve" in lines[3] and "--socket" in lines[3]
    # Explicit choices are not searched past, even with a live socket nearby.
    (empty / "sluicegate-data").symlink_to(daemon.state, target_is_directory=True)
    assert json_doc(sluice("status", "--json", env=NO_ENV, cwd=empty))["namespace"] == "default"
    gone = str(tmp_path / "gone.sock")
    for args, env, source in (
        (["--socket", gone], NO_ENV, "--socket"),
        ([], {**NO_ENV, "SLUICEGATE_SOCKET": gone}, "$SLUICEGATE_SOCKET"),
    ):
        proc = sluice("status", *args, env=env, cwd=empty)
        assert proc.returncode == 1
        assert proc.stderr.startswith(f"sluice: cannot connect to {gone} (from {source}): ")
    other = tmp_path / "other.toml"
    other.write_text(f'[daemon]\nsocket = "{gone}"\n')
    proc = sluice("status", "--config", str(other), env=NO_ENV, cwd=empty)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"sluice: cannot connect to {gone} (from --config {other}): ")


# -- 12: sluice audit ---------------------------------------------------------------


def test_audit_shows_when_in_both_zones_who_what_and_the_change_with_paging(daemon):
    sock = ["--socket", str(daemon.socket)]
    for args in (
        ["budget", "create", "img", "--allocation", "10", "--strategy", "while_in_flight"],
        ["budget", "patch", "img", "--allocation", "20"],
        ["quota", "set", "--max-pending", "5"],
    ):
        assert sluice(*args, *sock).returncode == 0
    doc = json_doc(sluice("audit", "--json", *sock))
    records = doc["records"]
    assert [(r["action"], r["target_kind"], r["target"]) for r in records] == [
        ("create", "budget", "img"), ("update", "budget", "img"), ("set", "namespace", "default"),
    ]  # fmt: skip
    assert doc["next"] is None
    zone = {"TZ": "America/Los_Angeles"}
    proc = sluice("audit", *sock, env=zone)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [
        "ID", "WHEN (LOCAL)", "WHEN (UTC)", "WHO", "WHAT", "BEFORE → AFTER",
    ]  # fmt: skip
    assert len(lines) == 4  # the last page: no "(more: ...)"
    at = records[1]["at"] / 1000
    utc = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    local = subprocess.run(
        ["date", "-d", f"@{int(at)}", "+%Y-%m-%d %H:%M:%S %Z"],
        capture_output=True, text=True, env={**os.environ, **zone}, check=True,
    ).stdout.strip()  # fmt: skip
    assert local.endswith(("PST", "PDT"))
    assert re.split(r"\s{2,}", lines[2].strip()) == [
        "2", local, utc, records[1]["actor"], "update budget img", "allocation 10 → 20",
    ]  # fmt: skip
    assert re.split(r"\s{2,}", lines[1])[-2:] == [
        "create budget img",
        '- → {"key":"img","allocation":10,"strategy":{"type":"while_in_flight"}}',
    ]
    assert re.split(r"\s{2,}", lines[3])[-2:] == [
        "set namespace default",
        '- → {"max_pending":5,"on_excess":"reject"}',
    ]
    # Paging: one record a page, the next page's command on the last line.
    first = sluice("audit", "--limit", "1", *sock).stdout.splitlines()
    assert len(first) == 3 and first[-1] == "(more: sluice audit --limit 1 --after 1)"
    second = sluice("audit", "--limit", "1", "--after", "1", *sock).stdout.splitlines()
    assert "update budget img" in second[1] and second[-1].endswith("--after 2)")
    page = json_doc(sluice("audit", "--json", "--limit", "1", "--after", "2", *sock))
    assert [r["id"] for r in page["records"]] == [3] and page["next"] is None
    budgets = json_doc(sluice("audit", "--json", "--target-kind", "budget", *sock))
    assert [r["id"] for r in budgets["records"]] == [1, 2]
    only = sluice("audit", "--target-kind", "budget", "--target", "img", "--limit", "1", *sock)
    assert only.stdout.splitlines()[-1] == (
        "(more: sluice audit --target-kind budget --target img --limit 1 --after 1)"
    )
    none = sluice("audit", "--target", "nothing", *sock)
    assert none.returncode == 0 and none.stdout == "no audit records\n"
    bad = sluice("audit", "--target-kind", "job", *sock)
    assert bad.returncode == 2 and "--target-kind" in bad.stderr


# -- 13: show and get -----------------------------------------------------------------


def test_show_and_get_both_read_one_thing_everywhere(daemon):
    sock = ["--socket", str(daemon.socket)]
    assert sluice("quota", "set", "--max-pending", "7", *sock).returncode == 0
    create = ["budget", "create", "img", "--allocation", "3", "--strategy", "while_in_flight"]
    assert sluice(*create, *sock).returncode == 0
    policy = ["queue", "budget", "set", "q", "--max-in-flight", "2"]
    assert sluice(*policy, *sock).returncode == 0
    job_id = json_doc(sluice("enqueue", "q", "t", "--json", *sock))["job"]["id"]
    reads = (
        (["quota"], []),
        (["budget"], ["img"]),
        (["queue", "budget"], ["q"]),
        (["jobs"], [job_id]),
    )
    for group, rest in reads:
        docs = []
        for verb in ("show", "get"):
            proc = sluice(*group, verb, *rest, "--json", *sock)
            docs.append(json_doc(proc))
            human = sluice(*group, verb, *rest, *sock)
            assert human.returncode == 0 and human.stdout, (group, verb, human.stderr)
        if group != ["queue", "budget"]:  # admission_status has a moving clock
            assert docs[0] == docs[1], group
    assert docs[0]["job"]["id"] == job_id
    for group, line in (
        (["quota"], "get (show)"),
        (["budget"], "get (show)"),
        (["queue", "budget"], "show (get)"),
        (["jobs"], "show (get)"),
    ):
        helped = sluice(*group, "--help")
        assert helped.returncode == 0 and line in helped.stdout, group


# -- 14: sluice work's output -----------------------------------------------------------


def test_work_prefixes_the_jobs_lines_with_its_id_stdout_to_stdout(daemon):
    script = 'cat; echo " -> $SLUICEGATE_JOB_ID"; echo to-stderr >&2; printf "no newline"'
    with Client(daemon.socket) as client:
        job_id = client.enqueue("out", "t", payload={"n": 1})["job"]["id"]
        worker = _start_worker(daemon, "out", "sh", "-c", script)
        try:
            wait_for(lambda: client.get(job_id)["status"] == "completed")
        finally:
            out, err = _stop_worker(worker)
    lines = out.splitlines()
    assert re.fullmatch(rf"{STAMP}: Job {job_id} running in process \d+", lines[0])
    assert lines[1:4] == [
        f'{job_id}: {{"n":1}}',
        f"{job_id}:  -> {job_id}",
        f"{job_id}: no newline",
    ]
    assert re.fullmatch(rf"{STAMP}: Job {job_id} exited with status 0", lines[4])
    assert len(lines) == 5
    assert f"{job_id}: to-stderr\n" in err and '{"n":1}' not in err


def test_work_with_json_keeps_stdout_for_its_events(daemon):
    with Client(daemon.socket) as client:
        job_id = client.enqueue("js", "t", payload={"n": 2})["job"]["id"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "work", "js", "--json", "--wait-ms", "1000",
             "--socket", str(daemon.socket), "--", "sh", "-c", "cat; echo bad >&2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(lambda: client.get(job_id)["status"] == "completed")
        finally:
            out, err = _stop_worker(worker)
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["event"] for e in events] == ["running", "exited"]
    assert f'{job_id}: {{"n":2}}\n' in err and f"{job_id}: bad\n" in err


def test_work_rides_out_a_daemon_killed_and_restarted(daemon):
    """``sluice work`` reconnects after its daemon is killed (-9) and started
    again, and runs the jobs enqueued after the restart."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", "work", "rs", "--wait-ms", "1000",
         "--socket", str(daemon.socket), "--", "true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with Client(daemon.socket) as client:
            first = client.enqueue("rs", "t")["job"]["id"]
            wait_for(lambda: client.get(first)["status"] == "completed")
        daemon.kill()
        daemon.start()
        with Client(daemon.socket) as client:
            second = client.enqueue("rs", "t")["job"]["id"]
            wait_for(lambda: client.get(second)["status"] == "completed")
        assert worker.poll() is None
    finally:
        _out, err = _stop_worker(worker)
    assert "claims lost the connection" in err


@pytest.mark.e2e
def test_work_help_says_where_the_output_goes():
    helped = sluice("work", "--help")
    text = " ".join(helped.stdout.split())
    assert "prefixed with the job's id" in text
    assert "CMD's stdout goes to this stdout" in text and "stderr to this stderr" in text


# -- 16: progress ---------------------------------------------------------------------


def _dead_letters(client: Client, queue: str, n: int) -> None:
    client.enqueue_many([{"queue": queue, "type": "t"}] * n)
    pending = [
        client.submit("fail", job_id=job.id, lease=job.lease, error="x", dead=True)
        for job in client.claim_next([queue], max=n)
    ]
    for req_id in pending:
        client.result(req_id)


def _on_a_terminal(*args: str, timeout: float = 60) -> tuple[int, str]:
    """Run ``sluice args...`` with stdout and stderr on a pseudo-terminal; (status, output)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", *args],
        stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(secondary)
    output = bytearray()
    try:
        while True:  # read as it comes: a full terminal buffer would block the command
            ready, _, _ = select.select([primary], [], [], timeout)
            if not ready:
                raise AssertionError(f"no output within {timeout} s: {bytes(output)!r}")
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(primary)
        status = proc.wait(timeout)
    return status, output.decode("utf-8", "replace")


def test_dead_replay_all_draws_a_progress_bar_on_a_terminal_only(daemon):
    sock = ["--socket", str(daemon.socket)]
    with Client(daemon.socket) as client:
        _dead_letters(client, "d", 300)
    status, screen = _on_a_terminal("dead", "replay", "--all", *sock)
    assert status == 0, screen
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen).replace("\r\n", "\n").split("\r")[-2:]
    bar = "\n".join(last)
    assert re.search(r"replaying .* 300/300 · [0-9,]+ jobs/s · ETA 0:00:00", bar), screen
    assert screen.endswith("replayed 300 jobs\r\n")
    # Piped: the summary only, no bar.
    with Client(daemon.socket) as client:
        _dead_letters(client, "e", 300)
    piped = sluice("dead", "replay", "--all", *sock)
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout == "replayed 300 jobs\n"
    # --json on a terminal: the document and nothing else.
    with Client(daemon.socket) as client:
        _dead_letters(client, "f", 300)
    status, screen = _on_a_terminal("dead", "replay", "--all", "--json", *sock)
    assert status == 0, screen
    doc: dict[str, Any] = json.loads(screen.replace("\r\n", "\n"))
    assert len(doc["results"]) == 300 and doc["remaining"] is False
    assert "replaying" not in screen
