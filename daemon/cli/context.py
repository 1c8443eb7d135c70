"""What every command shares: the global options and the connection they describe.

``--socket``, ``--token``, ``--config`` and ``--json`` are accepted before or
after a command's own arguments. Commands raise :class:`UsageError` for
anything the CLI rejects itself (exit 2) and let daemon refusals
(:class:`~daemon.sdk.errors.SluicegateError`, exit 1) propagate to
:func:`daemon.cli.main.main`, which prints them once.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from daemon.cli.output import emit_json
from daemon.sdk.paths import resolve_socket
from daemon.sdk.retry import RetryPolicy
from daemon.sdk.sync_client import Client

#: Attempts of a one-shot command's call when the daemon answers 429.
CLI_ATTEMPTS = 3


class UsageError(Exception):
    """A bad usage or a value the CLI rejects itself: exit status 2."""


class CannotConnect(Exception):
    """The daemon's socket cannot be reached: exit status 1."""


def global_options() -> argparse.ArgumentParser:
    """The options every command accepts (a parent parser).

    Defaults are suppressed so that an option given before the command is not
    overwritten by the command's own parser.
    """
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("global options")
    s = argparse.SUPPRESS
    group.add_argument(
        "--socket",
        metavar="PATH",
        default=s,
        help="the daemon's socket (default: $SLUICEGATE_SOCKET, the config's)",
    )
    group.add_argument(
        "--token",
        metavar="TOKEN",
        default=s,
        help="the token to present (default: $SLUICEGATE_TOKEN)",
    )
    group.add_argument(
        "--config",
        metavar="PATH",
        default=s,
        help="the config file (default: $SLUICEGATE_CONFIG, ./sluicegate.toml)",
    )
    group.add_argument(
        "--json", action="store_true", default=s, help="print exactly one JSON document: the result"
    )
    return common


@attrs.frozen
class Context:
    """The global options of one invocation."""

    socket: str | None = None
    token: str | None = None
    config: str | None = None
    json: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Context:
        """The context the parsed ``args`` describe."""
        return cls(
            socket=getattr(args, "socket", None),
            token=getattr(args, "token", None),
            config=getattr(args, "config", None),
            json=bool(getattr(args, "json", False)),
        )

    def socket_path(self) -> Path:
        """Where the daemon's socket is (may raise ``ConfigError``)."""
        return resolve_socket(self.socket, self.config)

    def client(self, **options: Any) -> Client:
        """A blocking client connected to the daemon.

        A one-shot command retries a 429 (``queue_full``, ``rate_limited``) a
        couple of times only, then reports it: a person at a terminal wants
        the answer, not ten backoffs.
        """
        options.setdefault("retry", RetryPolicy(max_attempts=CLI_ATTEMPTS))
        path = self.socket_path()
        try:
            return Client(path, token=self.token, client_name="sluice", **options)
        except OSError as exc:
            raise CannotConnect(_why(path, exc)) from None

    def show(self, op: str, human: Callable[[dict[str, Any]], str], **args: Any) -> int:
        """Call verb ``op``; print its result as JSON with ``--json``, else ``human(result)``."""
        with self.client() as client:
            result = client.call(op, **args)
        if self.json:
            emit_json(result)
        else:
            print(human(result))
        return 0

    @asynccontextmanager
    async def trio_client(self, **options: Any) -> AsyncIterator[Any]:
        """A Trio client connected to the daemon (imported lazily: trio is heavy)."""
        import trio

        from daemon.sdk.trio_client import TrioClient

        path = self.socket_path()
        try:
            stream = await trio.open_unix_socket(str(path))
        except OSError as exc:
            raise CannotConnect(_why(path, exc)) from None
        async with TrioClient.over(
            stream, token=self.token, client_name="sluice", **options
        ) as client:
            yield client


def _why(path: Path, exc: OSError) -> str:
    hint = " (is the daemon running? start it with: sluice serve)"
    return f"cannot connect to {path}: {exc.strerror or exc}{hint}"
