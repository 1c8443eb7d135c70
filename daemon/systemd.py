"""systemd integration without a C dependency: ``sd_notify`` and socket activation.

``sd_notify`` is one datagram to ``$NOTIFY_SOCKET`` (a leading ``@`` means the
abstract namespace). Socket activation hands us listening sockets from fd 3
on, announced by ``$LISTEN_FDS`` for our ``$LISTEN_PID``.
"""

from __future__ import annotations

import logging
import os
import socket

import trio

log = logging.getLogger("sluicegate.systemd")
SD_LISTEN_FDS_START = 3


def notify(message: str) -> bool:
    """Send ``message`` (e.g. ``READY=1``) to systemd; False when not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as exc:
        log.warning("sd_notify(%s) failed: %s", message, exc)
        return False
    return True


def listen_fds(unset_environment: bool = True) -> list[int]:
    """The file descriptors passed by socket activation (empty if none)."""
    try:
        if int(os.environ.get("LISTEN_PID", "0")) != os.getpid():
            return []
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return []
    if unset_environment:
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
    fds = list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))
    for fd in fds:
        os.set_inheritable(fd, False)
    return fds


def watchdog_interval() -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds, when systemd expects pings from us."""
    try:
        usec = int(os.environ.get("WATCHDOG_USEC", "0"))
        pid = int(os.environ.get("WATCHDOG_PID", str(os.getpid())))
    except ValueError:
        return None
    if usec <= 0 or pid != os.getpid():
        return None
    return usec / 2_000_000


async def watchdog(interval: float) -> None:
    """Ping the watchdog every ``interval`` seconds while the event loop is alive."""
    while True:
        notify("WATCHDOG=1")
        await trio.sleep(interval)
