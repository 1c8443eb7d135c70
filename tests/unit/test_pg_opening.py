"""Opening the PostgreSQL store: what logs show of the DSN, and the config keys."""

from __future__ import annotations

import pytest

from daemon.config import parse_config
from daemon.store.pg_opening import dsn_target, redacted


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
                    "database_connect_timeout": "500ms",
                    "database_idle_in_transaction_timeout": "1s"}}, "t",
    ).daemon  # fmt: skip
    assert (cfg.database_pool_size, cfg.database_statement_timeout) == (4, 2000)
    assert cfg.database_connect_timeout == 500
    assert cfg.database_idle_in_transaction_timeout == 1000
    assert parse_config({}, "t").daemon.database_idle_in_transaction_timeout == 5000
    with pytest.raises(Exception, match="database_pool_size"):
        parse_config({"daemon": {"database_pool_size": 1}}, "t")
    for bad in ("50ms", "0s", -1, "soon", True):
        with pytest.raises(Exception, match="database_idle_in_transaction_timeout"):
            parse_config({"daemon": {"database_idle_in_transaction_timeout": bad}}, "t")


@pytest.mark.parametrize(
    ("dsn", "target"),
    [
        ("postgresql://u:pw@db.internal:5432/sluicegate", ("db.internal:5432", "sluicegate")),
        ("postgresql://u:p%40ss@h/db%20x?sslmode=require", ("h", "db x")),
        ("postgres://h1:5432,h2:5433/jobs", ("h1:5432,h2:5433", "jobs")),
        # A socket directory and the database as parameters; a password there stays hidden.
        ("postgresql://postgres@/postgres?host=/run/pg&port=5433&password=pw",
         ("/run/pg:5433", "postgres")),
        ("postgresql:///?dbname=jobs&password=pw", (None, "jobs")),
        ("postgresql://u@/", (None, None)),
    ],
)  # fmt: skip
def test_healthz_names_the_host_and_database_never_the_user_or_password(dsn, target):
    assert dsn_target(dsn) == target
    assert "pw" not in repr(dsn_target(dsn)) and "u@" not in repr(dsn_target(dsn))
