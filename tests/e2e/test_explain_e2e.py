"""``explain`` against a real ``sluice serve``: the socket, ``GET
/api/v1/jobs/{id}/explain``, ``sluice jobs explain``, the SDK and the OpenAPI document,
with tokens (another tenant's job is ``not_found``, the grant is ``get``'s).

The limits' arithmetic runs on MockClock in tests/unit/test_explain.py; here one
daemon and one held job, seen through every surface.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from daemon.cli.main import main as sluice_main
from daemon.client import Client
from tests.support import DaemonProcess, token_tables

pytestmark = pytest.mark.e2e

OWNER, READER, OTHER_NS = "tok-owner-1", "tok-reader-2", "tok-b-3"
TOKENS = token_tables(
    {"name": "owner", "token": OWNER, "namespace": "A", "grants": ["produce", "consume", "manage"]},
    {"name": "reader", "token": READER, "namespace": "A", "grants": ["consume"]},
    {"name": "owner-b", "token": OTHER_NS, "namespace": "B", "grants": ["manage", "produce"]},
)  # fmt: skip
LA = "America/Los_Angeles"


def test_explain_over_the_socket_http_and_the_cli(make_daemon, connect, capsys, monkeypatch):
    d: DaemonProcess = make_daemon(TOKENS)
    owner, reader, other = (connect(d) for _ in range(3))
    for client, token in ((owner, OWNER), (reader, READER), (other, OTHER_NS)):
        client.ok("hello", token=token)
    window = {"period": "day", "tz": LA, "start": "00:00"}
    owner.ok("policy_set", queue="images", max_claims_per_window=1, window=window)
    for _ in range(2):
        owner.ok("enqueue", queue="images", type="t")
    (claimed,) = owner.ok("claim_next", queues=["images"])["jobs"]
    held = owner.ok("list", queue="images", status="pending")["jobs"][0]["id"]

    # The socket, with a consume-only token (the grant is get's).
    answer = reader.ok("explain", job_id=held)
    del answer["id"], answer["ok"]
    reopens = answer["holds"][0]["next_eligible_at"]
    assert answer == {
        "job_id": held, "status": "pending", "position": {"ahead": 0, "approximate": False},
        "holds": [{"limit": "day", "kind": "policy_window", "scope": {"queue": "images"},
                   "used": 1, "max": 1, "holding": True, "next_eligible_at": reopens,
                   "exact": True}],
    }  # fmt: skip
    assert datetime.fromtimestamp(reopens / 1000, ZoneInfo(LA)).strftime("%H:%M") == "00:00"
    running = reader.ok("explain", job_id=claimed["job"]["id"])
    assert [(h["limit"], h["holding"]) for h in running["holds"]] == [("day", False)]
    assert running["position"] == {"ahead": None, "approximate": False}

    with d.http(OWNER) as http_a, d.http(OTHER_NS) as http_b:
        # HTTP: the same answer; another tenant's job is not_found, on both faces.
        got = http_a.get(f"/api/v1/jobs/{held}/explain")
        assert (got.status_code, got.json()) == (200, answer)
        for response in (http_b.get(f"/api/v1/jobs/{held}/explain"),
                         http_b.post("/v1/ops/explain", json={"job_id": held})):  # fmt: skip
            assert (response.status_code, response.json()["code"]) == (404, "not_found")
        bad = http_a.post("/v1/ops/explain", json={"job_id": 5})
        assert (bad.status_code, bad.json()["field"]) == (422, "job_id")
        assert http_a.post(f"/api/v1/jobs/{held}/explain").status_code == 405
        spec = http_a.get("/openapi.json").json()
        assert set(spec["paths"]["/api/v1/jobs/{id}/explain"]) == {"get"}
    assert other.error("explain", job_id=held)["code"] == "not_found"
    with Client(d.socket, token=READER) as sdk:  # the SDK's face
        assert sdk.explain(held) == answer

    # The CLI: the summary in the viewer's zone and UTC, the table, --json.
    monkeypatch.setenv("TZ", LA)
    time.tzset()
    try:
        base = ["--socket", str(d.socket), "--token", READER]
        assert sluice_main(["jobs", "explain", held, *base]) == 0
        out = capsys.readouterr().out
        local = datetime.fromtimestamp(reopens / 1000).astimezone().strftime("%H:%M %Z")
        utc = datetime.fromtimestamp(reopens / 1000, UTC).strftime("%H:%M UTC")
        assert out.startswith(f"held by window 'day' of queue images: 1 of 1 used, reopens "
                              f"{local} ({utc}) in "), out  # fmt: skip
        assert "LIMIT" in out and "0 claimable job(s) ahead" in out
        assert sluice_main(["jobs", "explain", held, "--json", *base]) == 0
        assert json.loads(capsys.readouterr().out) == answer
        assert sluice_main(["jobs", "explain", "nosuchjob", *base]) == 1
        assert "not_found" in capsys.readouterr().err
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
