"""Shared fixtures: a real daemon per test (end-to-end) on a temp dir."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import DaemonProcess


@pytest.fixture
def daemon(tmp_path) -> Iterator[DaemonProcess]:
    """A running ``sluice serve`` in open mode with HTTP on a free port."""
    proc = DaemonProcess(tmp_path)
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.stop()
