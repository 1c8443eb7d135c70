"""The daemon's logging: journald-friendly lines, and a filter for log floods."""

from __future__ import annotations

import logging
import os
import sys
import time


def configure_logging(debug: bool = False) -> None:
    """journald-friendly logs: no timestamps when systemd adds its own."""
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not os.environ.get("JOURNAL_STREAM"):
        fmt = "%(asctime)s " + fmt
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr)
    if debug:
        logging.getLogger("sluicegate").setLevel(logging.DEBUG)
    # trio's serve_listeners (hypercorn's accept loop) logs every accept that
    # finds no free descriptor, with a traceback, ten times a second.
    logging.getLogger("trio.serve_listeners").addFilter(OncePerEpisode())


class OncePerEpisode(logging.Filter):
    """Let one record through per ``quiet_s`` seconds, without its traceback."""

    def __init__(self, quiet_s: float = 60.0) -> None:
        super().__init__()
        self.quiet_s = quiet_s
        self._last = -float("inf")

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._last < self.quiet_s:
            return False
        self._last = now
        record.exc_info = None
        record.exc_text = None
        return True
