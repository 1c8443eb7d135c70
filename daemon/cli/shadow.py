"""``--shadow`` / ``--enforce``: shadow mode of the limit a command sets.

``sluice quota set``, ``sluice queue budget set`` and ``sluice budget
create|set|patch`` take them (docs/rollout.md): ``--shadow`` sends
``enforce: false`` (the limit is evaluated, logged and counted as
``would_block``, and holds nothing back), ``--enforce`` sends ``enforce: true``.
Neither: a ``set`` (which replaces the whole document) enforces, a ``patch``
leaves the flag as it is.
"""

from __future__ import annotations

import argparse
from typing import Any

SHADOW_NOTE = "shadow - not enforced"


def add_enforce_options(parser: argparse.ArgumentParser) -> None:
    """Add the mutually exclusive ``--shadow`` and ``--enforce`` (dest ``enforce``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--shadow", dest="enforce", action="store_false", default=None,
        help="shadow mode: evaluate, log and count would_block, hold nothing back",
    )  # fmt: skip
    group.add_argument(
        "--enforce", dest="enforce", action="store_true", default=None,
        help="enforce the limit (the default of a set)",
    )  # fmt: skip


def enforce_of(args: argparse.Namespace) -> dict[str, Any]:
    """``{"enforce": ...}`` when an option was given, else ``{}``."""
    flag = getattr(args, "enforce", None)
    return {} if flag is None else {"enforce": flag}
