"""The config file as the daemon and its clients both see it.

Where the file is looked for (:data:`DEFAULT_PATH`, :data:`ENV_CONFIG`), where
its ``[daemon]`` table puts the socket by default (:func:`socket_path`), and
:class:`ConfigError`, the one error for a file that cannot be used.
:mod:`daemon.config` parses the whole file for the daemon; the client's
:mod:`daemon.sdk.paths` reads only the socket from it. This module imports
only the standard library, so a client that imports it loads none of the
daemon's dependencies.
"""

from __future__ import annotations

from pathlib import Path

#: The config file read when none is named and it exists (relative to the cwd).
DEFAULT_PATH = Path("sluicegate.toml")
#: The environment variable naming the config file.
ENV_CONFIG = "SLUICEGATE_CONFIG"
#: ``daemon.state_dir`` when the file leaves it out.
DEFAULT_STATE_DIR = "./sluicegate-data"


class ConfigError(Exception):
    """A config file that cannot be used; ``problems`` lists ``path: message`` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def socket_path(state_dir: str = DEFAULT_STATE_DIR, socket: str = "") -> Path:
    """The socket that ``daemon.socket`` and ``daemon.state_dir`` name."""
    return Path(socket) if socket else Path(state_dir) / "sluicegate.sock"
