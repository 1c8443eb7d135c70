"""A lock file held for a daemon's life: one daemon per state directory and socket.

The file holds the holder's pid; the lock is an ``flock`` on it, so it is
released by the kernel however the process ends (kill -9 included) and a
stale file is never mistaken for a live holder. The file itself stays in
place: removing it at exit would let a third daemon lock a fresh file while a
second one waits on the old inode.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from daemon.startup import StartupError, reason


class PidLock:
    """An exclusive ``flock`` on ``path``, which holds our pid while we have it."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what  # what the lock guards, for the refusal: "state directory /x"
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock or raise :class:`StartupError` naming the holder's pid."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StartupError(f"cannot create lock file {self.path}: {reason(exc)}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StartupError(f"cannot lock {self.path}: {reason(exc)}") from exc
            holder = read_pid(self.path)
            who = f"pid {holder}" if holder else "another process"
            raise StartupError(
                f"another daemon ({who}) is running on {self.what} (lock {self.path})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Let the lock go (closing the file releases the ``flock``)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_pid(path: Path) -> int | None:
    """The pid written in a lock file, or None."""
    try:
        return int(path.read_text().strip() or "0") or None
    except (OSError, ValueError):
        return None
