"""Has the config file changed? Cheap to ask every two seconds.

The settings watcher asks at each wake. :meth:`ConfigFileWatch.changed` looks
at the file's ``stat`` first (inode, size, mtime) and reads and hashes it only
when that changed; the caller parses the file only when the hash changed. A
``touch`` therefore costs one read and no parse, and an untouched file one
``stat``.

A file being written while it is read (its ``stat`` moved during the read) is
not recorded: the next check reads it again, whole. A missing or unreadable
file is a state like any other: going missing is a change (the reload is then
refused, naming the error), staying missing is not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

Stat = tuple[int, int, int, int]


def _stat(path: Path) -> Stat | str:
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}"
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class ConfigFileWatch:
    """Remembers what the config file looked like when it was last read."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._stat: Stat | str | None = None
        self._digest: str | None = None
        #: Reads and hashes of the file (a check of an unchanged file makes none).
        self.reads = 0
        self.changed()

    def changed(self) -> bool:
        """True if the file's content differs from the last check's (then remembered)."""
        if self.path is None:
            return False
        before = _stat(self.path)
        if before == self._stat:
            return False
        if isinstance(before, str):
            digest = before
        else:
            self.reads += 1
            try:
                digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
            except OSError as exc:
                digest = f"cannot read: {exc.strerror or exc}"
            if _stat(self.path) != before:
                return False  # written meanwhile: read it again, whole, next time
        self._stat = before
        if digest == self._digest:
            return False
        self._digest = digest
        return True
