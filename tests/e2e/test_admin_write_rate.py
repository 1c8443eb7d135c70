"""Issue 13 item 15: the admin write limiter is configured, names its limit; the CLI waits.

``[daemon] admin_write_rate`` / ``admin_write_burst`` (default ``1/s``, 10) and
a token's ``write_rate`` / ``write_burst`` (or ``"unlimited"``) on a real
``sluice serve``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import ROOT, token_tables

pytestmark = pytest.mark.e2e

WIF = {"allocation": 5, "strategy": {"type": "while_in_flight"}}
GRANTS = ["produce", "consume", "manage"]
HINT = "(set write_rate on the token or [daemon] admin_write_rate)"


def _daemon(make_daemon):
    tables = token_tables(
        {"name": "person", "namespace": "ops", "grants": GRANTS, "token": "t-person"},
        {"name": "deploy", "namespace": "ops", "grants": GRANTS, "token": "t-deploy"},
        {"name": "cli", "namespace": "ops", "grants": GRANTS, "token": "t-cli"},
    )
    # token_tables writes no write_rate: add them after the token lines.
    tables = tables.replace('token = "t-deploy"', 'token = "t-deploy"\nwrite_rate = "unlimited"')
    tables = tables.replace(
        'token = "t-cli"', 'token = "t-cli"\nwrite_rate = "12/m"\nwrite_burst = 1'
    )
    return make_daemon(tables)


def _creates(client, n: int, prefix: str) -> list[dict]:
    """``n`` budget creates sent at once (pipelined), their answers in request order
    (a refusal may be answered before the writes ahead of it commit)."""
    ids = [client.request("budget_create", key=f"{prefix}{i}", **WIF) for i in range(n)]
    frames = {frame["id"]: frame for frame in (client.read() for _ in ids)}
    return [frames[req_id] for req_id in ids]


def test_unlimited_token_creates_50_budgets_and_the_default_refuses_the_11th(make_daemon, connect):
    daemon = _daemon(make_daemon)
    deploy = connect(daemon)
    deploy.ok("hello", token="t-deploy")
    answers = _creates(deploy, 50, "d")
    assert [a["ok"] for a in answers] == [True] * 50, [a for a in answers if not a["ok"]][:1]

    person = connect(daemon)
    person.ok("hello", token="t-person")
    answers = _creates(person, 11, "p")
    assert [a["ok"] for a in answers] == [True] * 10 + [False]
    error = answers[10]["error"]
    assert (error["code"], error["status"], error["limit"]) == ("rate_limited", 429, "admin_writes")
    assert error["message"] == f"admin write rate limit exceeded: 1/s, burst 10 {HINT}"
    assert error["retry_after"] == 1
    # The same bucket over HTTP: the same refusal, with Retry-After.
    with daemon.http("t-person") as http:
        r = http.post("/budgets/h", json=WIF)
    if r.status_code == 429:  # unless a token dripped back meanwhile
        assert r.json()["error"] == f"admin write rate limit exceeded: 1/s, burst 10 {HINT}"
        assert r.headers["retry-after"] == "1"


def test_the_cli_waits_out_a_429_and_says_so(make_daemon, connect):
    daemon = _daemon(make_daemon)
    client = connect(daemon)
    client.ok("hello", token="t-cli")
    client.ok("budget_create", key="first", **WIF)  # the only token of a burst of 1
    assert client.error("budget_create", key="second", **WIF)["code"] == "rate_limited"
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "budget", "create", "from-cli",
         "--allocation", "5", "--strategy", "while_in_flight",
         "--socket", str(daemon.socket), "--token", "t-cli"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "SLUICEGATE_CALL_ATTEMPTS": "10"},
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "rate_limited: admin write rate limit exceeded: 12/m, burst 1" in done.stderr
    assert "trying again in" in done.stderr
    assert client.ok("budget_get", key="from-cli")["budget"]["allocation"] == 5
