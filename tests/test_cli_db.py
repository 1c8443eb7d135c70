"""``sluice db status`` and ``sluice db migrate`` on both stores (in process)."""

from __future__ import annotations

import json

from daemon.cli.main import main
from daemon.store.schema import MIGRATIONS


def _config(tmp_path, database: str = "") -> str:
    path = tmp_path / "sluicegate.toml"
    line = f'database = "{database}"\n' if database else ""
    path.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n{line}')
    return str(path)


def _status(config: str, capsys) -> dict:
    assert main(["--config", config, "--json", "db", "status"]) == 0
    return json.loads(capsys.readouterr().out)


def test_sqlite_status_creates_nothing_and_migrate_brings_it_up_to_date(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["--config", config, "db", "status"]) == 1
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "state" / "sluicegate.db").exists()
    assert main(["--config", config, "db", "migrate"]) == 0
    out = capsys.readouterr().out
    n = len(MIGRATIONS)
    assert out.startswith(f"sqlite: schema version {n} of {n} (up to date)")
    status = _status(config, capsys)
    assert (status["dialect"], status["current"], status["pending"]) == ("sqlite", n, [])


def test_a_database_newer_than_this_build_is_refused(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["--config", config, "db", "migrate"]) == 0
    import sqlite3

    conn = sqlite3.connect(tmp_path / "state" / "sluicegate.db")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    capsys.readouterr()
    assert main(["--config", config, "db", "migrate"]) == 1
    assert "99" in capsys.readouterr().err


def test_postgresql_status_then_migrate_then_status(tmp_path, capsys, pg_dsn):
    config = _config(tmp_path, pg_dsn)
    before = _status(config, capsys)
    assert (before["dialect"], before["current"]) == ("postgresql", 0)
    assert len(before["pending"]) == before["latest"]
    assert main(["--config", config, "db", "migrate"]) == 0
    assert "up to date" in capsys.readouterr().out
    after = _status(config, capsys)
    assert after["current"] == after["latest"] and after["pending"] == []
    assert all(step["applied_at"] for step in after["applied"])


def test_an_unreachable_postgresql_is_one_line_without_the_password(tmp_path, capsys):
    config = _config(tmp_path, "postgresql://u:hunter2@127.0.0.1:1/db")
    assert main(["--config", config, "db", "status"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach postgresql://u:***@127.0.0.1:1/db" in err
    assert "hunter2" not in err and "Traceback" not in err
