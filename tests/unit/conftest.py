"""Unit tests: virtual time only, and a real-time watchdog against hangs.

A test on ``MockClock`` that busy-loops never lets virtual time advance, so its
``fail_after`` never fires; the watchdog turns such a hang into a traceback and
a failed run instead of a stuck CI job.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Iterator

import pytest

WATCHDOG_SECONDS = 120


@pytest.fixture(autouse=True)
def _hang_watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
