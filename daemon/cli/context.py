"""What every command shares: the global options and the connection they describe.

``--socket``, ``--token``, ``--config`` and ``--json`` are accepted before or
after a command's own arguments. Commands raise :class:`UsageError` for
anything the CLI rejects itself (exit 2) and let daemon refusals
(:class:`~daemon.sdk.errors.SluicegateError`, exit 1) propagate to
:func:`daemon.cli.main.main`, which prints them once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from daemon.cli.output import emit_json
from daemon.sdk.errors import SluicegateError
from daemon.sdk.paths import Candidate, choose, socket_candidates
from daemon.sdk.retry import RetryPolicy
from daemon.sdk.sync_client import Client

#: Overrides the attempts of every call, like ``--call-attempts``.
ATTEMPTS_ENV = "SLUICEGATE_CALL_ATTEMPTS"


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
        help="the daemon's socket (default: $SLUICEGATE_SOCKET, else the config's, else the first "
        "of ./sluicegate-data/sluicegate.sock and /run/sluicegate/sluicegate.sock that exists)",
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
    group.add_argument(
        "--call-attempts",
        type=_attempts,
        metavar="N",
        default=s,
        help="attempts of a call the daemon answers 429 (default: $SLUICEGATE_CALL_ATTEMPTS, "
        "else 10, and unbounded for the waiting claims of `work`); N applies to both",
    )
    return common


def _attempts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 1, got {text!r}")
    return value


@attrs.frozen
class Context:
    """The global options of one invocation."""

    socket: str | None = None
    token: str | None = None
    config: str | None = None
    json: bool = False
    #: Attempts of every call (None: the SDK's defaults, seed 001).
    max_attempts: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Context:
        """The context the parsed ``args`` describe (``--call-attempts`` falls back
        to ``$SLUICEGATE_CALL_ATTEMPTS``; a bad value there is a usage error)."""
        attempts = getattr(args, "call_attempts", None)
        if attempts is None and os.environ.get(ATTEMPTS_ENV):
            try:
                attempts = _attempts(os.environ[ATTEMPTS_ENV])
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"${ATTEMPTS_ENV} {exc}") from None
        return cls(
            socket=getattr(args, "socket", None),
            token=getattr(args, "token", None),
            config=getattr(args, "config", None),
            json=bool(getattr(args, "json", False)),
            max_attempts=attempts,
        )

    def retry_policy(self) -> RetryPolicy:
        """Seed 001's policy: 429 only, Retry-After with ±20% jitter, else backoff
        from 500 ms to 30 s; 10 attempts, unbounded for waiting claims."""
        return RetryPolicy(max_attempts=self.max_attempts)

    def socket_path(self) -> Path:
        """Where the daemon's socket is (may raise ``ConfigError``)."""
        return choose(self.socket_candidates()).path

    def socket_candidates(self) -> list[Candidate]:
        """The places the socket is looked for (:mod:`daemon.sdk.paths` says the order)."""
        return socket_candidates(self.socket, self.config)

    def client(self, **options: Any) -> Client:
        """A blocking client connected to the daemon.

        A call the daemon answers 429 (``queue_full``, ``rate_limited``, ...) is
        retried as the SDK does (:meth:`retry_policy`), each wait said on
        stderr, so a person at a terminal sees why it pauses.
        """
        options.setdefault("retry", self.retry_policy())
        options.setdefault("on_retry", _say_retry)
        candidates = self.socket_candidates()
        chosen = choose(candidates)
        try:
            return Client(chosen.path, token=self.token, client_name="sluice", **options)
        except OSError as exc:
            raise CannotConnect(_why(candidates, chosen, exc)) from None

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

        candidates = self.socket_candidates()
        chosen = choose(candidates)
        try:
            stream = await trio.open_unix_socket(str(chosen.path))
        except OSError as exc:
            raise CannotConnect(_why(candidates, chosen, exc)) from None
        options.setdefault("retry", self.retry_policy())
        async with TrioClient.over(
            stream, token=self.token, client_name="sluice", **options
        ) as client:
            client.path = chosen.path  # reopened as ``TrioClient.connect``'s (a restart)
            yield client


HINT = (
    "is the daemon running? Start it with `sluice serve`; run sluice from the directory "
    "where it runs, or give --socket PATH, $SLUICEGATE_SOCKET or --config PATH"
)


def _why(candidates: list[Candidate], chosen: Candidate, exc: OSError) -> str:
    """Why the connection failed, naming every path tried and where it came from.

    ``cannot connect to PATH (from --socket): No such file or directory (...)``
    for an explicit choice; for a search, one ``tried:`` line per candidate.
    """
    reason = exc.strerror or str(exc)
    if chosen.explicit:
        return f"cannot connect to {chosen.path} (from {chosen.source}): {reason} ({HINT})"
    lines = ["cannot connect to the daemon; tried:"]
    for candidate in candidates:  # those before the chosen one are absent
        found = candidate is chosen and candidate.path.exists()
        lines.append(f"  {candidate.path} ({candidate.source}): {reason if found else 'absent'}")
        if found:
            break
    return "\n".join([*lines, HINT])


def _say_retry(error: SluicegateError, attempt: int, delay: float) -> None:
    print(f"sluice: {error.code}: {error.message}; trying again in {delay:.1f} s "
          f"(attempt {attempt + 1})", file=sys.stderr, flush=True)  # fmt: skip
