"""The daemon loads no numpy, even where one is installed beside it.

sqlite-utils imports numpy when it can; numpy's OpenBLAS then starts worker
threads that cost the daemon CPU (daemon/store/sqlite_lib.py). A stand-in
``numpy`` package on ``PYTHONPATH`` records whether it was imported, so the
test holds whether or not the real numpy is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # every test here starts a process

PROBE = """
import json, sys
{statement}
hidden = "numpy" in sys.modules
import numpy  # still importable by anything else in the process
import sqlite_utils.db
print(json.dumps({{"loaded": hidden, "stand_in": numpy.STAND_IN,
                  "sqlite_utils_np": sqlite_utils.db.np is not None}}))
"""


def _probe(tmp_path: Path, statement: str) -> dict[str, bool]:
    stand_in = tmp_path / "site" / "numpy"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("STAND_IN = True\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path / "site"), str(Path(__file__).resolve().parents[2])])}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(statement=statement)],
        capture_output=True, text=True, check=True, timeout=60, env=env,
    )  # fmt: skip
    return json.loads(done.stdout)


@pytest.mark.parametrize("statement", ["import daemon.main", "import daemon.store.schema"])
def test_the_daemon_imports_sqlite_utils_without_numpy(tmp_path: Path, statement: str) -> None:
    seen = _probe(tmp_path, statement)
    assert seen == {"loaded": False, "stand_in": True, "sqlite_utils_np": False}


def test_a_numpy_imported_first_is_left_to_sqlite_utils(tmp_path: Path) -> None:
    seen = _probe(tmp_path, "import numpy\nimport daemon.main\nassert 'numpy' in sys.modules")
    # The statement imported numpy itself, so it counts as loaded; sqlite-utils uses it.
    assert seen == {"loaded": True, "stand_in": True, "sqlite_utils_np": True}
