"""Sessions: who a connection or request is, and what it may touch.

Open mode (no ``[[tokens]]``): every caller is namespace ``default`` with every
grant. With tokens, a caller presents one (``hello`` on the socket, a bearer
on HTTP); it is hashed with sha256 and compared in constant time against every
configured digest, so neither a match nor its position leaks through timing.
"""

from __future__ import annotations

import hashlib
import hmac
from fnmatch import fnmatchcase

import attrs

from actors.errors import Refused
from daemon.config import GRANTS, Config, TokenConfig

ALL_GRANTS = frozenset(GRANTS)


@attrs.define
class Session:
    """The caller's namespace, grants and queue scope."""

    namespace: str = "default"
    grants: frozenset[str] = ALL_GRANTS
    queues: tuple[str, ...] = ("*",)
    token_name: str | None = None
    authenticated: bool = True

    def has(self, grant: str) -> bool:
        """True if the session holds ``grant`` (``operator`` holds them all)."""
        return grant in self.grants or "operator" in self.grants

    def has_any(self, grants: tuple[str, ...]) -> bool:
        """True if the session holds one of ``grants`` (one call per request,
        where :meth:`has` per grant would be several)."""
        return "operator" in self.grants or not self.grants.isdisjoint(grants)

    def in_scope(self, queue: str) -> bool:
        """True if ``queue`` matches one of the session's queue patterns."""
        for pattern in self.queues:  # a loop, not any(genexpr): called once per job
            if pattern == "*" or pattern == queue or fnmatchcase(queue, pattern):
                return True
        return False

    def describe(self) -> dict[str, object]:
        """The ``hello`` answer's session fields."""
        return {
            "namespace": self.namespace,
            "grants": sorted(self.grants),
            "queues": list(self.queues),
        }


class Authenticator:
    """Checks tokens against the config's digests."""

    def __init__(self, config: Config) -> None:
        self.open_mode = config.open_mode
        self._tokens: list[tuple[bytes, TokenConfig]] = [
            (bytes.fromhex(t.digest()), t) for t in config.tokens
        ]

    def new_session(self) -> Session:
        """The session a fresh connection starts with."""
        if self.open_mode:
            return Session()
        return Session(grants=frozenset(), queues=(), authenticated=False)

    def check(self, token: str | None) -> Session:
        """The session for ``token``; ``unauthenticated`` if it matches none."""
        if self.open_mode:
            return Session()
        if not token:
            raise Refused("unauthenticated", "a token is required")
        digest = hashlib.sha256(token.encode()).digest()
        found: TokenConfig | None = None
        for known, config in self._tokens:  # no early exit: constant time
            if hmac.compare_digest(known, digest):
                found = config
        if found is None:
            raise Refused("unauthenticated", "unknown token")
        return Session(
            namespace=found.namespace,
            grants=frozenset(found.grants),
            queues=tuple(found.queues),
            token_name=found.name,
        )
