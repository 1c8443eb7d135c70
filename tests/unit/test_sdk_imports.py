"""The client is only a client: importing it loads none of the daemon's dependencies.

Checked in a fresh interpreter, since this test process has imported them all.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # every test here starts a process

#: The daemon's dependencies that a client must not pay for.
HEAVY = ("pendulum", "cattrs", "cronsim", "sqlite_utils", "starlette", "hypercorn")


def _loaded_after(statement: str) -> list[str]:
    loaded = f"[m for m in {HEAVY!r} if m in sys.modules]"
    probe = f"{statement}; import json, sys; print(json.dumps({loaded}))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def test_sdk_and_client_import_nothing_heavy() -> None:
    statement = "import daemon.sdk, daemon.client, daemon.sdk.paths"
    assert _loaded_after(statement) == []


def test_cli_imports_nothing_heavy() -> None:
    # `sluice serve` and `sluice config check` import the daemon's code when run.
    assert _loaded_after("import daemon.cli.main") == []


def test_daemon_package_imports_nothing() -> None:
    assert _loaded_after("import daemon") == []
