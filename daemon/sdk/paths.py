"""Where the daemon's socket is, and which token to present.

The socket, first found wins: the explicit argument (``--socket``), then
``$SLUICEGATE_SOCKET``, then the config file's ``daemon.socket`` (else
``<daemon.state_dir>/sluicegate.sock``), the file being the explicit
``config`` argument (``--config``), else ``$SLUICEGATE_CONFIG``, else
``./sluicegate.toml`` when it exists; with no file at all,
``./sluicegate-data/sluicegate.sock``. Relative paths in the file are relative
to the current directory, as the daemon reads them.

Only the ``[daemon]`` table is read here, so a section the daemon would refuse
for other reasons (a token, a quota) does not stop a client from connecting.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from daemon.config import DEFAULT_PATH, ENV_CONFIG, ConfigError, DaemonConfig

ENV_SOCKET = "SLUICEGATE_SOCKET"
ENV_TOKEN = "SLUICEGATE_TOKEN"
DEFAULT_SOCKET = DaemonConfig().socket_path()


def config_file(config: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file a client reads, or None."""
    chosen = config or os.environ.get(ENV_CONFIG)
    if chosen:
        return Path(chosen)
    return DEFAULT_PATH if DEFAULT_PATH.exists() else None


def socket_from_config(path: str | os.PathLike[str]) -> Path:
    """The socket a config file names; :class:`ConfigError` if it cannot be read."""
    source = str(path)
    try:
        data = tomllib.loads(Path(path).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [f"not valid TOML: {exc}"]) from None
    table = data.get("daemon", {})
    if not isinstance(table, dict):
        raise ConfigError(source, ["daemon: expected a table"])
    values = {}
    for key in ("socket", "state_dir"):
        if key in table:
            if not isinstance(table[key], str):
                raise ConfigError(source, [f"daemon.{key}: expected a string"])
            values[key] = table[key]
    return DaemonConfig(**values).socket_path()


def resolve_socket(
    socket: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> Path:
    """The socket to connect to (see the module docstring for the order)."""
    if socket:
        return Path(socket)
    if env := os.environ.get(ENV_SOCKET):
        return Path(env)
    file = config_file(config)
    return socket_from_config(file) if file is not None else DEFAULT_SOCKET


def resolve_token(token: str | None = None) -> str | None:
    """The explicit token, else ``$SLUICEGATE_TOKEN``, else None (open mode)."""
    return token or os.environ.get(ENV_TOKEN) or None
