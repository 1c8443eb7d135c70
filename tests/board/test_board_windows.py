"""The board with stacked windows: every window's usage on the queue's page, and
the policy editor's one spec a line (issue 18, part 4)."""

from __future__ import annotations

import trio

from tests.board.test_board_live import events_of, until
from tests.board.test_board_pages import board, csrf_of
from tests.unit.harness import call, running_core

WINDOWS = [{"max_claims": 3, "period": "second", "tz": "UTC"},
           {"max_claims": 2, "period": "day", "tz": "America/Los_Angeles"}]  # fmt: skip


async def test_the_queue_page_shows_each_windows_usage(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "policy_set", queue="q", max_in_flight=5, windows=WINDOWS)
            for _ in range(3):
                await call(core, "enqueue", queue="q", type="t")
            await call(core, "claim_next", queues=["q"], max=3)
            html = (await client.get("/board/ns/default/q/q")).text
            assert (
                "Policy: 3 claims per second (UTC), 2 claims per day (America/Los_Angeles)"
                "; at most 5 in flight" in html
            )
            assert "<strong>2 of 3 used</strong> this second</li>" in html
            # The day is used up: it says when it resets, in its own zone.
            assert "<strong>2 of 2 used</strong> this day · resets at" in html
            assert "Wed 15 Nov 00:00 PST (Wed 15 Nov 08:00 UTC)" in html


async def test_the_policy_editor_takes_one_window_spec_a_line(tmp_path):
    with trio.fail_after(30):
        async with board(tmp_path) as (core, client):
            await call(core, "policy_set", queue="q", windows=WINDOWS)
            page = (await client.get("/board/ns/default/q/q/policy")).text
            assert ">3/s@UTC\n2/day@America/Los_Angeles</textarea>" in page
            form = {
                "csrf": csrf_of(page),
                "max_claims_per_window": "",
                "max_in_flight": "",
                "windows": "10/s\r\n100000/day@America/New_York\r\n",
                "action": "save",
            }
            r = await client.post("/board/ns/default/q/q/policy", data=form)
            assert r.status_code == 303
            policy = (await call(core, "policy_get", queue="q"))["policy"]
            assert [(w["max_claims"], w["period"], w["tz"]) for w in policy["windows"]] == [
                (10, "second", "UTC"), (100000, "day", "America/New_York")]  # fmt: skip
            # A spec the daemon refuses: the text area is marked, nothing saved.
            form["windows"] = "10/s\n20/s"
            r = await client.post("/board/ns/default/q/q/policy", data=form)
            assert r.status_code == 422
            assert (
                'name="windows" rows="3" autocomplete="off" autofocus aria-invalid="true"' in r.text
            )
            assert "repeats the period" in r.text
            again = (await call(core, "policy_get", queue="q"))["policy"]
            assert again["windows"] == policy["windows"]


async def test_the_live_header_follows_a_window_that_resets_without_a_write(
    tmp_path, autojump_clock
):
    """A minute window that is not used up resets all the same: the stream wakes
    at the first window's reset, though the queue never was held back."""
    windows = [{"max_claims": 5, "period": "minute", "tz": "UTC"},
               {"max_claims": 9, "period": "day", "tz": "UTC"}]  # fmt: skip
    with trio.fail_after(600):  # virtual time
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", windows=windows)
            await call(core, "enqueue", queue="q", type="t")
            await call(core, "claim_next", queues=["q"])
            stream = await events_of(core, None)
            _, data = await until(stream, "fragment")
            assert "1 of 5 used</strong> this minute" in data["html"]
            resets = core.policies.get("default", "q").meters[0].end
            _, data = await until(stream, "fragment")  # no write: the reset woke it
            assert resets <= core.clock.now_ms() < resets + 1000  # not the 15 s keep-alive
            assert "0 of 5 used</strong> this minute" in data["html"]
            assert "1 of 9 used</strong> this day" in data["html"]
            await stream.aclose()
