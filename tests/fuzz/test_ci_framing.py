"""CI's bounded run of the ``framing`` fuzz target (:mod:`tests.fuzz.ci`; its own file, so
that the two targets run on both of the suite's workers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.ci import fuzz


@pytest.mark.e2e  # atheris runs in a subprocess
def test_fuzz_framing(tmp_path: Path) -> None:
    figures = fuzz("framing", tmp_path)
    assert int(figures["cov"]) > 0 and int(figures["number_of_executed_units"]) > 0
