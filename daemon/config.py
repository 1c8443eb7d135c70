"""The operator's TOML config file, parsed into attrs classes with cattrs.

Every error names the file and the field path (``sluicegate.toml:
daemon.lease: expected a duration ...``), and unknown keys are refused with a
"did you mean" hint. No file means the built-in defaults: open mode, state in
``./sluicegate-data/``. See PROTOCOL.md, "Config file".
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs

from actors import budget as spec_parser
from actors.budget import BudgetSpec, SpecError, parse_spec
from actors.errors import Refused
from actors.limits import LEASE_MS, MAX_ATTEMPTS, NAME_RE, NAME_RULE, PRIORITY
from actors.periodic import Schedule, ScheduleError, parse_schedule
from actors.policy import Policy, parse_policy
from actors.quota import Quota, Rate, parse_quota, parse_rate
from daemon.config_file import DEFAULT_PATH, DEFAULT_STATE_DIR, ENV_CONFIG, ConfigError, socket_path
from daemon.durations import format_duration_ms, parse_duration_ms
from daemon.strict import strict_converter
from daemon.validation import FieldError, at_least, describe

GRANTS = frozenset(
    {"produce", "consume", "manage", "set_admission_policy", "clear_admission_policy", "operator"}
)

#: The defaults of ``[daemon] admin_write_rate`` and ``admin_write_burst``
#: (:mod:`daemon.admission.admin_limit` enforces them).
ADMIN_WRITE_RATE = "1/s"
ADMIN_WRITE_BURST = 10
UNLIMITED = "unlimited"

Duration = int  # milliseconds; the TOML may say "30s"


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


def _at_least_or_none(minimum: int):
    check = at_least(minimum)

    def maybe(inst: object, attr: attrs.Attribute, value: int | None) -> None:
        if value is not None:
            check(inst, attr, value)

    return maybe


@attrs.frozen
class DaemonConfig:
    """``[daemon]``: where state lives, the listeners and the store."""

    state_dir: str = DEFAULT_STATE_DIR
    database: str = ""
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
        return Path(self.state_dir)

    def database_path(self) -> Path:
        return Path(self.database) if self.database else self.state_path() / "sluicegate.db"

    def socket_path(self) -> Path:
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


def _between(lo: int, hi: int):
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


@attrs.frozen
class Config:
    """The whole config file. Sections of later features are kept as raw tables."""

    daemon: DaemonConfig = attrs.field(factory=DaemonConfig)
    retention: RetentionConfig = attrs.field(factory=RetentionConfig)
    tokens: tuple[TokenConfig, ...] = ()
    quotas: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    budgets: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    policies: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    periodic: tuple[PeriodicConfig, ...] = ()
    #: ``budgets`` validated: namespace -> key -> settings (read-only budgets).
    budget_specs: dict[str, dict[str, BudgetSpec]] = attrs.field(factory=dict)
    #: ``quotas`` decoded: namespace -> (document, or None when it does not
    #: decode, and the raw table). A bad table fails its namespace closed.
    quota_tables: dict[str, tuple[Quota | None, Any]] = attrs.field(factory=dict)
    #: Why some ``[quotas.<ns>]`` tables do not decode (``config check`` fails).
    quota_problems: tuple[str, ...] = ()
    #: ``policies`` decoded: (namespace, queue) -> (policy, or None when the
    #: table does not decode, and the raw table). A bad table fails its queue
    #: closed (``admission_unavailable``), as a bad quota table does its namespace.
    policy_tables: dict[tuple[str, str], tuple[Policy | None, Any]] = attrs.field(factory=dict)
    #: Why some ``[policies.<ns>.<queue>]`` tables do not decode (``config check`` fails).
    policy_problems: tuple[str, ...] = ()
    #: Where this config came from ("<defaults>" when no file).
    source: str = "<defaults>"
    warnings: tuple[str, ...] = ()

    @property
    def open_mode(self) -> bool:
        """No tokens configured: every connection is ``default`` with every grant."""
        return not self.tokens


# Durations are plain ints in the type system; mark their fields by name.
_DURATION_FIELDS = {
    DaemonConfig: {
        "lease",
        "rollup_interval",
        "shutdown_grace",
        "loop_probe",
        "http_header_timeout",
        "idle_timeout",
    },
    RetentionConfig: {"completed_ttl", "dead_ttl", "interval"},
    PeriodicConfig: {"every", "lease_ms"},
}
_converter = strict_converter()
for _cls, _fields in _DURATION_FIELDS.items():
    _converter.register_structure_hook(
        _cls,
        cattrs.gen.make_dict_structure_fn(
            _cls,
            _converter,
            _cattrs_forbid_extra_keys=True,
            **{
                f: cattrs.gen.override(struct_hook=lambda v, _t: parse_duration_ms(v))
                for f in _fields
            },
        ),
    )


def _describe(exc: BaseException) -> list[str]:
    return [f"{path or '(top level)'}: {message}" for path, message in describe(exc)]


def parse_config(data: dict[str, Any], source: str) -> Config:
    """Build a :class:`Config` from decoded TOML; raise :class:`ConfigError`."""
    data = dict(data)
    problems: list[str] = []
    # Budget tables are checked from the raw data, so their problems are listed
    # beside those of the other sections, whatever else is wrong.
    budgets = data.get("budgets")
    specs = _budget_specs(budgets, problems) if isinstance(budgets, dict) else {}
    try:
        config = _converter.structure(data, Config)
    except Exception as exc:  # cattrs wraps every field error; flatten them all
        raise ConfigError(source, (_describe(exc) or [str(exc)]) + problems) from None
    warnings: list[str] = []
    seen: set[str] = set()
    for i, token in enumerate(config.tokens):
        where = f"tokens[{i}]"
        if bool(token.sha256) == bool(token.token):
            problems.append(f"{where}: give exactly one of sha256 or token")
        elif token.token:
            warnings.append(f"{where} ({token.name}): plain token in the config file; use sha256")
        digest = token.digest()
        if digest in seen:
            problems.append(f"{where}: the same token is configured twice")
        seen.add(digest)
    names: set[str] = set()
    for i, entry in enumerate(config.periodic):
        if entry.name in names:
            problems.append(f"periodic[{i}].name: {entry.name!r} is used by another entry")
        names.add(entry.name)
    if problems:
        raise ConfigError(source, problems)
    tables, quota_problems = _quota_tables(config.quotas)
    policy_tables, policy_problems = _policy_tables(config.policies)
    return attrs.evolve(
        config, source=source, warnings=tuple(warnings), budget_specs=specs,
        quota_tables=tables, quota_problems=tuple(quota_problems),
        policy_tables=policy_tables, policy_problems=tuple(policy_problems),
    )  # fmt: skip


def _quota_tables(raw: dict[str, Any]) -> tuple[dict[str, tuple[Quota | None, Any]], list[str]]:
    """Decode ``[quotas.<namespace>]`` tables; a bad one is kept raw (fail closed)."""
    tables: dict[str, tuple[Quota | None, Any]] = {}
    problems: list[str] = []
    for namespace, table in raw.items():
        if not NAME_RE.match(namespace):
            problems.append(f"quotas.{namespace}: not a namespace name")
            continue
        try:
            tables[namespace] = (parse_quota(table), table)
        except Refused as exc:
            field = exc.details.get("field", "")
            where = f"quotas.{namespace}" + (f".{field}" if field and field != "quota" else "")
            problems.append(f"{where}: {exc.message} (the namespace fails closed)")
            tables[namespace] = (None, table)
    return tables, problems


def _policy_tables(
    raw: dict[str, Any],
) -> tuple[dict[tuple[str, str], tuple[Policy | None, Any]], list[str]]:
    """Decode ``[policies.<namespace>.<queue>]`` tables with the API's own decoder.

    A table that does not decode is kept raw: provisioning stores it as it is,
    so its queue fails closed (seed 002 REQ-9) exactly as a bad stored policy
    does, and no other queue is affected. What is not a policy table at all (a
    bad namespace or queue name, a value that is not a table) is listed and
    skipped. Problems name ``policies.<ns>.<queue>.<field>``.
    """
    tables: dict[tuple[str, str], tuple[Policy | None, Any]] = {}
    problems: list[str] = []
    for namespace, queues in raw.items():
        if not NAME_RE.match(namespace) or not isinstance(queues, dict):
            problems.append(f"policies.{namespace}: expected [policies.<namespace>.<queue>] tables")
            continue
        for queue, table in queues.items():
            where = f"policies.{namespace}.{queue}"
            if not NAME_RE.match(queue) or not isinstance(table, dict):
                problems.append(
                    f"{where}: expected a [policies.<namespace>.<queue>] table "
                    f"(a queue name is {NAME_RULE})"
                )
                continue
            try:
                tables[(namespace, queue)] = (parse_policy(table), table)
            except Refused as exc:
                field = exc.details.get("field", "")
                at = f"{where}.{field}" if field and field != "policy" else where
                problems.append(f"{at}: {exc.message} (the queue fails closed)")
                tables[(namespace, queue)] = (None, table)
    return tables, problems


def _budget_specs(raw: dict[str, Any], problems: list[str]) -> dict[str, dict[str, BudgetSpec]]:
    """Validate ``[budgets.<namespace>.<key>]`` tables into budget settings."""
    specs: dict[str, dict[str, BudgetSpec]] = {}
    for namespace, table in raw.items():
        if not NAME_RE.match(namespace) or not isinstance(table, dict):
            problems.append(f"budgets.{namespace}: expected [budgets.<namespace>.<key>] tables")
            continue
        for key, body in table.items():
            where = f"budgets.{namespace}.{key}"
            try:
                specs.setdefault(namespace, {})[key] = _budget_spec(key, body)
            except FieldError as exc:
                problems.append(f"{where}.{exc.field}: {exc.message}")
            except (TypeError, ValueError) as exc:
                problems.append(f"{where}: {exc}")
    return specs


def _budget_spec(key: str, body: Any) -> BudgetSpec:
    if not NAME_RE.match(key):
        raise ValueError("a budget key is 1-128 characters of [A-Za-z0-9._:-]")
    try:  # no upper bounds here: a duration may be "30d"
        return parse_spec(body, most=None, duration=parse_duration_ms)
    except SpecError as exc:
        raise _budget_problem(exc, body) from None


def _budget_problem(exc: SpecError, body: Any) -> ValueError:
    """The parser's refusal in the config file's words (a FieldError names its field)."""
    field, problem = exc.field, exc.problem
    kind = body["strategy"].get("type") if field.startswith("strategy.") else None
    if problem == spec_parser.UNKNOWN_FIELD:
        return FieldError(field, "unknown field")
    if problem == spec_parser.UNREADABLE:
        return FieldError(field, exc.detail)
    if problem == spec_parser.NOT_OBJECT:
        if field == "strategy":
            return FieldError(field, 'must be a table such as { type = "while_in_flight" }')
        return ValueError("expected a table with allocation and strategy")
    if problem == spec_parser.BAD_TYPE:
        return FieldError(field, "must be while_in_flight or time_based")
    if problem == spec_parser.TIME_BASED_ONLY or (
        field == "strategy.duration_ms" and kind == spec_parser.WHILE_IN_FLIGHT  # "0s"
    ):
        return ValueError("while_in_flight takes neither duration_ms nor burst")
    if field == "strategy.duration_ms":  # BAD_COUNT (0) or REQUIRED
        return ValueError("strategy.duration_ms must be a positive integer for time_based")
    return FieldError(field, "must be an integer of at least 1")  # allocation, burst


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load ``path``, else ``$SLUICEGATE_CONFIG``, else ``./sluicegate.toml``, else defaults."""
    chosen = path or os.environ.get(ENV_CONFIG) or (DEFAULT_PATH if DEFAULT_PATH.exists() else None)
    if chosen is None:
        return Config()
    source = str(chosen)
    try:
        raw = Path(chosen).read_bytes()
    except OSError as exc:
        raise ConfigError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [f"not valid TOML: {exc}"]) from None
    return parse_config(data, source)
