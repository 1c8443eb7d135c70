"""The board over ASGI (httpx), on an in-process core: pages, sign-in, CSRF, scoping."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from daemon.board.access import COOKIE
from daemon.board.app import board_app
from daemon.config import parse_config
from daemon.core import Core
from daemon.dispatch import dispatch
from tests.unit.harness import call, running_core

DAILY = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}
TOKENS = [
    {
        "name": "alice",
        "token": "alice-secret",
        "namespace": "a",
        "grants": ["manage", "produce", "consume"],
    },
    {"name": "bob", "token": "bob-secret", "namespace": "b", "grants": ["manage"]},
    {
        "name": "worker",
        "token": "worker-secret",
        "namespace": "a",
        "grants": ["consume"],
        "queues": ["images"],
    },
    {"name": "ops", "token": "ops-secret", "namespace": "ops", "grants": ["operator"]},
]


@asynccontextmanager
async def board(
    tmp_path: Path, tokens: bool = False
) -> AsyncIterator[tuple[Core, httpx.AsyncClient]]:
    """A core (open mode, or with :data:`TOKENS`) and an httpx client on its board."""
    config = parse_config({"tokens": TOKENS}, "test.toml") if tokens else None
    async with running_core(tmp_path, config=config) as core:
        app = board_app(core)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://board") as client:
            yield core, client


async def as_token(core: Core, token: str, op: str, **args: Any) -> dict[str, Any]:
    return await dispatch(core, core.auth.check(token), op, args)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, html
    return found.group(1)


async def exhausted(core: Core) -> None:
    """``investigations``: 3 of 3 daily claims used, 2 jobs held back."""
    await call(core, "policy_set", queue="investigations", max_claims_per_window=3, window=DAILY)
    for _ in range(5):
        await call(core, "enqueue", queue="investigations", type="probe")
    await call(core, "claim_next", queues=["investigations"], max=3)


async def test_queue_page_header_chips_and_no_inline_code(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await exhausted(core)
            r = await client.get("/board/ns/default/q/investigations")
            assert r.status_code == 200
            html = r.text
            assert "3 of 3 used" in html
            assert "exhausted" in html
            assert 'resets at <time datetime="2023-11-15T08:00:00Z"' in html
            assert "Wed 15 Nov 00:00 PST (Wed 15 Nov 08:00 UTC)" in html
            assert html.count('chip-state">deferred</span> · window used up · eligible') == 2
            assert 'aria-live="polite"' in html
            # The CSP allows no inline script or style: neither appears.
            assert "style=" not in html and "<style" not in html
            assert not re.search(r"<script(?![^>]*\bsrc=)", html)
            assert r.headers["set-cookie"].startswith(f"{COOKIE}=")
            for part in ("HttpOnly", "SameSite=Strict", "Path=/"):
                assert part in r.headers["set-cookie"]


async def test_the_queue_page_shows_groups_with_reserved_and_lent_slots(tmp_path):
    """Issue 18: gold's 4 reserved slots of 10 are idle and held by group a, so
    they show as lent (table and bar); the others' rows lend nothing."""
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            policy = {
                "fairness": "round_robin",
                "weights": {"gold": 3},
                "min_in_flight": {"gold": 4},
            }
            await call(core, "policy_set", queue="reports", max_in_flight=10, **policy)
            await call(core, "enqueue_many", jobs=[{"queue": "reports", "type": "r",
                                                    "group": "a"}] * 12)  # fmt: skip
            await call(core, "claim_next", queues=["reports"], max=10)
            await call(core, "enqueue", queue="reports", type="r", group="gold")
            html = (await client.get("/board/ns/default/q/reports")).text
            rows = re.findall(r"<tr(?: class=\"lending\")?><th scope=\"row\">(.*?)</tr>", html)
            cells = {r.split("<")[0]: re.findall(r"<td>([^<]*)</td>", r) for r in rows}
            # weight, pending, in flight, reserved, lent
            assert cells == {
                "a": ["1", "2", "10", "0", "0"],
                "gold": ["3", "1", "0", "4", "4 lent"],
            }
            assert html.count('class="lent"') == 1 and "4 reserved, 4 of them idle, 4 lent" in html
            status = (await call(core, "admission_status", queue="reports"))["queues"][0]
            assert [(g["group"], g["lent"]) for g in status["groups"]] == [("a", 0), ("gold", 4)]
            jobs = (await call(core, "claim_next", queues=["reports"], max=10))["jobs"]
            assert jobs == []  # nothing free: gold waits, nothing revoked


