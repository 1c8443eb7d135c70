"""What the CLI prints: aligned tables, local times, one JSON document, progress.

Human output goes to stdout in aligned columns, with instants in the local
zone. ``--json`` prints exactly one JSON document on stdout instead: the
verb's result. Errors and progress go to stderr, so stdout stays parseable.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TextIO

import orjson


def emit_json(doc: Any, out: TextIO | None = None) -> None:
    """Print ``doc`` as one JSON document."""
    out = out or sys.stdout
    out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    out.flush()


def compact(value: Any) -> str:
    """A value as compact JSON text (payloads and results in tables)."""
    return orjson.dumps(value).decode()


def local_time(ms: int | None) -> str:
    """An instant (ms since the epoch) in the local zone, to the second; ``-`` for none."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def local_instant(ms: int | None) -> str:
    """An instant as ISO 8601 in the local zone with its offset, to the second."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


def now_stamp() -> str:
    """Now, as ISO 8601 in the local zone with its offset (``2026-08-31T19:16:28+10:00``)."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def shorten(text: str | None, width: int = 48) -> str:
    """One line of at most ``width`` characters."""
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows in aligned columns; numbers right-aligned, the last column unpadded."""
    rows = [list(r) for r in rows]
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    numeric = [
        bool(rows) and all(isinstance(r[i], int) and not isinstance(r[i], bool) for r in rows)
        for i in range(len(headers))
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = []
        for i, cell in enumerate(row):
            if numeric[i]:
                parts.append(cell.rjust(widths[i]))
            elif i == len(row) - 1:
                parts.append(cell)
            else:
                parts.append(cell.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


class Progress:
    """A progress bar on stderr (redrawn in place on a terminal, one line per step else)."""

    def __init__(self, label: str, total: int | None, out: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.out = out or sys.stderr
        self.tty = self.out.isatty()

    def update(self, done: int) -> None:
        """Show ``done`` of ``total``."""
        total = max(self.total or 0, done)
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "-" * (width - filled)
        text = f"{self.label} [{bar}] {done}/{total or '?'}"
        if self.tty:
            self.out.write("\r" + text)
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self.tty:
            self.out.write("\n")
            self.out.flush()
