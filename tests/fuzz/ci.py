"""A bounded fuzz run in a subprocess, as CI runs each target (``test_ci_*.py``).

The run reads the committed corpus and writes what it finds to a temporary
directory, so CI never changes the tree; a crash fails the test and names the
input to copy into ``tests/fuzz/crashers/``. libFuzzer's last status line (``cov:``,
``ft:``, ``exec/s``) and its final statistics are printed for docs/reliability.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.fuzz.paths import CORPUS

ROOT = Path(__file__).resolve().parents[2]
#: Seconds per target in CI (both targets: about a minute of the suite).
CI_SECONDS = int(os.environ.get("SLUICEGATE_FUZZ_SECONDS", "25"))


def fuzz(target: str, tmp_path: Path, seconds: int = CI_SECONDS) -> dict[str, str]:
    """Run ``target`` for ``seconds``; fail on a crash; return libFuzzer's figures."""
    found = tmp_path / "found"
    found.mkdir()
    crash = tmp_path / "crash"
    crash.mkdir()
    command = [
        sys.executable, "-m", "tests.fuzz.run", target, f"-max_total_time={seconds}",
        "-print_final_stats=1", f"-artifact_prefix={crash}/", "-close_fd_mask=1",
        str(found), str(CORPUS / target),
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120, check=False
    )
    log = done.stderr
    crashes = sorted(crash.iterdir())
    assert done.returncode == 0 and not crashes, (
        f"fuzz target {target!r} crashed on {crashes}: copy it to tests/fuzz/crashers/"
        f"{target}-<name>, fix the bug, keep the replay\n{log[-6000:]}"
    )
    status = [line for line in log.splitlines() if " cov: " in line]
    assert status, log[-3000:]
    figures = dict(re.findall(r"(\w[\w/]*): (\d+)", status[-1]))
    figures.update(re.findall(r"stat::(\w+):\s+(\d+)", log))
    print(f"fuzz {target}: {status[-1]}")
    print(f"fuzz {target}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    return figures