async def test_every_page_renders(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await exhausted(core)
            await call(
                core,
                "budget_create",
                key="img",
                allocation=10,
                strategy={"type": "time_based", "duration_ms": 60_000, "burst": 5},
            )
            await call(core, "quota_set", quota={"max_pending": 100, "max_running": 5})
            for path in (
                "/",
                "/board",
                "/board/ns/default",
                "/board/ns/default/budgets",
                "/board/ns/default/budgets/img",
                "/board/ns/default/quota",
                "/board/ns/default/audit",
                "/board/ns/default/q/investigations/policy",
                "/board/static/board.css",
                "/board/static/board.js",
            ):
                r = await client.get(path)
                assert r.status_code == 200, (path, r.text[:500])
            quota = (await client.get("/board/ns/default/quota")).text
            assert "<code>max_pending</code>" in quota and "<code>max_running</code>" in quota
            budgets = (await client.get("/board/ns/default/budgets")).text
            assert 'aria-label="Edit budget img"' in budgets
            assert "<svg" in budgets and "Available tokens over time" in budgets
            missing = await client.get("/board/ns/default/q/nope")
            assert missing.status_code == 404


async def test_the_budgets_page_shows_a_pause_with_its_reason(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "budget_create", key="llm", allocation=5,
                       strategy={"type": "while_in_flight"})  # fmt: skip
            page = (await client.get("/board/ns/default/budgets")).text
            assert "paused until" not in page
            await call(core, "budget_pause", key="llm", retry_after_s=60,
                       reason="429 <upstream>")  # fmt: skip
            page = (await client.get("/board/ns/default/budgets")).text
            assert re.search(r"<strong>paused until .*</strong>: 429 &lt;upstream&gt;", page)


async def test_policy_editor_saves_over_a_form_post_and_audits(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await exhausted(core)
            page = await client.get("/board/ns/default/q/investigations/policy")
            assert 'id="max_claims_per_window"' in page.text and "autofocus" in page.text
            form = {
                "csrf": csrf_of(page.text),
                "max_claims_per_window": "50",
                "period": "day",
                "tz": "Europe/Paris",
                "start": "06:00",
                "weekday": "Mon",
                "max_in_flight": "4",
                "action": "save",
            }
            r = await client.post("/board/ns/default/q/investigations/policy", data=form)
            assert r.status_code == 303
            assert (
                r.headers["location"]
                == "/board/ns/default/q/investigations?notice=saved#edit-policy"
            )
            policy = (await call(core, "policy_get", queue="investigations"))["policy"]
            assert policy["max_claims_per_window"] == 50 and policy["max_in_flight"] == 4
            assert policy["window"] == {"period": "day", "tz": "Europe/Paris", "start": "06:00"}
            queue = (await client.get(r.headers["location"])).text
            assert "Policy saved." in queue
            assert "max_claims_per_window: 3 → 50" in queue


async def test_policy_editor_keeps_the_group_fields_it_does_not_show(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "policy_set", queue="reports", max_in_flight=10,
                       fairness="round_robin", min_in_flight={"gold": 4})  # fmt: skip
            page = (await client.get("/board/ns/default/q/reports/policy")).text
            form = {"csrf": csrf_of(page), "max_in_flight": "12", "action": "save"}
            r = await client.post("/board/ns/default/q/reports/policy", data=form)
            assert r.status_code == 303
            policy = (await call(core, "policy_get", queue="reports"))["policy"]
            assert policy["max_in_flight"] == 12
            assert (policy["fairness"], policy["min_in_flight"]) == ("round_robin", {"gold": 4})


async def test_budget_editor_keeps_and_sets_a_reserve(tmp_path):
    """Issue 18: the editor shows a budget's reserve and saves it; over the
    allocation, the verb's refusal shows beside the field, nothing written."""
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            spec = {"type": "while_in_flight", "reserve": {"gold": 4}}
            await call(core, "budget_create", key="llm", allocation=10, strategy=spec)
            page = (await client.get("/board/ns/default/budgets/llm")).text
            assert 'name="reserve" value="gold=4"' in page
            form = {"csrf": csrf_of(page), "allocation": "10", "type": "while_in_flight",
                    "reserve": "gold=4, silver=2"}  # fmt: skip
            r = await client.post("/board/ns/default/budgets/llm", data=form)
            assert r.status_code == 303
            got = (await call(core, "budget_get", key="llm"))["budget"]["strategy"]
            assert got["reserve"] == {"gold": 4, "silver": 2}
            r = await client.post(
                "/board/ns/default/budgets/llm", data={**form, "reserve": "gold=9, silver=2"}
            )
            assert "reserves 11 tokens in all, more than allocation 10" in r.text
            assert (
                'id="reserve" name="reserve" value="gold=9, silver=2" autofocus aria-invalid="true"'
                in r.text
            )
            got = (await call(core, "budget_get", key="llm"))["budget"]["strategy"]
            assert got["reserve"] == {"gold": 4, "silver": 2}


async def test_policy_editor_shows_a_verb_refusal_beside_the_field(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            page = await client.get("/board/ns/default/q/q1/policy")
            form = {
                "csrf": csrf_of(page.text),
                "max_claims_per_window": "5",
                "period": "day",
                "tz": "Mars/Olympus",
                "start": "00:00",
                "max_in_flight": "",
            }
            r = await client.post("/board/ns/default/q/q1/policy", data=form)
            assert r.status_code == 422
            tz = 'id="tz" name="tz" value="Mars/Olympus" autocomplete="off" autofocus'
            assert tz + ' aria-invalid="true"' in r.text
            assert 'role="alert"' in r.text
            assert core.policies.get("default", "q1") is None


async def test_forms_without_the_csrf_token_of_the_cookie_are_refused(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await exhausted(core)
            page = await client.get("/board/ns/default/q/investigations/policy")
            token = csrf_of(page.text)
            fields = {"max_claims_per_window": "9", "period": "day", "tz": "UTC", "start": "00:00"}
            url = "/board/ns/default/q/investigations/policy"
            missing = await client.post(url, data=fields)
            wrong = await client.post(url, data={**fields, "csrf": "0" * 64})
            async with httpx.AsyncClient(
                transport=client._transport, base_url="http://board"
            ) as other:
                # Another browser (another cookie) cannot reuse this browser's token.
                stolen = await other.post(url, data={**fields, "csrf": token})
            for r in (missing, wrong, stolen):
                assert r.status_code == 403
                assert "expired or came from another site" in r.text
            assert core.policies.get("default", "investigations").policy.max_claims_per_window == 3


async def test_dead_letter_replay_form(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "enqueue", queue="mail", type="send")
            job = (await call(core, "claim_next", queues=["mail"]))["jobs"][0]["job"]
            await call(core, "fail", job_id=job["id"], lease=job["lease"], error="e", dead=True)
            page = await client.get("/board/ns/default/q/mail")
            assert f'aria-label="Replay job {job["id"]}"' in page.text
            r = await client.post(
                "/board/ns/default/q/mail/replay",
                data={"csrf": csrf_of(page.text), "job_id": job["id"]},
            )
            assert r.status_code == 303 and r.headers["location"].endswith("?notice=replayed#dead")
            assert (await call(core, "get", job_id=job["id"]))["job"]["status"] == "pending"


async def test_sign_in_once_then_a_session_cookie_and_sign_out(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path, tokens=True) as (_core, client):
            r = await client.get("/board/ns/a")
            assert r.status_code == 303
            assert r.headers["location"] == "/board/signin?next=/board/ns/a"
            signin = await client.get(r.headers["location"])
            assert 'type="password"' in signin.text
            bad = await client.post(
                "/board/signin?next=/board/ns/a",
                data={"csrf": csrf_of(signin.text), "token": "nope"},
            )
            assert bad.status_code == 401 and "not known" in bad.text
            ok = await client.post(
                "/board/signin?next=/board/ns/a",
                data={"csrf": csrf_of(signin.text), "token": "alice-secret"},
            )
            assert ok.status_code == 303 and ok.headers["location"] == "/board/ns/a"
            cookie = ok.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
            assert "alice-secret" not in cookie
            page = await client.get("/board/ns/a")
            assert page.status_code == 200 and "Namespace a" in page.text
            out = await client.post("/board/signout", data={"csrf": csrf_of(page.text)})
            assert out.status_code == 303
            assert (await client.get("/board/ns/a")).status_code == 303


async def test_sign_in_never_redirects_off_the_board(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path, tokens=True) as (_core, client):
            for target in ("https://evil.example/", "//evil.example/x", "/board/../x"):
                signin = await client.get("/board/signin", params={"next": target})
                r = await client.post(
                    "/board/signin",
                    params={"next": target},
                    data={"csrf": csrf_of(signin.text), "token": "alice-secret"},
                )
                assert r.headers["location"] == "/"


async def sign_in(client: httpx.AsyncClient, token: str) -> None:
    signin = await client.get("/board/signin")
    r = await client.post("/board/signin", data={"csrf": csrf_of(signin.text), "token": token})
    assert r.status_code == 303, r.text


async def test_a_token_of_namespace_a_never_sees_namespace_b(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path, tokens=True) as (core, client):
            await as_token(core, "alice-secret", "enqueue", queue="a-queue", type="t")
            await as_token(
                core, "bob-secret", "policy_set", queue="b-secret-queue", max_in_flight=1
            )
            await as_token(
                core,
                "bob-secret",
                "budget_create",
                key="b-budget",
                allocation=5,
                strategy={"type": "while_in_flight"},
            )
            await sign_in(client, "alice-secret")
            for path in (
                "/",
                "/board/ns/a",
                "/board/ns/a/budgets",
                "/board/ns/a/audit",
                "/board/ns/a/quota",
            ):
                r = await client.get(path)
                assert r.status_code == 200, path
                assert "b-secret-queue" not in r.text and "b-budget" not in r.text
            assert "a-queue" in (await client.get("/board/ns/a")).text
            for path in (
                "/board/ns/b",
                "/board/ns/b/q/b-secret-queue",
                "/board/ns/b/budgets",
                "/board/ns/b/audit",
                "/board/ns/b/events",
            ):
                r = await client.get(path)
                assert r.status_code == 403, path
                assert "b-secret-queue" not in r.text and "b-budget" not in r.text
            overview = (await client.get("/")).text
            assert 'href="/board/ns/b"' not in overview


async def test_queue_scope_and_grants_limit_what_a_page_shows(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path, tokens=True) as (core, client):
            await as_token(core, "alice-secret", "enqueue", queue="images", type="t")
            await as_token(core, "alice-secret", "enqueue", queue="payroll", type="t")
            await sign_in(client, "worker-secret")
            ns = (await client.get("/board/ns/a")).text
            assert "images" in ns and "payroll" not in ns
            assert "Edit policy" not in ns  # consume only: no editor
            assert (await client.get("/board/ns/a/q/payroll")).status_code == 403
            audit = (await client.get("/board/ns/a/audit")).text
            assert "needs the <code>manage</code> grant" in audit


async def test_an_operator_sees_every_namespace(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path, tokens=True) as (core, client):
            await as_token(core, "alice-secret", "enqueue", queue="a-queue", type="t")
            await as_token(core, "bob-secret", "policy_set", queue="b-queue", max_in_flight=1)
            await sign_in(client, "ops-secret")
            overview = (await client.get("/")).text
            assert 'href="/board/ns/a"' in overview and 'href="/board/ns/b"' in overview
            assert "b-queue" in (await client.get("/board/ns/b")).text


async def test_the_quota_page_names_each_limit_its_use_and_a_block(tmp_path):
    async with board(tmp_path) as (core, client):
        await call(core, "quota_set", quota={
            "max_queues": 5, "monthly_jobs_quota": 1, "max_retained_bytes": 10**6,
            "request_rate": {"capacity": 100, "refill_per_s": 20}})  # fmt: skip
        await call(core, "enqueue_many", jobs=[{"queue": q, "type": "t"} for q in "ab"])
        await core.usage.tick()  # the roll-up counts 2 >= 1: blocked
        actor = core.namespaces.get("default")
        actor.storage.measure(2_500_000, 10**6, None)  # as the retention leader would
        html = (await client.get("/board/ns/default/quota")).text
        rows = {
            m[0]: m[1]
            for m in re.findall(
                r"<th scope=\"row\"><code>(\w+)</code></th>\s*<td>([^<]*)</td>", html
            )
        }
        assert rows["max_queues"] == "2" and rows["monthly_jobs_quota"] == "2"
        assert rows["max_retained_bytes"] == "2500000"  # bytes in full, not 2.5e+06
        assert "100 burst, 20.0/s" in html
        month = actor.monthly.month
        assert f"blocking enqueues until {month} ends (UTC)" in html
        assert "blocking enqueues until the retained bytes fall below the release band" in html
