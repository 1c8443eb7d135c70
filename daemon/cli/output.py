"""What the CLI prints: aligned tables, local times, one JSON document, progress.

Human output goes to stdout in aligned columns, with instants in the local
zone. ``--json`` prints exactly one JSON document on stdout instead: the
verb's result. Errors and progress go to stderr, so stdout stays parseable;
a progress bar is drawn only on a terminal, never under ``--json``.
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


def progress_allowed(json: bool) -> bool:
    """Whether a progress bar may be drawn: not under ``--json``, and only when
    stdout and stderr (where it is drawn) are both terminals."""
    return not json and sys.stdout.isatty() and sys.stderr.isatty()


class Progress:
    """A progress bar on stderr with a count, a rate and an ETA, or nothing at all.

    ``replaying ━━━━━━━━━━━━━━━━━━━━ 2004/2004 · 1,318 jobs/s · ETA 0:00:00``,
    drawn by ``rich`` and redrawn in place; the last state stays on screen at
    :meth:`close`. The rate is the average since the start and the ETA the
    time the rest takes at that rate. With ``enabled`` false (see
    :func:`progress_allowed`) every method does nothing, so a caller need not
    ask twice. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, label: str, total: int | None, *, unit: str = "jobs", enabled: bool) -> None:
        self._bar: Any = None
        self._task: Any = None
        if not enabled:
            return
        from rich.console import Console  # imported only to draw: rich is not small
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
        from rich.progress import Progress as RichProgress

        rate_column, eta_column = _columns()
        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            rate_column(unit),
            eta_column(),
            console=Console(stderr=True),
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._bar.add_task(label, total=total)
        self._bar.start()

    def update(self, done: int, total: int | None = None) -> None:
        """Show ``done`` of ``total`` (the total given at the start if None)."""
        if self._bar is None:
            return
        task = self._bar.tasks[0]
        total = total if total is not None else task.total
        if total is not None:
            total = max(total, done)
        self._bar.update(self._task, completed=done, total=total)

    def close(self) -> None:
        """Draw the last state and leave it on screen."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _rate(task: Any) -> float | None:
    elapsed = task.elapsed
    return task.completed / elapsed if elapsed and task.completed else None


def _columns() -> tuple[type, type]:
    """The rate and ETA columns (classes made here: rich is imported only to draw)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """``1,318 jobs/s``: the average rate since the start."""

        def __init__(self, unit: str) -> None:
            super().__init__()
            self.unit = unit

        def render(self, task: Any) -> Text:
            rate = _rate(task)
            shown = "?" if rate is None else f"{rate:,.0f}"
            return Text(f"· {shown} {self.unit}/s")

    class EtaColumn(ProgressColumn):
        """``ETA 0:01:12``: the rest at the average rate."""

        def render(self, task: Any) -> Text:
            rate = _rate(task)
            if task.total is None or rate is None:
                return Text("· ETA -:--:--")
            seconds = int(max(task.total - task.completed, 0) / rate + 0.5)
            minutes, secs = divmod(seconds, 60)
            return Text(f"· ETA {minutes // 60}:{minutes % 60:02d}:{secs:02d}")

    return RateColumn, EtaColumn
