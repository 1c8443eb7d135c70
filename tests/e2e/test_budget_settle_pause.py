"""Settling costs and pausing budgets against a real ``sluice serve``, over the
socket and HTTP, on both stores (``daemon_store``).

The exact timelines run on MockClock in tests/unit/test_budget_settle.py and
test_budget_pause.py; here the wire: ``complete``'s ``cost``, the job's
``costs``, ``budget_pause``/``budget_resume`` and their REST routes, grants,
the deferral's reason, audit and metrics. The budget drips 100 tokens per
24.8 days, so what the drip adds while the test runs stays below 0.01.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from daemon.client import Client, TrioClient
from tests.support import DaemonProcess, RawClient, token_tables

pytestmark = pytest.mark.e2e

OWNER, WORKER, ELSEWHERE, OTHER_NS = "tok-owner-1", "tok-worker-2", "tok-else-3", "tok-b-4"
TOKENS = token_tables(
    {"name": "owner", "token": OWNER, "namespace": "A", "grants": ["produce", "consume", "manage"]},
    {"name": "worker", "token": WORKER, "namespace": "A", "grants": ["consume"],
     "queues": ["calls"]},
    {"name": "elsewhere", "token": ELSEWHERE, "namespace": "A", "grants": ["consume"],
     "queues": ["other"]},
    {"name": "owner-b", "token": OTHER_NS, "namespace": "B", "grants": ["manage"]},
)  # fmt: skip
SLOW_DRIP = {"allocation": 100, "strategy": {"type": "time_based", "duration_ms": 2**31 - 1}}


def body(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()


def test_settle_and_pause_over_the_socket_and_http(make_daemon, connect):
    d: DaemonProcess = make_daemon(TOKENS)

    def login(token: str) -> RawClient:
        client = connect(d)
        client.ok("hello", token=token)
        return client

    owner, worker = login(OWNER), login(WORKER)
    owner.ok("budget_create", key="llm", **SLOW_DRIP)
    bound = [{"key": "llm", "cost": 10}]
    ids = [owner.ok("enqueue", queue="calls", type="t", budgets=bound)["job"]["id"]
           for _ in range(3)]  # fmt: skip

    # Settle over the socket: reserve 10, settle 4, 6 back.
    (first,) = worker.ok("claim_next", queues=["calls"])["jobs"]
    done = worker.ok("complete", job_id=first["job"]["id"], lease=first["job"]["lease"],
                     cost={"llm": 4})  # fmt: skip
    assert done["job"]["costs"] == [{"key": "llm", "reserved": 10, "settled": 4}]
    available = owner.ok("budget_get", key="llm")["budget"]["state"]["available"]
    assert 96 <= available < 96.01

    with d.http(WORKER) as http_w, d.http(OWNER) as http_o, d.http(ELSEWHERE) as http_e, \
            d.http(OTHER_NS) as http_b:  # fmt: skip
        # Settle over HTTP: a refused key first (nothing written), then 25, 15 over.
        (second,) = body(http_w.post("/v1/ops/claim_next", json={"queues": ["calls"]}), 200)["jobs"]
        lease = {"job_id": second["job"]["id"], "lease": second["job"]["lease"]}
        refused = body(http_w.post("/v1/ops/complete", json={**lease, "cost": {"ghost": 1}}), 422)
        assert (refused["code"], refused["field"]) == ("invalid_argument", "cost.ghost")
        settled = body(http_w.post("/v1/ops/complete", json={**lease, "cost": {"llm": 25}}), 200)
        assert settled["job"]["costs"] == [{"key": "llm", "reserved": 10, "settled": 25}]
        state = body(http_o.get("/budgets/llm"), 200)["state"]
        assert 71 <= state["available"] < 71.01

        # Pause over HTTP, by the worker whose queue binds the budget.
        ask = {"retry_after_s": 600, "reason": "429 upstream"}
        paused = body(http_w.post("/budgets/llm/pause", json=ask), 200)
        until = paused["state"]["paused_until"]
        assert paused["state"]["pause_reason"] == "429 upstream"
        assert (
            body(http_e.post("/budgets/llm/pause", json={"retry_after_s": 1}), 403)["code"]
            == "forbidden"
        )
        assert (
            body(http_b.post("/budgets/llm/pause", json={"retry_after_s": 1}), 404)["code"]
            == "not_found"
        )
        both = body(http_w.post("/budgets/llm/pause", json={"retry_after_s": 1, "until_ms": 1}),
                    422)  # fmt: skip
        assert both["field"] == "until_ms"

        # Held with the reason, on the socket; a shorter pause there shortens nothing.
        answer = worker.ok("claim_next", queues=["calls"])
        assert answer["empty"] and answer["deferred"] == [{
            "queue": "calls", "reason": "budget_paused", "pending": 1, "budget": "llm",
            "next_eligible_at": until, "exact": True, "pause_reason": "429 upstream",
        }]  # fmt: skip
        job = owner.ok("get", job_id=ids[2])["job"]
        assert job["admission"]["reason"] == "budget_paused"
        again = worker.ok("budget_pause", key="llm", retry_after_s=5, reason="short")
        assert again["budget"]["state"]["paused_until"] == until
        assert body(http_b.get("/budgets"), 200)["budgets"] == []

        # Only manage resumes; then the job is claimable at once.
        assert body(http_w.post("/budgets/llm/resume"), 403)["code"] == "forbidden"
        resumed = body(http_o.post("/budgets/llm/resume"), 200)
        assert resumed["state"]["paused_until"] is None
        (third,) = worker.ok("claim_next", queues=["calls"])["jobs"]
        assert third["job"]["id"] == ids[2]

        # Audited with the worker's token as the actor; counted in metrics.
        records = owner.ok("audit_list", target_kind="budget", target="llm")["records"]
        assert [(r["action"], r["actor"]) for r in records] == [
            ("create", "owner"), ("pause", "worker"), ("resume", "owner")]  # fmt: skip
        metrics = body_text(http_o.get("/metrics"))
        assert 'sluicegate_budget_settled_total{budget="llm"} 29.0' in metrics
        assert 'sluicegate_budget_pauses_total{budget="llm"} 1.0' in metrics


def body_text(response: Any) -> str:
    assert response.status_code == 200, response.text
    return response.text


async def test_the_sdks_settle_and_pause(daemon):
    """The blocking client (a worker's job handle, then the client's resume), then
    the Trio one, against one daemon."""
    with Client(daemon.socket) as client:
        client.call("budget_create", key="sdk", **SLOW_DRIP)
        for _ in range(2):
            client.enqueue("sdk-q", "t", budgets=[{"key": "sdk", "cost": 10}])
        (job,) = client.claim_next(["sdk-q"])
        paused = job.pause_budget("sdk", retry_after_s=30, reason="429")
        assert paused["state"]["pause_reason"] == "429" and paused["state"]["paused_until"]
        done = job.complete(cost={"sdk": 3})
        assert done["costs"] == [{"key": "sdk", "reserved": 10, "settled": 3}]
        held = client.claim_next(["sdk-q"])
        assert list(held) == [] and held.deferred[0]["reason"] == "budget_paused"
        assert client.budget_resume("sdk")["state"]["paused_until"] is None
        assert len(client.claim_next(["sdk-q"])) == 1
    with trio.fail_after(30):
        async with TrioClient.connect(daemon.socket) as client:
            await client.call("budget_create", key="tsdk", **SLOW_DRIP)
            await client.enqueue("tsdk-q", "t", budgets=[{"key": "tsdk", "cost": 10}])
            (job,) = await client.claim_next(["tsdk-q"])
            until = int(time.time() * 1000) + 600_000  # the daemon's clock is the host's
            paused = await job.pause_budget("tsdk", until_ms=until, reason="maintenance")
            assert paused["state"]["paused_until"] == until
            done = await job.complete(cost={"tsdk": 12.5})
            assert done["costs"] == [{"key": "tsdk", "reserved": 10, "settled": 12.5}]
            state = (await client.budget_resume("tsdk"))["state"]
            assert state["paused_until"] is None and 87.5 <= state["available"] < 87.51
