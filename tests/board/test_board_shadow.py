"""The board marks a shadowed limit (``enforce: false``) plainly, and its editors
keep (or set) shadow mode rather than silently enforcing on the next save."""

from __future__ import annotations

import trio

from tests.board.test_board_pages import board, csrf_of
from tests.unit.harness import call

BADGE = "shadow — not enforced"


async def test_shadowed_budget_policy_and_quota_wear_the_badge(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "budget_create", key="img", allocation=2,
                       strategy={"type": "while_in_flight"}, enforce=False)  # fmt: skip
            await call(core, "budget_create", key="txt", allocation=2,
                       strategy={"type": "while_in_flight"})  # fmt: skip
            await call(core, "policy_set", queue="q", max_in_flight=1, enforce=False)
            await call(core, "quota_set", quota={"max_pending": 5, "enforce": False})
            budgets = (await client.get("/board/ns/default/budgets")).text
            assert budgets.count(BADGE) == 1  # img's, not txt's
            assert budgets.index(BADGE) < budgets.index('id="b-txt"')
            assert BADGE in (await client.get("/board/ns/default/q/q")).text
            assert BADGE in (await client.get("/board/ns/default/quota")).text
            await call(core, "quota_set", quota={"max_pending": 5})
            assert BADGE not in (await client.get("/board/ns/default/quota")).text


async def test_the_editors_keep_and_set_shadow_mode(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "budget_create", key="img", allocation=2,
                       strategy={"type": "while_in_flight"}, enforce=False)  # fmt: skip
            page = await client.get("/board/ns/default/budgets/img")
            assert 'name="shadow" value="1" checked' in page.text
            form = {"csrf": csrf_of(page.text), "allocation": "3", "type": "while_in_flight",
                    "shadow": "1"}  # fmt: skip
            r = await client.post("/board/ns/default/budgets/img", data=form)
            assert r.status_code == 303
            budget = (await call(core, "budget_get", key="img"))["budget"]
            assert (budget["allocation"], budget["enforce"]) == (3, False)
            page = await client.get("/board/ns/default/q/q/policy")
            form = {"csrf": csrf_of(page.text), "max_in_flight": "2", "shadow": "1",
                    "action": "save"}  # fmt: skip
            r = await client.post("/board/ns/default/q/q/policy", data=form)
            assert r.status_code == 303
            assert (await call(core, "policy_get", queue="q"))["policy"]["enforce"] is False
