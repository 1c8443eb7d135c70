"""Where the daemon's socket is, and which token to present.

The socket is looked for in this order:

1. the explicit argument (``--socket``);
2. ``$SLUICEGATE_SOCKET``;
3. the config file's ``daemon.socket`` (else ``<daemon.state_dir>/sluicegate.sock``),
   the file being the explicit ``config`` argument (``--config``), else
   ``$SLUICEGATE_CONFIG``, else ``./sluicegate.toml`` when it exists;
4. ``./sluicegate-data/sluicegate.sock`` (the daemon's default state directory,
   relative to the directory where ``sluice serve`` was started);
5. ``/run/sluicegate/sluicegate.sock`` (the systemd socket unit's path).

An explicit choice (1, 2, or a file named by ``--config`` or
``$SLUICEGATE_CONFIG``) is used as given, present or not: a typo is reported,
not searched past. Otherwise the first candidate whose file exists is used
(the first one when none does). :func:`socket_candidates` lists what was
considered, each with where it came from, so that a failure can say what it
tried. Relative paths in the file are relative to the current directory, as
the daemon reads them.

Only the ``[daemon]`` table is read here, so a section the daemon would refuse
for other reasons (a token, a quota) does not stop a client from connecting.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import attrs

from daemon.config_file import DEFAULT_PATH, ENV_CONFIG, ConfigError, socket_path

ENV_SOCKET = "SLUICEGATE_SOCKET"
ENV_TOKEN = "SLUICEGATE_TOKEN"
DEFAULT_SOCKET = socket_path()
#: Where the systemd socket unit (systemd/sluicegate.socket) listens.
SYSTEMD_SOCKET = Path("/run/sluicegate/sluicegate.sock")


@attrs.frozen
class Candidate:
    """A place the daemon's socket may be, and why it was considered."""

    path: Path
    #: Where the path came from: ``--socket``, ``$SLUICEGATE_SOCKET``, ...
    source: str
    #: Given by the user (used even if absent) rather than searched for.
    explicit: bool = False


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
    return socket_path(**values)


def socket_candidates(
    socket: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> list[Candidate]:
    """The places to look, in order (see the module docstring); one if explicit.

    Raises :class:`ConfigError` when the config file to read cannot be read.
    """
    if socket:
        return [Candidate(Path(socket), "--socket", explicit=True)]
    if env := os.environ.get(ENV_SOCKET):
        return [Candidate(Path(env), f"${ENV_SOCKET}", explicit=True)]
    if config:
        return [Candidate(socket_from_config(config), f"--config {config}", explicit=True)]
    if env_config := os.environ.get(ENV_CONFIG):
        source = f"${ENV_CONFIG} {env_config}"
        return [Candidate(socket_from_config(env_config), source, explicit=True)]
    found: list[Candidate] = []
    if DEFAULT_PATH.exists():
        found.append(Candidate(socket_from_config(DEFAULT_PATH), f"./{DEFAULT_PATH}"))
    found.append(Candidate(DEFAULT_SOCKET, "the default state directory"))
    found.append(Candidate(SYSTEMD_SOCKET, "systemd"))
    unique: dict[Path, Candidate] = {}
    for candidate in found:
        unique.setdefault(candidate.path, candidate)
    return list(unique.values())


def choose(candidates: list[Candidate]) -> Candidate:
    """The candidate to use: the explicit one, else the first that exists, else the first."""
    for candidate in candidates:
        if candidate.explicit or candidate.path.exists():
            return candidate
    return candidates[0]


def resolve_socket(
    socket: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> Path:
    """The socket to connect to (see the module docstring for the order)."""
    return choose(socket_candidates(socket, config)).path


def resolve_token(token: str | None = None) -> str | None:
    """The explicit token, else ``$SLUICEGATE_TOKEN``, else None (open mode)."""
    return token or os.environ.get(ENV_TOKEN) or None
