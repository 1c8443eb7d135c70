"""The board in a real browser (issue 7, Acceptance).

One daemon for the module, set up over the socket as a worker and an operator
would: ``investigations`` has spent its daily 100 claims with 12 jobs left
pending, ``images`` has room, a budget, a quota and a dead letter exist.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import AXE
from tests.support import DaemonProcess, RawClient

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

NS = "/board/ns/default"
DAILY = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}
PAGES = {
    "overview": "/",
    "namespace": NS,
    "queue": NS + "/q/investigations",
    "policy-editor": NS + "/q/images/policy",
    "budgets": NS + "/budgets",
    "budget-editor": NS + "/budgets/image-service",
    "quota": NS + "/quota",
    "audit": NS + "/audit",
}
#: What the keyboard must reach: every control a pointer could use.
FOCUSABLE = (
    "a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), "
    "select:not([disabled]), textarea, summary, [tabindex]:not([tabindex='-1'])"
)


@pytest.fixture(scope="module")
def board(module_daemon: DaemonProcess) -> Iterator[DaemonProcess]:
    """The module's daemon, with the state the tests look at."""
    with RawClient(module_daemon.socket) as c:
        c.ok("policy_set", queue="investigations", max_claims_per_window=100, window=DAILY)
        c.ok("enqueue_many", jobs=[{"queue": "investigations", "type": "probe"}] * 112)
        claimed = c.ok("claim_next", queues=["investigations"], max=100, lease_ms=600_000)
        assert len(claimed["jobs"]) == 100
        c.ok(
            "policy_set",
            queue="images",
            max_in_flight=5,
            max_claims_per_window=1000,
            window={"period": "hour", "tz": "UTC", "start": "00:00"},
        )
        c.ok("enqueue_many", jobs=[{"queue": "images", "type": "resize"}] * 3)
        c.ok(
            "budget_create",
            key="image-service",
            allocation=60,
            strategy={"type": "time_based", "duration_ms": 60_000},
        )
        # reports: gold's 4 reserved slots of 10 idle and held by group a (lent).
        c.ok("policy_set", queue="reports", max_in_flight=10, fairness="round_robin",
             min_in_flight={"gold": 4})  # fmt: skip
        c.ok("enqueue_many", jobs=[{"queue": "reports", "type": "r", "group": "a"}] * 10)
        assert len(c.ok("claim_next", queues=["reports"], max=10, lease_ms=600_000)["jobs"]) == 10
        c.ok("enqueue", queue="reports", type="r", group="gold")
        c.ok("quota_set", quota={"max_pending": 1000, "max_running": 200, "enqueue_rate": "50/s"})
        c.ok("enqueue", queue="mail", type="send")
        job = c.ok("claim_next", queues=["mail"])["jobs"][0]["job"]
        c.ok("fail", job_id=job["id"], lease=job["lease"], error="smtp refused", dead=True)
    yield module_daemon


@pytest.fixture
def page(browser: Any, board: DaemonProcess) -> Iterator[Any]:
    """A fresh browser context and page on the board, failing on CSP violations."""
    context = browser.new_context(base_url=board.http_url)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    yield page
    context.close()  # closes the live stream before the daemon stops
    assert not [p for p in problems if "Content Security Policy" in p or "Error" in p], problems


def test_exhausted_queue_reads_100_of_100_with_reset_time_and_chips(page, shots: Path):
    page.goto(PAGES["queue"])
    header = page.locator("#live-investigations")
    assert "100 of 100 used" in header.inner_text()
    assert "exhausted" in header.inner_text()
    reset = header.locator("time")
    assert reset.get_attribute("datetime").endswith(":00:00Z")
    assert "00:00 PST" in reset.inner_text() or "00:00 PDT" in reset.inner_text()
    assert "your time:" in header.inner_text()  # the static script added the local time
    chips = page.locator("#pending-list .chip")
    assert chips.count() == 12
    for text in chips.all_inner_texts():
        assert text.startswith("deferred · window used up · eligible ")
    page.screenshot(path=shots / "queue.png", full_page=True)


def test_a_queue_with_groups_shows_reserved_and_lent_slots(page, shots: Path):
    """Issue 18: the groups table and bars; gold's idle reservation drawn as lent."""
    page.goto(NS + "/q/reports")
    rows = page.locator("#groups tbody tr")
    assert rows.count() == 2
    gold = page.locator("#groups tbody tr.lending")
    assert gold.locator("th").inner_text() == "gold"
    assert [c for c in gold.locator("td").all_inner_texts()[:5]] == ["1", "1", "0", "4", "4 lent"]
    lent = gold.locator("svg rect.lent")
    assert lent.count() == 1 and lent.bounding_box()["width"] > 0  # drawn, not just in the DOM
    assert "4 lent to other groups" in gold.locator("svg title").text_content()
    a = rows.filter(has_text="a").first
    assert "10 in flight of 10" in a.locator("svg title").text_content()
    page.locator("#groups").screenshot(path=shots / "queue-groups.png")


