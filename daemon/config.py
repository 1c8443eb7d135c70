"""The operator's TOML config file, parsed into attrs classes with cattrs.

Every error names the file and the field path (``sluicegate.toml:
daemon.lease: expected a duration ...``), and unknown keys are refused with a
"did you mean" hint. No file means the built-in defaults: open mode, state in
``./sluicegate-data/``. See PROTOCOL.md, "Config file".

This module holds the whole file (:class:`Config`) and its loading; the typed
sections live in :mod:`daemon.config_sections` and the admission tables'
decoding in :mod:`daemon.config_tables`. The sections' public names are
re-exported here, so ``from daemon.config import DaemonConfig`` keeps working.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import attrs
import cattrs

from actors.budget import BudgetSpec
from actors.policy import Policy
from actors.quota import Quota
from daemon import config_tables
from daemon.config_file import DEFAULT_PATH, ENV_CONFIG, ConfigError
from daemon.config_sections import (
    ADMIN_WRITE_BURST,
    ADMIN_WRITE_RATE,
    DURATION_FIELDS,
    GRANTS,
    UNLIMITED,
    DaemonConfig,
    Duration,
    PeriodicConfig,
    RetentionConfig,
    TokenConfig,
    parse_write_rate,
)
from daemon.durations import parse_duration_ms
from daemon.strict import strict_converter
from daemon.validation import describe

__all__ = [
    "ADMIN_WRITE_BURST",
    "ADMIN_WRITE_RATE",
    "ENV_CONFIG",
    "GRANTS",
    "UNLIMITED",
    "Config",
    "ConfigError",
    "DaemonConfig",
    "Duration",
    "PeriodicConfig",
    "RetentionConfig",
    "TokenConfig",
    "load_config",
    "parse_config",
    "parse_write_rate",
]


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


# Durations are plain ints in the type system; their fields are marked by name.
_converter = strict_converter()
for _cls, _fields in DURATION_FIELDS.items():
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
    specs = config_tables.budget_specs(budgets, problems) if isinstance(budgets, dict) else {}
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
    tables, quota_problems = config_tables.quota_tables(config.quotas)
    policies, policy_problems = config_tables.policy_tables(config.policies)
    return attrs.evolve(
        config, source=source, warnings=tuple(warnings), budget_specs=specs,
        quota_tables=tables, quota_problems=tuple(quota_problems),
        policy_tables=policies, policy_problems=tuple(policy_problems),
    )  # fmt: skip


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
