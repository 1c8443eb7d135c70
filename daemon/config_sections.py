"""The config file's typed sections: [daemon], [retention], [[tokens]] and [[periodic]].

Each section is a frozen attrs class whose validators raise
:class:`~daemon.validation.FieldError` naming the field, so
:func:`daemon.config.parse_config` can say ``daemon.lease: ...``. Durations
are milliseconds here; the TOML may write them as ``"30s"`` (the converter in
:mod:`daemon.config` parses the fields named in :data:`DURATION_FIELDS`).
"""

from __future__ import annotations

import hashlib
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import attrs

from actors.errors import Refused
from actors.limits import LEASE_MS, MAX_ATTEMPTS, NAME_RE, NAME_RULE, PRIORITY
from actors.periodic import Schedule, ScheduleError, parse_schedule
from actors.quota import Rate, parse_rate
from daemon.config_file import DEFAULT_STATE_DIR, socket_path
from daemon.durations import format_duration_ms
from daemon.validation import FieldError, at_least

GRANTS = frozenset(
    {"produce", "consume", "manage", "set_admission_policy", "clear_admission_policy", "operator"}
)

#: The defaults of ``[daemon] admin_write_rate`` and ``admin_write_burst``
#: (:mod:`daemon.admission.admin_limit` enforces them).
ADMIN_WRITE_RATE = "1/s"
ADMIN_WRITE_BURST = 10
UNLIMITED = "unlimited"

Duration = int  # milliseconds; the TOML may say "30s"

#: An attrs validator: (instance, attribute, value), raising FieldError.
Validator = Callable[[object, "attrs.Attribute[Any]", Any], None]


def parse_write_rate(value: object) -> Rate | None:
    """``"20/s"`` -> :class:`Rate`, ``"unlimited"`` -> None; ``ValueError`` otherwise."""
    if value == UNLIMITED:
        return None
    try:
        return parse_rate(value)
    except Refused:
        raise ValueError(
            f'must be "<count>/<unit>" with a count of at least 1 and unit s, m or h '
            f'(e.g. "20/s"), or "unlimited"; got {value!r}'
        ) from None


def _check_write_rate(_inst: object, attr: attrs.Attribute, value: str | None) -> None:
    if value is not None:
        try:
            parse_write_rate(value)
        except ValueError as exc:
            raise FieldError(attr.name, str(exc)) from None


def _at_least_or_none(minimum: int) -> Validator:
    check = at_least(minimum)

    def maybe(inst: object, attr: attrs.Attribute, value: int | None) -> None:
        if value is not None:
            check(inst, attr, value)

    return maybe


def _check_daemon_name(_inst: object, attr: attrs.Attribute, value: str) -> None:
    if value and not NAME_RE.match(value):
        raise FieldError(attr.name, f"must be empty (the host's name) or {NAME_RULE}")