def test_a_claim_over_the_socket_shows_in_the_header_without_a_reload(page, board):
    page.goto(NS + "/q/images")
    header = page.locator("#live-images")
    assert "0 of 5 in flight" in header.inner_text()
    page.wait_for_selector("body[data-live=connected]")
    with RawClient(board.socket) as c:
        assert len(c.ok("claim_next", queues=["images"])["jobs"]) == 1
    from playwright.sync_api import expect

    expect(header).to_contain_text("1 of 5 in flight", timeout=2000)
    expect(header).to_contain_text("1 of 1000 used", timeout=2000)
    expect(page.locator("#running-list li")).to_have_count(1, timeout=2000)


def test_policy_editor_saves_without_javascript_and_audits(browser, board, shots: Path):
    context = browser.new_context(base_url=board.http_url, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(NS + "/q/images")
        page.click("#edit-policy")
        assert page.url.endswith("/q/images/policy")
        focused = page.locator("#max_claims_per_window")
        assert focused.get_attribute("autofocus") is not None
        page.fill("#max_in_flight", "7")
        page.click("button[value=save]")
        assert page.url.endswith("/q/images?notice=saved#edit-policy")
        assert "of 7 in flight" in page.locator("#live-images").inner_text()
        history = page.locator("table.audit").inner_text()
        assert "set_policy" in history
        newest = page.locator("table.audit tbody tr").first
        assert "max_in_flight: 5 → 7" in newest.inner_text()
        after = newest.locator("dd").nth(1).text_content()
        assert json.loads(after)["max_in_flight"] == 7
        page.screenshot(path=shots / "queue-after-save.png", full_page=True)
    finally:
        context.close()


def test_policy_editor_previews_a_change_without_saving_it(browser, board, shots: Path):
    context = browser.new_context(base_url=board.http_url, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(NS + "/q/investigations/policy")
        page.fill("#max_claims_per_window", "110")
        page.click("button[value=preview]")
        assert page.url.endswith("/q/investigations/policy")  # a page, not a redirect
        preview = page.locator("#preview")
        assert "nothing was saved" in preview.inner_text()
        # 100 of 100 used, 12 pending: 10 more may start now, 2 wait for the next day.
        assert page.locator("[data-preview=admissible]").inner_text() == "0 → 10"
        assert page.locator("[data-preview=released]").inner_text() == "10"
        assert page.locator("[data-preview=flow]").count() == 24
        assert page.locator("#max_claims_per_window").input_value() == "110"  # as typed
        page.screenshot(path=shots / "policy-preview.png", full_page=True)
        page.goto(NS + "/q/investigations")
        assert "100 of 100 used" in page.locator("#live-investigations").inner_text()
    finally:
        context.close()


def test_focus_lands_on_the_first_field_and_returns_to_the_edit_control(page):
    from playwright.sync_api import expect

    page.goto(NS + "/q/images")
    page.focus("#edit-policy")
    page.keyboard.press("Enter")
    page.wait_for_url("**/q/images/policy")
    # Chromium applies autofocus at a rendering step after load: wait for it (5 s).
    expect(page.locator("#max_claims_per_window")).to_be_focused()
    page.click("text=Cancel")
    page.wait_for_url("**/q/images?notice=cancelled#edit-policy")
    expect(page.locator("#edit-policy")).to_be_focused()


@pytest.mark.parametrize("name", sorted(PAGES))
def test_keyboard_reaches_every_control(page, name):
    page.goto(PAGES[name])
    controls = page.evaluate(
        """(sel) => Array.from(document.querySelectorAll(sel))
              .filter(e => e.getClientRects().length > 0 || e.classList.contains('skip'))
              .map((e, i) => { e.dataset.kbd = String(i); return String(i); })""",
        FOCUSABLE,
    )
    reached: set[str] = set()
    page.locator("body").focus()
    for _ in range(len(controls) + 5):
        page.keyboard.press("Tab")
        mark = page.evaluate("document.activeElement && document.activeElement.dataset.kbd")
        if mark is not None:
            reached.add(mark)
    assert set(controls) <= reached, f"not reached by Tab: {sorted(set(controls) - reached)}"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_axe_reports_no_serious_or_critical_violations(browser, board, name, shots: Path):
    # axe is injected as an inline script: only this context bypasses the CSP (every
    # other test runs under it and fails on a violation).
    context = browser.new_context(base_url=board.http_url, bypass_csp=True)
    try:
        _axe(context.new_page(), name, shots)
    finally:
        context.close()


def _axe(page: Any, name: str, shots: Path) -> None:
    page.goto(PAGES[name])
    page.screenshot(path=shots / f"{name}.png", full_page=True)
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    bad = [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["html"] for n in v["nodes"]][:3]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, bad
