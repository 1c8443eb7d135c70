"""Browser tests: the board in a real headless Chromium, against a real daemon.

Driven by Playwright for Python with Debian's ``chromium`` (``executable_path``),
so no browser is downloaded. Skipped, saying why, when either is missing
(a failure under ``CI``: ``.ci/run`` installs both). Select them with
``-m browser``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
AXE = Path(__file__).parent / "vendor" / "axe.min.js"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per module. Not per session: Playwright's sync API
    keeps an asyncio loop running in this thread until it stops, and the
    PostgreSQL tests that run after it in the same worker need asyncio there
    (trio-asyncio)."""
    if not Path(CHROMIUM).exists():
        # CI installs it (.ci/run): there a missing browser is a failure, not a skip.
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots of each page go (the test run's output)."""
    return tmp_path_factory.mktemp("board-screenshots")