@attrs.frozen
class DaemonConfig:
    """``[daemon]``: where state lives, the listeners and the store."""

    state_dir: str = DEFAULT_STATE_DIR
    #: This daemon's name among those sharing a database: the ``daemon`` label of
    #: its per-daemon metrics. Empty: the host's name (:meth:`daemon_name`).
    name: str = attrs.field(default="", validator=_check_daemon_name)
    #: A SQLite file (default: ``sluicegate.db`` in the state directory), or a
    #: ``postgresql://user@host:port/db`` DSN: several daemons share that database.
    database: str = ""
    #: PostgreSQL: a file holding the password (else the DSN's, ``PGPASSWORD``
    #: or the passfile ``~/.pgpass``), so that it is never in the config file.
    database_password_file: str = ""
    #: PostgreSQL: connections each daemon keeps open at most.
    database_pool_size: int = attrs.field(default=10, validator=at_least(2))
    #: PostgreSQL: a statement running longer is cancelled (its write answers
    #: ``unavailable``).
    database_statement_timeout: Duration = attrs.field(default=30_000, validator=at_least(100))
    #: PostgreSQL: how long one connection attempt may take.
    database_connect_timeout: Duration = attrs.field(default=5_000, validator=at_least(100))
    #: PostgreSQL: a transaction of this daemon that waits on the daemon itself
    #: this long (the process frozen: SIGSTOP, a paused VM) is ended by the
    #: server, freeing the cluster's epoch lock for the other daemons.
    database_idle_in_transaction_timeout: Duration = attrs.field(
        default=5_000, validator=at_least(100)
    )
    socket: str = ""
    http: str = "127.0.0.1:7890"
    maintenance: bool = True
    enforce: bool = True
    max_budgets: int = attrs.field(default=8192, validator=at_least(0))
    max_frame_bytes: int = attrs.field(default=1_048_576, validator=at_least(1024))
    lease: Duration = attrs.field(default=60_000, validator=at_least(1))
    synchronous: Literal["normal", "full"] = "normal"
    metrics_token: str = ""
    #: Usage roll-up tick (monthly quota): minutes rolled into days, blocks evaluated.
    rollup_interval: Duration = attrs.field(default=3_600_000, validator=at_least(1000))
    #: Days the per-minute usage rows are kept after they were rolled into days.
    usage_keep_days: int = attrs.field(default=7, validator=at_least(1))
    #: An HTTP client must send a request's headers within this (slow-header guard).
    http_header_timeout: Duration = attrs.field(default=10_000, validator=at_least(100))
    #: Distinct ``queue`` label values on metrics before ``__other__``.
    metrics_max_queues: int = attrs.field(default=100, validator=at_least(1))
    #: Bytes of unsent answers a client may leave unread before it is cut off.
    max_send_buffer_bytes: int = attrs.field(default=8 * 1_048_576, validator=at_least(65536))
    #: Bound on finishing requests in flight after SIGTERM.
    shutdown_grace: Duration = 10_000
    #: Sample the event loop's lag every N ms (0: off). For benchmarks.
    loop_probe: Duration = 0
    #: Socket connections served at once (0: derived from the open-file limit).
    max_connections: int = attrs.field(default=0, validator=at_least(0))
    #: A socket connection with no request, waiting claim or subscription for this
    #: long is closed (0: never).
    idle_timeout: Duration = attrs.field(default=600_000, validator=at_least(0))
    #: The WAL file's size over which it is truncated at once (else when idle), and
    #: ``/healthz`` is degraded; also SQLite's ``journal_size_limit``.
    wal_max_bytes: int = attrs.field(default=64 * 1_048_576, validator=at_least(1_048_576))
    #: Admin writes (budgets, policies, quotas, queues) per caller: a rate
    #: (``"1/s"``, or ``"unlimited"``) and its burst; ``[[tokens]]`` may override.
    admin_write_rate: str = attrs.field(default=ADMIN_WRITE_RATE, validator=_check_write_rate)
    admin_write_burst: int = attrs.field(default=ADMIN_WRITE_BURST, validator=at_least(1))

    def state_path(self) -> Path:
        """The state directory."""
        return Path(self.state_dir)

    def daemon_name(self) -> str:
        """``name``, else the host's name: stable across restarts, so a label's
        values stay one per daemon."""
        return self.name or socket.gethostname()

    def postgres_dsn(self) -> str | None:
        """The PostgreSQL DSN when ``database`` names one, else None (SQLite)."""
        if self.database.startswith(("postgresql://", "postgres://")):
            return self.database
        return None

    def database_path(self) -> Path:
        """The database file: ``database``, else ``sluicegate.db`` in the state directory."""
        return Path(self.database) if self.database else self.state_path() / "sluicegate.db"

    def socket_path(self) -> Path:
        """The unix socket the daemon listens on."""
        return socket_path(self.state_dir, self.socket)


@attrs.frozen
class RetentionConfig:
    """``[retention]``: how long finished jobs are kept by default, and the sweep's pace."""

    completed_ttl: Duration = 7 * 86_400_000
    dead_ttl: Duration = 30 * 86_400_000
    #: Rows one sweep write deletes (and, for TTL sweeps, index entries it reads) at most.
    batch: int = attrs.field(default=1000, validator=at_least(1))
    #: Time between two retention ticks (the leader lease lasts three).
    interval: Duration = attrs.field(default=60_000, validator=at_least(1000))


