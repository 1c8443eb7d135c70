"""Opening the PostgreSQL store: what logs show of the DSN, and the config keys."""

from __future__ import annotations

import pytest

from daemon.config import parse_config
from daemon.store.pg_opening import redacted


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:p%40ss@h/db?sslmode=require", "postgresql://u:***@h/db?sslmode=require"),
        ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
        ("postgres://h/db", "postgres://h/db"),
    ],
)
def test_the_password_is_never_shown(dsn, shown):
    assert redacted(dsn) == shown


def test_a_postgresql_dsn_selects_postgresql_and_a_path_sqlite():
    pg = parse_config({"daemon": {"database": "postgresql://u@h/db"}}, "t").daemon
    assert pg.postgres_dsn() == "postgresql://u@h/db"
    lite = parse_config({"daemon": {"database": "/var/lib/x.db"}}, "t").daemon
    assert lite.postgres_dsn() is None
    assert parse_config({}, "t").daemon.postgres_dsn() is None


def test_the_pool_settings_are_checked():
    cfg = parse_config(
        {"daemon": {"database_pool_size": 4, "database_statement_timeout": "2s",
                    "database_connect_timeout": "500ms"}}, "t",
    ).daemon  # fmt: skip
    assert (cfg.database_pool_size, cfg.database_statement_timeout) == (4, 2000)
    assert cfg.database_connect_timeout == 500
    with pytest.raises(Exception, match="database_pool_size"):
        parse_config({"daemon": {"database_pool_size": 1}}, "t")
