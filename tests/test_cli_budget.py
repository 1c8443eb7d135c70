"""``sluice budget ...``, run as a subprocess against a real daemon, and its table math."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest

from daemon.cli.budget import describe_strategy, duration, next_refill_ms, render

HEADER = r"KEY\s+ALLOCATION\s+STRATEGY\s+AVAILABLE\s+IN FLIGHT\s+PARKED\s+NEXT REFILL"
LOCAL_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def sluice(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``sluice args...``; the completed process with text output."""
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class Sluice:
    """``sluice`` aimed at one daemon's socket."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``sluice budget args... --socket S``."""
        return sluice("budget", *args, "--socket", self.socket)

    def ok(self, *args: str) -> str:
        """Human output of a call that must succeed."""
        proc = self.run(*args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        return proc.stdout

    def json(self, *args: str) -> Any:
        """The one JSON document of a ``--json`` call that must succeed."""
        proc = self.run(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)  # json.loads refuses a second document


@pytest.fixture
def cli(daemon) -> Sluice:
    """``sluice budget`` against the test's daemon."""
    return Sluice(str(daemon.socket))


def test_create_list_get_set_patch_delete_round_trip(cli):
    assert cli.ok("list") == "no budgets\n"
    assert cli.json("list") == {"budgets": []}

    made = cli.json(
        "create", "image-service", "--allocation", "10000", "--strategy", "time_based",
        "--duration", "1h", "--burst", "500",
    )["budget"]  # fmt: skip
    assert made["key"] == "image-service" and made["allocation"] == 10000
    assert made["strategy"] == {"type": "time_based", "duration_ms": 3_600_000, "burst": 500}
    assert made["created_at"] == made["updated_at"]
    assert made["state"] == {"available": 500, "in_flight": 0, "parked": 0, "next_refill_at": None}

    out = cli.ok("set", "schema-bot", "--allocation", "10", "--strategy", "while_in_flight")
    assert out.splitlines()[0] == "saved budget schema-bot"
    listed = cli.json("list")["budgets"]
    assert [b["key"] for b in listed] == ["image-service", "schema-bot"]
    assert listed[1]["strategy"] == {"type": "while_in_flight"} and listed[1]["allocation"] == 10
    assert cli.json("get", "image-service")["budget"]["strategy"] == made["strategy"]

    # set replaces the settings, keeping created_at (PUT semantics).
    replaced = cli.json(
        "set", "image-service", "--allocation", "20000", "--strategy", "time_based",
        "--duration", "2h",
    )["budget"]  # fmt: skip
    assert replaced["created_at"] == made["created_at"]
    assert replaced["updated_at"] >= made["updated_at"]
    assert (replaced["allocation"], replaced["strategy"]) == (
        20000, {"type": "time_based", "duration_ms": 7_200_000},
    )  # fmt: skip

    # patch sends only what is given.
    patched = cli.json("patch", "image-service", "--burst", "50000")["budget"]
    assert patched["allocation"] == 20000
    assert patched["strategy"] == {"type": "time_based", "duration_ms": 7_200_000, "burst": 50000}
    patched = cli.json("patch", "image-service", "--allocation", "30", "--duration", "90000")
    assert patched["budget"]["allocation"] == 30
    assert patched["budget"]["strategy"] == {
        "type": "time_based", "duration_ms": 90_000, "burst": 50000,
    }  # fmt: skip
    reset = cli.json("patch", "image-service", "--burst", "null")["budget"]
    assert reset["strategy"] == {"type": "time_based", "duration_ms": 90_000}
    assert reset["allocation"] == 30 and reset["created_at"] == made["created_at"]
    switched = cli.json("patch", "schema-bot", "--strategy", "time_based", "--duration", "5m")
    assert switched["budget"]["strategy"] == {"type": "time_based", "duration_ms": 300_000}

    assert cli.ok("delete", "schema-bot") == "deleted budget schema-bot\n"
    assert cli.json("delete", "image-service") == {}
    assert cli.json("list") == {"budgets": []}
    gone = cli.run("get", "schema-bot")
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr == "sluice: not_found: budget 'schema-bot' not found\n"


def test_json_is_exactly_the_verb_result(cli):
    create = cli.run(
        "--json", "create", "x", "--strategy", "while_in_flight", "--allocation", "3"
    )  # global options before the command, too
    assert create.returncode == 0, create.stderr
    doc = json.loads(create.stdout)
    assert list(doc) == ["budget"]
    budget = doc["budget"]
    assert set(budget) == {"key", "allocation", "strategy", "created_at", "updated_at", "state"}
    assert set(budget["state"]) == {"available", "in_flight", "parked", "next_refill_at"}
    assert cli.json("get", "x") == doc
    assert cli.json("list") == {"budgets": [budget]}


def test_duplicate_create_exits_1_with_conflict(cli):
    args = ("create", "x", "--allocation", "5", "--strategy", "while_in_flight")
    cli.ok(*args)
    again = cli.run(*args)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr == "sluice: conflict: budget 'x' already exists\n"
    assert cli.run(*args, "--json").stdout == ""  # nothing on stdout with --json either


@pytest.mark.parametrize("bad", ["1y", "0", "0ms", "-5", "1.5h", "h", "soon", ""])
def test_a_bad_duration_exits_2_and_sends_nothing(cli, bad):
    proc = cli.run(
        "create", "x", "--allocation", "5", "--strategy", "time_based", "--duration", bad
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--duration" in proc.stderr
    assert cli.json("list") == {"budgets": []}


def test_what_the_cli_rejects_itself_exits_2(cli):
    cli.ok("create", "x", "--allocation", "5", "--strategy", "while_in_flight")
    for args in (
        ("create", "y", "--allocation", "5", "--strategy", "time_based"),  # no --duration
        ("create", "y", "--allocation", "5", "--strategy", "while_in_flight", "--burst", "2"),
        ("set", "y", "--allocation", "5", "--strategy", "while_in_flight", "--duration", "1h"),
        ("create", "y", "--allocation", "0", "--strategy", "while_in_flight"),
        ("create", "y", "--allocation", "2147483648", "--strategy", "while_in_flight"),
        ("create", "y", "--allocation", "5", "--strategy", "leaky"),
        ("create", "y", "--strategy", "while_in_flight"),  # no --allocation
        ("create", "bad key", "--allocation", "5", "--strategy", "while_in_flight"),
        ("patch", "x"),  # nothing to patch
        ("patch", "x", "--burst", "none"),
        ("patch", "x", "--burst", "0"),
        ("get",),
        ("rename", "x"),
    ):
        proc = cli.run(*args)
        assert (proc.returncode, proc.stdout) == (2, ""), (args, proc.stderr)
        assert proc.stderr, args
    assert [b["key"] for b in cli.json("list")["budgets"]] == ["x"]
    assert cli.json("get", "x")["budget"]["allocation"] == 5


def test_a_refusal_of_the_daemon_exits_1(cli):
    cli.ok("create", "x", "--allocation", "5", "--strategy", "while_in_flight")
    # time_based needs a duration; the daemon says so for a patch.
    proc = cli.run("patch", "x", "--strategy", "time_based")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        "sluice: invalid_argument: strategy.duration_ms is required for time_based\n"
    )
    missing = cli.run("patch", "nope", "--allocation", "3")
    assert missing.returncode == 1
    assert missing.stderr == "sluice: not_found: budget 'nope' not found\n"
    assert cli.run("delete", "nope").returncode == 1


def test_the_table_shows_the_columns(cli):
    cli.ok("create", "flights", "--allocation", "10", "--strategy", "while_in_flight")
    cli.ok(
        "create", "images", "--allocation", "10000", "--strategy", "time_based",
        "--duration", "1h", "--burst", "500",
    )  # fmt: skip
    cli.ok("create", "slow", "--allocation", "10", "--strategy", "time_based", "--duration", "1h")
    # Raise the cap without new tokens: ~10 of 1000, so not full.
    out = cli.ok("patch", "slow", "--burst", "1000").splitlines()
    assert out[0] == "patched budget slow"
    assert re.fullmatch(HEADER, out[1])
    assert re.fullmatch(rf"slow\s+10\s+time_based 10/1h burst 1000\s+10\.00\s+0\s+0\s+{LOCAL_TIME}",
                        out[2])  # fmt: skip

    lines = cli.ok("list").splitlines()
    assert re.fullmatch(HEADER, lines[0]) and len(lines) == 4
    assert re.fullmatch(r"flights\s+10\s+while_in_flight\s+10\s+0\s+0\s+-", lines[1])
    assert re.fullmatch(
        r"images\s+10000\s+time_based 10000/1h burst 500\s+500\.00\s+0\s+0\s+full", lines[2]
    )
    row = re.fullmatch(
        rf"slow\s+10\s+time_based 10/1h burst 1000\s+(10\.\d\d)\s+0\s+0\s+({LOCAL_TIME})", lines[3]
    )
    assert row is not None, lines[3]
    # Columns line up under their headers.
    starts = [lines[0].index(h) for h in ("STRATEGY", "NEXT REFILL")]
    assert [lines[2].index("time_based"), lines[2].index("full")] == starts

    one = cli.ok("get", "flights").splitlines()
    assert re.fullmatch(HEADER, one[0]) and one[1].split()[:2] == ["flights", "10"]


# -- the table's math, in process ------------------------------------------------------


def _budget(
    allocation: int, available: float, duration_ms: int | None = None, burst: int | None = None
) -> dict[str, Any]:
    strategy: dict[str, Any] = {"type": "while_in_flight"}
    if duration_ms is not None:
        strategy = {"type": "time_based", "duration_ms": duration_ms}
        if burst is not None:
            strategy["burst"] = burst
    return {
        "key": "k",
        "allocation": allocation,
        "strategy": strategy,
        "created_at": 0,
        "updated_at": 0,
        "state": {"available": available, "in_flight": 0, "parked": 0, "next_refill_at": None},
    }


def test_next_refill_is_when_the_next_whole_token_arrives():
    now = 1_000_000
    # 10 per hour: a token every 360 s; from 2.5 tokens, half a token away.
    assert next_refill_ms(_budget(10, 2.5, 3_600_000), now) == now + 180_000
    # From a whole count, a whole token away.
    assert next_refill_ms(_budget(10, 3.0, 3_600_000), now) == now + 360_000
    assert next_refill_ms(_budget(10, 0.0, 3_600_000), now) == now + 360_000
    # Rounded up to the ms: 3 per second, a third of a token from empty.
    assert next_refill_ms(_budget(3, 0.0, 1000), now) == now + 334
    # Full at the cap: the burst when set, else the allocation.
    assert next_refill_ms(_budget(10, 10.0, 3_600_000), now) is None
    assert next_refill_ms(_budget(10, 4.0, 3_600_000, burst=4), now) is None
    assert next_refill_ms(_budget(10, 10.0, 3_600_000, burst=1000), now) == now + 360_000
    assert next_refill_ms(_budget(10, 3.0), now) is None  # while_in_flight


def test_render_formats_each_strategy():
    now = 1_700_000_000_000
    text = render(
        [
            _budget(10, 7.0),
            _budget(10000, 500.0, 3_600_000, burst=500),
            _budget(10, 2.5, 3_600_000, burst=1000),
        ],
        now,
    ).splitlines()
    assert re.fullmatch(HEADER, text[0])
    assert text[1].split() == ["k", "10", "while_in_flight", "7", "0", "0", "-"]
    assert text[2].split()[2:] == ["time_based", "10000/1h", "burst", "500", "500.00", "0", "0",
                                   "full"]  # fmt: skip
    at = datetime.fromtimestamp((now + 180_000) / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert text[3].split()[2:] == ["time_based", "10/1h", "burst", "1000", "2.50", "0", "0",
                                   *at.split()]  # fmt: skip
    assert describe_strategy(_budget(6, 6.0, 60_000)) == "time_based 6/1m"
    assert describe_strategy(_budget(6, 6.0, 1500)) == "time_based 6/1500ms"


@pytest.mark.parametrize(
    ("text", "ms"),
    [("500ms", 500), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000), ("7d", 604_800_000),
     ("90000", 90_000), ("1", 1)],
)  # fmt: skip
def test_duration_accepts_units_and_integer_ms(text, ms):
    assert duration(text) == ms


@pytest.mark.parametrize("text", ["0", "0s", "-1", "1.5h", "1y", "", "ms"])
def test_duration_rejects_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)
