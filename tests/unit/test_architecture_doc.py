"""docs/architecture.md names modules and functions: each must exist.

A newcomer follows the page to a file and a function; a rename that forgets
the page fails here instead of misleading them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
#: `daemon/x.py` or `actors/x.py`, optionally followed by (`Name`, `Class.method`, ...).
MENTION = re.compile(r"`((?:daemon|actors)/[\w/]+\.py)`(?: \(([^)]*)\))?")


def _mentions() -> list[tuple[str, list[str]]]:
    found = []
    for path, names in MENTION.findall(PAGE.read_text()):
        symbols = re.findall(r"`([\w.]+)`", names)
        found.append((path, [s.split(".")[-1] for s in symbols]))
    return found


def test_the_page_names_modules() -> None:
    assert len(_mentions()) > 30  # the regex still reads the page


def test_every_module_and_function_the_page_names_exists() -> None:
    missing = []
    for path, symbols in _mentions():
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
            continue
        text = source.read_text()
        for name in symbols:
            if not re.search(rf"^\s*(?:async )?(?:def|class) {re.escape(name)}\b", text, re.M):
                missing.append(f"{path}: {name}")
    assert not missing, missing
