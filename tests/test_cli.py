"""The ``sluice`` command line, run as a subprocess against a real daemon."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from daemon.cli.main import main
from daemon.client import Client
from tests.support import DaemonProcess, sluice

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def json_doc(proc: subprocess.CompletedProcess[str]) -> Any:
    """The one JSON document on stdout (json.loads refuses a second one)."""
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def wait_for(predicate: Any, timeout: float = 30) -> None:
    """Poll the daemon's state until ``predicate()`` holds (never asserts a duration)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def test_json_output_is_exactly_one_document_with_options_anywhere(daemon):
    sock = str(daemon.socket)
    enq = json_doc(sluice("enqueue", "q", "t", "--payload", '{"n": 1}', "--socket", sock, "--json"))
    assert enq["job"]["payload"] == {"n": 1} and enq["duplicate"] is False
    job_id = enq["job"]["id"]
    again = json_doc(
        sluice(
            "--json",
            "--socket",
            sock,
            "enqueue",
            "q",
            "t",
            "--unique-key",
            "k",
            "--priority",
            "7",
            "--max-attempts",
            "3",
            "--delay-ms",
            "60000",
        )
    )
    assert again["job"]["status"] == "scheduled" and again["job"]["priority"] == 7
    status = json_doc(sluice("status", "--json", "--socket", sock))
    assert status["queues"] == [
        {"queue": "q", "scheduled": 1, "pending": 1, "running": 0, "completed": 0, "dead": 0}
    ]
    listed = json_doc(
        sluice("jobs", "list", "--queue", "q", "--status", "pending", "--json", "--socket", sock)
    )
    assert [j["id"] for j in listed["jobs"]] == [job_id] and listed["next"] is None
    shown = json_doc(sluice("jobs", "show", job_id, "--socket", sock, "--json"))
    assert shown["job"]["id"] == job_id


def test_human_output_is_aligned_tables(daemon):
    sock = str(daemon.socket)
    out = sluice("enqueue", "images", "resize", "--socket", sock)
    assert out.returncode == 0 and out.stdout.startswith("enqueued job ")
    job_id = out.stdout.split()[2]
    status = sluice("status", "--socket", sock).stdout.splitlines()
    assert status[0].startswith("namespace default")
    assert re.fullmatch(r"QUEUE\s+SCHEDULED\s+PENDING\s+RUNNING\s+COMPLETED\s+DEAD", status[2])
    assert re.fullmatch(r"images\s+0\s+1\s+0\s+0\s+0", status[3])
    listing = sluice("jobs", "list", "--socket", sock).stdout.splitlines()
    assert listing[0].split()[:4] == ["ID", "QUEUE", "TYPE", "STATUS"]
    assert listing[1].split()[:4] == [job_id, "images", "resize", "pending"]
    show = sluice("jobs", "show", job_id, "--socket", sock).stdout
    assert re.search(rf"^created_at\s+{STAMP}$", show, re.M)


def test_exit_statuses(daemon, tmp_path, capsys):
    sock = str(daemon.socket)
    missing = sluice("jobs", "show", "nope", "--socket", sock)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == "sluice: not_found: job 'nope' not found\n"
    refused = sluice("enqueue", "q", "t", "--budget", "nobody:2", "--socket", sock)
    assert refused.returncode == 1 and refused.stderr.startswith("sluice: invalid_argument: ")
    bad_json = sluice("enqueue", "q", "t", "--payload", "{not json", "--socket", sock)
    assert bad_json.returncode == 2 and bad_json.stdout == ""
    assert bad_json.stderr.startswith("sluice: --payload is not valid JSON")
    gone = sluice("status", "--socket", str(tmp_path / "no.sock"))
    assert gone.returncode == 1 and "cannot connect to" in gone.stderr
    # The rest in-process (same main(), no interpreter start-up per case).
    for bad in (
        ["enqueue", "q", "t", "--priority", "high"],
        ["enqueue", "q", "t", "--priority", "70000"],
        ["enqueue", "q", "t", "--budget", "key:0"],
        ["enqueue", "q", "t", "--debounce-ms", "5"],
        ["jobs", "list", "--status", "sleeping"],
        ["jobs", "list", "--limit", "0"],
        ["dead", "replay"],
        ["dead", "replay", "x", "--all"],
        ["dead", "replay", "x", "--queue", "q"],
        ["status", "--", "extra"],
        ["work", "q"],
        ["work", "--", "cat"],
        ["demo", "--seconds", "0"],
        ["frobnicate"],
        [],
    ):
        assert main([*bad, "--socket", sock]) == 2, bad
        out, err = capsys.readouterr()
        assert out == "" and err, bad
    # Nothing the CLI refused reached the daemon.
    with Client(daemon.socket) as client:
        assert client.status()["queues"] == []


