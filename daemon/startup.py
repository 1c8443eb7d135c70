"""Start-up: the checks a daemon makes before it opens the store, and their one outcome.

Everything that can stop a daemon from starting (an unwritable state
directory, a lock held by another daemon, a socket path or HTTP port in use, a
database that cannot be opened) is checked before the store is created and
raised as one :class:`StartupError`: ``sluice serve`` prints its message on one
line (``sluice: <message>``) and exits with its status, without a traceback
unless ``--debug``.

The open-file limit is raised here too: the soft ``RLIMIT_NOFILE`` (1024 in a
shell's default) goes up to the hard limit, and the socket's connection cap is
derived from it with a reserve kept for the store, the HTTP listener and its
clients.
"""

from __future__ import annotations

import os
import resource

#: The exit status of a start-up failure (as for a config file that cannot be used).
STARTUP_STATUS = 2
#: File descriptors kept out of the socket's connection cap at least: the
#: database and its WAL, the listeners, HTTP clients (/healthz), logs.
MIN_RESERVE_FDS = 128
#: Where RLIMIT_NOFILE's hard limit is "unlimited", the kernel's own ceiling.
NR_OPEN = "/proc/sys/fs/nr_open"


class StartupError(Exception):
    """The daemon cannot start: ``message`` is the one line to print, ``status`` the exit."""

    def __init__(self, message: str, status: int = STARTUP_STATUS) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def reason(exc: OSError) -> str:
    """An OS error's cause in lower case, without its errno or path: "permission denied"."""
    text = os.strerror(exc.errno) if exc.errno else str(exc)
    return text[:1].lower() + text[1:]


def raise_file_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open(NR_OPEN) as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass  # keep the soft limit; the connection cap follows it
    return soft if soft != resource.RLIM_INFINITY else target


def reserve_fds(nofile: int) -> int:
    """File descriptors kept for everything but socket clients under ``nofile``."""
    return max(MIN_RESERVE_FDS, nofile // 8)


def connection_cap(configured: int, nofile: int) -> tuple[int, str | None]:
    """The socket's connection cap and, when the config asks for more than the
    file limit allows, a warning saying so.

    ``configured`` 0 means derived: the limit minus :func:`reserve_fds`.
    """
    allowed = max(1, nofile - reserve_fds(nofile))
    if configured == 0:
        return allowed, None
    if configured > allowed:
        return allowed, (
            f"max_connections {configured} is more than the open-file limit {nofile} "
            f"allows with {reserve_fds(nofile)} kept in reserve; using {allowed}"
        )
    return configured, None
