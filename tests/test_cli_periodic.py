"""``sluice periodic list`` against a real daemon, and ``config check`` of ``[[periodic]]``."""

from __future__ import annotations

import json
import re

from daemon.cli.main import main
from daemon.cli.periodic import render
from tests.support import sluice

PERIODIC = """
[[periodic]]
name = "nightly-report"
queue = "reports"
type = "report"
payload = { kind = "daily" }
cron = "0 3 1 1 *"
tz = "America/Los_Angeles"

[[periodic]]
name = "elsewhere"
namespace = "other"
queue = "q"
type = "t"
every = "7d"
"""


def test_periodic_list_json_is_the_verb_result_and_humans_get_a_table(make_daemon):
    daemon = make_daemon(PERIODIC)
    sock = str(daemon.socket)
    proc = sluice("periodic", "list", "--json", "--socket", sock)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)  # exactly one document
    with daemon.client() as client:
        answer = client.ok("periodic_list")
    assert listed == {k: v for k, v in answer.items() if k not in ("id", "ok")}
    [entry] = listed["periodic"]  # namespace "other" is not the caller's
    assert entry == {
        "name": "nightly-report", "queue": "reports", "type": "report",
        "schedule": "cron 0 3 1 1 * America/Los_Angeles", "next_fire_at": entry["next_fire_at"],
        "last_fired_at": None, "last_slot_at": None, "last_result": None,
    }  # fmt: skip
    assert isinstance(entry["next_fire_at"], int)
    human = sluice("periodic", "list", "--socket", sock)
    assert human.returncode == 0 and human.stderr == ""
    lines = human.stdout.splitlines()
    assert re.fullmatch(
        r"NAME\s+QUEUE\s+TYPE\s+SCHEDULE\s+NEXT FIRE\s+LAST FIRED\s+LAST RESULT", lines[0]
    )
    assert re.match(
        r"nightly-report\s+reports\s+report\s+cron 0 3 1 1 \* America/Los_Angeles\s+"
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+-\s+-$",
        lines[1],
    )
    assert render({"periodic": []}).startswith("no periodic jobs")


def test_config_check_names_the_periodic_field(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[periodic]]\nname = "x"\nqueue = "q"\ntype = "t"\ncron = "0 3 * *"\n')
    assert main(["config", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == f"{bad}: periodic[0].cron: expected 5 fields (minute hour day month weekday), got 4\n"
    )
    good = tmp_path / "good.toml"
    good.write_text(PERIODIC)
    assert main(["config", "check", str(good)]) == 0
