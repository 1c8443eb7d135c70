"""What a reload of the config file may change: the decision, as a pure function.

A reload (SIGHUP, or the settings watcher seeing the file change) compares the
running :class:`~daemon.config.Config` with the fresh one and takes one of
three outcomes, key by key:

- **live**: the fresh value applies now (tokens, quotas, budgets, policies,
  periodic entries, ``[retention]``, the ``[daemon]`` keys of
  :data:`LIVE_DAEMON_KEYS`);
- **needs a restart**: every other ``[daemon]`` key (paths, listeners, the
  store's settings). Its running value stays; the rest of the reload applies.
  A key is live only if everything that reads it reads ``core.config`` at use,
  so a ``[daemon]`` key added later needs a restart until it is listed here;
- **refused**: a change that would lower security. The whole reload is
  refused and the last good config stays in force:

  - tokens mode to open mode (no ``[[tokens]]`` left: an emptied or truncated
    file says exactly that);
  - ``daemon.metrics_token`` removed (``/metrics`` open to anyone);
  - ``daemon.http`` listening wider than it does (off to on, loopback to
    another address, to a wildcard address, or to another non-loopback one).

  A restart with such a file starts in the mode the file says, on purpose.

Security can always be raised by a reload: a token added, revoked or given
fewer grants, a ``metrics_token`` set or rotated.
"""

from __future__ import annotations

import ipaddress

import attrs

from daemon.config import Config, DaemonConfig

#: ``[daemon]`` keys a reload applies at once; every other one needs a restart.
LIVE_DAEMON_KEYS = frozenset(
    {
        "maintenance",
        "enforce",
        "max_budgets",
        "max_frame_bytes",  # new connections
        "max_send_buffer_bytes",  # new connections
        "lease",
        "metrics_token",  # may be set or rotated, not removed
        "rollup_interval",
        "usage_keep_days",
        "admin_write_rate",  # at each caller's next admin write
        "admin_write_burst",
    }
)


@attrs.frozen
class ReloadDecision:
    """The outcome of comparing the running config with a fresh one."""

    #: The config to run with (restart-only keys at their running values);
    #: None when the reload is refused.
    config: Config | None
    #: Why the reload is refused (empty when it is taken).
    refusals: tuple[str, ...] = ()
    #: ``daemon.<key>`` changes that wait for a restart.
    needs_restart: tuple[str, ...] = ()


def decide(running: Config, fresh: Config) -> ReloadDecision:
    """Compare ``running`` with ``fresh``: what applies, what waits, what is refused."""
    refusals = []
    if not running.open_mode and fresh.open_mode:
        refusals.append(
            "no [[tokens]] in the file: the reload would turn tokens mode into open mode "
            "(any client of the socket with every grant in every namespace); "
            "restart the daemon to run in open mode on purpose"
        )
    old, new = running.daemon, fresh.daemon
    if old.metrics_token and not new.metrics_token:
        refusals.append(
            "daemon.metrics_token removed: the reload would open /metrics to anyone; "
            "restart the daemon to drop it on purpose"
        )
    if widens(old.http, new.http):
        refusals.append(
            f"daemon.http = {new.http!r} would listen wider than {old.http!r}; "
            "the HTTP address changes only at a restart"
        )
    if refusals:
        return ReloadDecision(None, tuple(refusals))
    restart_only = [f.name for f in attrs.fields(DaemonConfig)
                    if f.init and f.name not in LIVE_DAEMON_KEYS]  # fmt: skip
    kept = {k: getattr(old, k) for k in restart_only if getattr(old, k) != getattr(new, k)}
    config = attrs.evolve(fresh, daemon=attrs.evolve(new, **kept)) if kept else fresh
    return ReloadDecision(config, needs_restart=tuple(f"daemon.{k}" for k in sorted(kept)))


# How far an HTTP listener reaches: off, this host only, one address, every address.
OFF, LOOPBACK, ADDRESS, EVERYWHERE = range(4)


def exposure(bind: str) -> tuple[int, str]:
    """How far ``daemon.http`` reaches, and the host it names."""
    if not bind:
        return OFF, ""
    if bind.startswith("unix:"):
        return LOOPBACK, bind  # a unix socket: its file permissions decide
    host = bind.rsplit(":", 1)[0] if ":" in bind else bind
    host = host.strip("[]").lower()
    if host in ("", "*", "0.0.0.0", "::"):
        return EVERYWHERE, "*"
    if host == "localhost":
        return LOOPBACK, host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return ADDRESS, host  # a host name: whatever it resolves to
    if ip.is_unspecified:
        return EVERYWHERE, "*"
    return (LOOPBACK if ip.is_loopback else ADDRESS), host


def widens(old: str, new: str) -> bool:
    """True if listening on ``new`` instead of ``old`` reaches anyone ``old`` did not."""
    (old_reach, old_host), (new_reach, new_host) = exposure(old), exposure(new)
    return new_reach > old_reach or (new_reach == ADDRESS and new_host != old_host)
