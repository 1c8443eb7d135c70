"""The editors' "Preview" over ASGI: ``what_if`` shown beside the form, nothing saved."""

from __future__ import annotations

import re

import trio

from tests.board.test_board_pages import board, csrf_of
from tests.unit.harness import call

SIX_AN_HOUR = {"allocation": 6, "strategy": {"type": "time_based", "duration_ms": 3_600_000}}


def cell(html: str, name: str) -> str:
    found = re.search(rf'data-preview="{name}">([^<]*)<', html)
    assert found is not None, name
    return found[1]


async def test_the_budget_editor_previews_a_doubled_drip(tmp_path, autojump_clock):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "budget_create", key="b", **SIX_AN_HOUR)
            jobs = [{"queue": "q", "type": "t", "budgets": [{"key": "b"}]}] * 26
            await call(core, "enqueue_many", jobs=jobs)
            await call(core, "claim_next", queues=["q"], max=100, lease_ms=86_400_000)
            audit = await call(core, "audit_list")
            url = "/board/ns/default/budgets/b"
            page = await client.get(url)
            form = {"csrf": csrf_of(page.text), "allocation": "12", "type": "time_based",
                    "duration_s": "3600", "burst": "", "action": "preview"}  # fmt: skip
            r = await client.post(url, data=form)
            assert r.status_code == 200 and "Preview: nothing was saved" in r.text
            assert cell(r.text, "tokens") == "0.00 → 0.00"
            assert [int(n) for n in re.findall(r'data-preview="flow">(\d+)<', r.text)][:3] == [
                11, 9, 0,
            ]  # fmt: skip
            assert 'name="allocation" inputmode="numeric" value="12"' in r.text  # as typed
            assert (await call(core, "budget_get", key="b"))["budget"]["allocation"] == 6
            assert await call(core, "audit_list") == audit


async def test_a_refused_preview_marks_the_field_and_saves_nothing(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            page = await client.get("/board/ns/default/q/q1/policy")
            form = {"csrf": csrf_of(page.text), "max_claims_per_window": "5", "period": "day",
                    "tz": "Mars/Olympus", "start": "00:00", "max_in_flight": "",
                    "action": "preview"}  # fmt: skip
            r = await client.post("/board/ns/default/q/q1/policy", data=form)
            assert r.status_code == 422 and "Preview:" not in r.text
            assert 'value="Mars/Olympus" autocomplete="off" autofocus aria-invalid="true"' in r.text
            assert core.policies.get("default", "q1") is None
