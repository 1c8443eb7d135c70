"""``what_if`` end to end: one ``sluice serve`` (with tokens), the same preview over the
socket, ``POST /api/v1/what-if`` and ``sluice ... --dry-run``, the change's own grant,
and every table of the store (SQLite or PostgreSQL) unchanged after all of them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.support import DaemonProcess, RawClient, token_tables

pytestmark = pytest.mark.e2e

OPERATOR, OWNER = "tok-what-if-operator", "tok-what-if-owner"
TOKENS = token_tables(
    {"name": "ops", "token": OPERATOR, "namespace": "A", "grants": ["operator"]},
    {"name": "owner", "token": OWNER, "namespace": "A",
     "grants": ["produce", "consume", "manage"]},
)  # fmt: skip
HOURLY = {"period": "hour", "tz": "UTC", "start": "00:00"}


def fingerprint(daemon: DaemonProcess) -> str:
    """Every table's rows (sorted), hashed: the same on either store."""
    if daemon.dsn is None:
        listing = "SELECT name FROM sqlite_master WHERE type = 'table'"
    else:
        listing = ("SELECT table_name FROM information_schema.tables "
                   "WHERE table_schema = current_schema()")  # fmt: skip
    digest = hashlib.sha256()
    for (table,) in sorted(daemon.sql(listing)):
        rows = sorted(repr(r) for r in daemon.sql(f'SELECT * FROM "{table}"'))
        digest.update(f"{table}:{len(rows)}:{''.join(rows)}".encode())
    return digest.hexdigest()


def sluice(daemon: DaemonProcess, *args: str, token: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", *args, "--socket", str(daemon.socket),
         "--token", token],
        capture_output=True, text=True, timeout=30, env=env, cwd=daemon.workdir,
    )  # fmt: skip


def test_previews_over_the_socket_http_and_the_cli_write_nothing(make_daemon):
    d = make_daemon(TOKENS)
    with RawClient(d.socket) as owner:
        _previews(d, owner)


def _previews(d: DaemonProcess, owner: RawClient) -> None:
    owner.ok("hello", token=OWNER)
    owner.ok("policy_set", queue="q", max_claims_per_window=60, window=HOURLY)
    owner.ok("enqueue_many", jobs=[{"queue": "q", "type": "t"} for _ in range(160)])
    assert len(owner.ok("claim_next", queues=["q"], max=100, lease_ms=3_600_000)["jobs"]) == 60
    before = fingerprint(d)

    change = {"op": "policy_set", "queue": "q", "max_claims_per_window": 100, "window": HOURLY}
    socket = owner.ok("what_if", change=change)
    assert socket["now"]["admissible_now"] == {"before": 0, "after": 40}
    with d.http(OWNER) as http:
        r = http.post("/api/v1/what-if", json={"change": change})
        assert r.status_code == 200
        now = r.json()["now"]  # "now" moved on between the two: head eligible now
        assert now.pop("head_next_eligible_at") >= socket["now"].pop("head_next_eligible_at")
        assert now == socket["now"]
        bad = http.post("/api/v1/what-if", json={"change": {"op": "drop_everything"}})
        assert (bad.status_code, bad.json()["code"], bad.json()["field"]) == (
            422, "invalid_argument", "change.op",
        )  # fmt: skip
        # The change's own grant: quota_set needs operator.
        quota = {"op": "quota_set", "quota": {"max_pending": 30, "on_excess": "drop"}}
        denied = http.post("/api/v1/what-if", json={"change": quota})
        assert (denied.status_code, denied.json()["code"]) == (403, "forbidden")
    with d.http(OPERATOR) as http:
        r = http.post("/api/v1/what-if?namespace=A", json={"change": quota})
        assert r.status_code == 200 and r.json()["now"]["shed_next_enqueues"] is True

    cli = sluice(d, "queue", "budget", "set", "q", "--max-claims-per-window", "50",
                 "--period", "hour", "--tz", "UTC", "--dry-run", "--json", token=OWNER)  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    preview = json.loads(cli.stdout)
    assert preview["op"] == "policy_set" and preview["now"]["admissible_now"]["after"] == 0
    assert preview["now"]["head_next_eligible_at"] == owner.ok("admission_status", queue="q")[
        "queues"][0]["window_resets_at"]  # fmt: skip
    human = sluice(d, "quota", "set", "--namespace", "A", "--max-pending", "30",
                   "--on-excess", "drop", "--dry-run", token=OPERATOR)  # fmt: skip
    assert human.returncode == 0, human.stderr
    assert "nothing was written" in human.stdout and "(shed: on_excess = drop)" in human.stdout
    budget = sluice(d, "budget", "set", "b", "--allocation", "6", "--strategy", "time_based",
                    "--duration", "1h", "--dry-run", "--json", token=OWNER)  # fmt: skip
    assert json.loads(budget.stdout)["now"]["budget_available"] == {"before": None, "after": 6.0}

    assert fingerprint(d) == before
    assert owner.ok("policy_get", queue="q")["policy"]["max_claims_per_window"] == 60
    assert owner.ok("audit_list")["records"][0]["action"] == "set_policy"