def _check_name(_inst: object, attr: attrs.Attribute, value: str) -> None:
    if not NAME_RE.match(value):
        raise FieldError(attr.name, f"must be {NAME_RULE}")


def _check_grants(_inst: object, attr: attrs.Attribute, value: tuple[str, ...]) -> None:
    unknown = sorted(set(value) - GRANTS)
    if unknown:
        raise FieldError(
            attr.name, f"unknown grant {unknown[0]!r}; grants are {', '.join(sorted(GRANTS))}"
        )


def _check_hex(_inst: object, attr: attrs.Attribute, value: str) -> None:
    if value and not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise FieldError(attr.name, "must be 64 hex characters: the sha256 of the token")


@attrs.frozen
class TokenConfig:
    """``[[tokens]]``: a bearer token, its namespace, grants and queue scope."""

    name: str
    namespace: str = attrs.field(default="default", validator=_check_name)
    sha256: str = attrs.field(default="", validator=_check_hex)
    token: str = ""
    grants: tuple[str, ...] = attrs.field(default=("produce", "consume"), validator=_check_grants)
    queues: tuple[str, ...] = ("*",)
    #: This token's admin write limit (else ``[daemon] admin_write_rate``):
    #: ``"20/s"`` or ``"unlimited"``; its burst defaults to the rate's count.
    write_rate: str | None = attrs.field(default=None, validator=_check_write_rate)
    write_burst: int | None = attrs.field(default=None, validator=_at_least_or_none(1))

    def digest(self) -> str:
        """The token's sha256 in lower-case hex."""
        if self.sha256:
            return self.sha256.lower()
        return hashlib.sha256(self.token.encode()).hexdigest()


def _between(lo: int, hi: int) -> Validator:
    def check(_inst: object, attr: attrs.Attribute, value: int | None) -> None:
        if value is not None and not lo <= value <= hi:
            raise FieldError(attr.name, f"must be between {lo} and {hi}, got {value}")

    return check


def _check_table(_inst: object, attr: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, dict):
        raise FieldError(attr.name, 'must be a table, such as { report = "daily" }')


@attrs.frozen
class PeriodicConfig:
    """``[[periodic]]``: a job enqueued on a schedule (``every`` or ``cron`` + ``tz``)."""

    name: str = attrs.field(validator=_check_name)
    queue: str = attrs.field(validator=_check_name)
    type: str = attrs.field(validator=_check_name)
    namespace: str = attrs.field(default="default", validator=_check_name)
    payload: Any = attrs.field(factory=dict, validator=_check_table)
    priority: int | None = attrs.field(default=None, validator=_between(*PRIORITY))
    max_attempts: int | None = attrs.field(default=None, validator=_between(*MAX_ATTEMPTS))
    lease_ms: Duration | None = attrs.field(default=None, validator=_between(*LEASE_MS))
    every: Duration | None = None
    cron: str | None = None
    tz: str | None = None
    #: Built from every/cron/tz when the entry is read.
    schedule: Schedule = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        text = None if self.every is None else format_duration_ms(self.every)
        try:
            schedule = parse_schedule(self.every, text, self.cron, self.tz)
        except ScheduleError as exc:
            raise FieldError(exc.field, exc.message) from None
        object.__setattr__(self, "schedule", schedule)


#: The fields of each section that are durations (plain ints in the type system).
DURATION_FIELDS: dict[type, set[str]] = {
    DaemonConfig: {
        "lease",
        "rollup_interval",
        "shutdown_grace",
        "loop_probe",
        "http_header_timeout",
        "idle_timeout",
        "database_statement_timeout",
        "database_connect_timeout",
        "database_idle_in_transaction_timeout",
    },
    RetentionConfig: {"completed_ttl", "dead_ttl", "interval"},
    PeriodicConfig: {"every", "lease_ms"},
}