def test_the_socket_comes_from_the_environment_or_the_config_file(daemon, tmp_path):
    env = {"SLUICEGATE_SOCKET": str(daemon.socket)}
    assert json_doc(sluice("status", "--json", env=env, cwd=tmp_path))["namespace"] == "default"
    by_config = sluice("status", "--json", "--config", str(daemon.config_path), cwd=tmp_path)
    assert json_doc(by_config)["namespace"] == "default"
    (tmp_path / "sluicegate.toml").write_text(daemon.config_path.read_text())
    assert json_doc(sluice("status", "--json", cwd=tmp_path))["namespace"] == "default"
    (tmp_path / "sluicegate.toml").write_text("[daemon\n")
    broken = sluice("status", cwd=tmp_path)
    assert broken.returncode == 2 and "not valid TOML" in broken.stderr


@pytest.mark.e2e
def test_config_check(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[daemon]\nlease = "30s"\nhttp = ""\n')
    ok = sluice("config", "check", str(good))
    assert ok.returncode == 0 and ok.stdout == f"{good}: OK\n"
    bad = tmp_path / "bad.toml"
    bad.write_text('[daemon]\nlease = "soon"\nsynchronus = "full"\n')
    failed = sluice("config", "check", "--config", str(bad))
    assert failed.returncode == 1 and failed.stdout == ""
    lines = failed.stderr.splitlines()
    assert f"{bad}: daemon.lease: expected a duration such as 500ms" in lines[0] + lines[1]
    assert any(
        line.startswith(f"{bad}: daemon.synchronus: unknown field 'synchronus'") for line in lines
    )
    assert json_doc(sluice("config", "check", str(good), "--json"))["ok"] is True
    not_toml = tmp_path / "x.toml"
    not_toml.write_text("[daemon\n")
    assert sluice("config", "check", str(not_toml)).returncode == 1


@pytest.mark.e2e
def test_token_from_the_flag_or_the_environment(tmp_path):
    proc = DaemonProcess(
        tmp_path, http=False, extra_config='[[tokens]]\nname = "ops"\ntoken = "t0k"\n'
    )
    proc.start()
    try:
        sock = str(proc.socket)
        denied = sluice("status", "--socket", sock)
        assert denied.returncode == 1
        assert denied.stderr == "sluice: unauthenticated: a token is required\n"
        assert json_doc(sluice("status", "--json", "--socket", sock, "--token", "t0k"))
        env = {"SLUICEGATE_TOKEN": "t0k", "SLUICEGATE_SOCKET": sock}
        assert json_doc(sluice("enqueue", "q", "t", "--json", env=env))["job"]["queue"] == "q"
    finally:
        proc.stop()


def _start_worker(daemon: Any, queue: str, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daemon.cli.main",
            "work",
            queue,
            "--socket",
            str(daemon.socket),
            "--concurrency",
            "2",
            "--wait-ms",
            "1000",
            "--",
            *command,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop_worker(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out, err


def test_work_runs_the_command_per_job_and_prints_its_lines(daemon):
    with Client(daemon.socket) as client:
        ids = [
            r["job"]["id"]
            for r in client.enqueue_many(
                [{"queue": "cat", "type": "t", "payload": {"n": n}} for n in range(3)]
            )
        ]
        worker = _start_worker(daemon, "cat", "cat")
        try:
            wait_for(lambda: all(client.get(i)["status"] == "completed" for i in ids))
        finally:
            out, err = _stop_worker(worker)
    lines = out.splitlines()
    assert len(lines) == 9
    for n, job_id in enumerate(ids):
        running = [ln for ln in lines if f"Job {job_id} running" in ln]
        exited = [ln for ln in lines if f"Job {job_id} exited" in ln]
        assert re.fullmatch(rf"{STAMP}: Job {job_id} running in process \d+", running[0])
        assert re.fullmatch(rf"{STAMP}: Job {job_id} exited with status 0", exited[0])
        # cat echoed the payload (JSON on stdin): on the worker's stdout, with the job's id.
        echoed = lines.index(f'{job_id}: {{"n":{n}}}')
        assert lines.index(running[0]) < echoed < lines.index(exited[0])
    assert '{"n":' not in err


def test_work_fails_a_job_with_the_tail_of_stderr(daemon):
    script = (
        'echo "$SLUICEGATE_QUEUE $SLUICEGATE_ATTEMPT $SLUICEGATE_JOB_ID" >&2; echo boom >&2; exit 3'
    )
    with Client(daemon.socket) as client:
        job_id = client.enqueue("fails", "t", max_attempts=1)["job"]["id"]
        worker = _start_worker(daemon, "fails", "sh", "-c", script)
        try:
            wait_for(lambda: client.get(job_id)["status"] == "dead")
        finally:
            out, _err = _stop_worker(worker)
        job = client.get(job_id)
    assert job["error"] == f"fails 1 {job_id}\nboom"
    assert re.search(rf"^{STAMP}: Job {job_id} exited with status 3$", out, re.M)


def test_work_settles_the_cost_a_command_reports_on_stderr(daemon):
    script = (
        "import json, sys; cost = json.load(sys.stdin)['cost']; "
        "print('SLUICEGATE_COST ' + json.dumps(cost), file=sys.stderr)"
    )
    with Client(daemon.socket) as client:
        client.call("budget_create", key="work-llm", allocation=100,
                    strategy={"type": "time_based", "duration_ms": 3_600_000})  # fmt: skip
        bound = [{"key": "work-llm", "cost": 10}]
        ids = [client.enqueue("costly", "t", {"cost": cost}, budgets=bound)["job"]["id"]
               for cost in ({"work-llm": 2.5}, {"ghost": 1})]  # fmt: skip
        worker = _start_worker(daemon, "costly", sys.executable, "-c", script)
        try:
            wait_for(lambda: all(client.get(i)["status"] == "completed" for i in ids))
        finally:
            _out, err = _stop_worker(worker)
        costs = [client.get(i)["costs"] for i in ids]
        available = client.call("budget_get", key="work-llm")["budget"]["state"]["available"]
    assert costs[0] == [{"key": "work-llm", "reserved": 10, "settled": 2.5}]
    assert costs[1] == [{"key": "work-llm", "reserved": 10, "settled": None}]  # refused: plain
    assert available >= 87.5  # 100 - 2.5 - 10 and some drip (80 and some, unsettled)
    assert f"sluice: job {ids[1]}: its cost was refused, completed without it" in err
    assert f'{ids[0]}: SLUICEGATE_COST {{"work-llm": 2.5}}' in err  # passed on, too


def test_dead_replay_all_goes_in_batches(daemon):
    with Client(daemon.socket) as client:
        for size in (1000, 1000, 5):
            client.enqueue_many([{"queue": "d", "type": "t"}] * size)
        pending = [
            client.submit("fail", job_id=job.id, lease=job.lease, error="x", dead=True)
            for _ in range(3)
            for job in client.claim_next(["d"], max=1000)
        ]
        for req_id in pending:  # pipelined: 2005 requests in flight, answered in any order
            client.result(req_id)
        one = client.dead_list(limit=1)["jobs"][0]["id"]
    single = sluice("dead", "replay", one, "--socket", str(daemon.socket))
    assert single.returncode == 0 and single.stdout.startswith(f"replayed {one} on d")
    replay = sluice(
        "dead", "replay", "--all", "--queue", "d", "--json", "--socket", str(daemon.socket)
    )
    result = json_doc(replay)
    assert len(result["results"]) == 2004 and result["remaining"] is False
    assert replay.stderr == ""  # no progress bar under --json, nor off a terminal
    status = json_doc(sluice("status", "--json", "--socket", str(daemon.socket)))
    assert status["queues"][0]["pending"] == 2005 and status["queues"][0]["dead"] == 0
    nothing = sluice("dead", "list", "--socket", str(daemon.socket))
    assert nothing.stdout == "no dead letters\n"


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args", [["--help"], ["work", "--help"], ["dead", "replay", "--help"], ["demo", "--help"]]
)
def test_help_exits_zero(args):
    proc = sluice(*args)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: sluice")


def test_the_cli_retries_as_the_sdk_does_and_one_setting_changes_both(monkeypatch, capsys):
    from daemon.cli.context import Context
    from daemon.cli.main import build_parser

    monkeypatch.delenv("SLUICEGATE_CALL_ATTEMPTS", raising=False)
    default = Context.from_args(build_parser().parse_args(["status"])).retry_policy()
    assert (default.limit(waiting=False), default.limit(waiting=True)) == (10, None)
    given = Context.from_args(build_parser().parse_args(["status", "--call-attempts", "4"]))
    policy = given.retry_policy()
    assert policy.limit(waiting=False) == policy.limit(waiting=True) == 4
    monkeypatch.setenv("SLUICEGATE_CALL_ATTEMPTS", "2")
    assert Context.from_args(build_parser().parse_args(["status"])).max_attempts == 2
    monkeypatch.setenv("SLUICEGATE_CALL_ATTEMPTS", "zero")
    assert main(["status", "--socket", "/nonexistent.sock"]) == 2
    assert "$SLUICEGATE_CALL_ATTEMPTS must be an integer of at least 1" in capsys.readouterr().err
    assert main(["status", "--call-attempts", "0"]) == 2
