"""``sluice budget ...``, run as a subprocess against a real daemon, and its table math."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from datetime import datetime
from typing import Any

import pytest

from daemon.cli.budget import describe_strategy, duration, instant, next_refill_ms, render, seconds
from daemon.cli.jobs import admission_text, bindings_text, budget_binding, costs_text
from daemon.cli.main import main
from daemon.cli.output import local_instant, local_time
from daemon.client import Client
from tests.support import sluice

HEADER = r"KEY\s+ALLOCATION\s+STRATEGY\s+AVAILABLE\s+IN FLIGHT\s+PARKED\s+NEXT REFILL\s+PAUSED"
LOCAL_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


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

    def sluice(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Any ``sluice args... --socket S`` (not only ``budget``)."""
        return sluice(*args, "--socket", self.socket)


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
    assert made["state"] == {"available": 500, "in_flight": 0, "parked": 0, "next_refill_at": None,
                             "paused_until": None, "pause_reason": None}  # fmt: skip

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
    assert set(budget["state"]) == {"available", "in_flight", "parked", "next_refill_at",
                                    "paused_until", "pause_reason"}  # fmt: skip
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


def test_set_reserve_group_tokens(cli):
    """Issue 18: ``--reserve GROUP=N`` (repeatable) on a while_in_flight budget."""
    wif = ("--allocation", "10", "--strategy", "while_in_flight")
    out = cli.ok("set", "llm", *wif, "--reserve", "gold=4", "--reserve", "silver=2")
    assert "while_in_flight reserve gold=4, silver=2" in out
    strategy = cli.json("get", "llm")["budget"]["strategy"]
    assert strategy == {"type": "while_in_flight", "reserve": {"gold": 4, "silver": 2}}
    over = cli.run("set", "llm", *wif, "--reserve", "gold=6", "--reserve", "silver=5")
    assert over.returncode == 1 and over.stderr == (
        "sluice: invalid_argument: strategy.reserve reserves 11 tokens in all, "
        "more than allocation 10\n"
    )
    for bad in (
        ("--allocation", "10", "--strategy", "time_based", "--duration", "1h", "--reserve", "g=1"),
        (*wif, "--reserve", "gold"),
        (*wif, "--reserve", "a=1", "--reserve", "a=2"),
    ):
        proc = cli.run("set", "llm", *bad)
        assert (proc.returncode, proc.stdout) == (2, ""), (bad, proc.stderr)


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
    slow = rf"slow\s+10\s+time_based 10/1h burst 1000\s+10\.00\s+0\s+0\s+{LOCAL_TIME}\s+-"
    assert re.fullmatch(slow, out[2])

    lines = cli.ok("list").splitlines()
    assert re.fullmatch(HEADER, lines[0]) and len(lines) == 4
    assert re.fullmatch(r"flights\s+10\s+while_in_flight\s+10\s+0\s+0\s+-\s+-", lines[1])
    assert re.fullmatch(
        r"images\s+10000\s+time_based 10000/1h burst 500\s+500\.00\s+0\s+0\s+full\s+-", lines[2]
    )
    row = re.fullmatch(
        rf"slow\s+10\s+time_based 10/1h burst 1000\s+(10\.\d\d)\s+0\s+0\s+({LOCAL_TIME})\s+-",
        lines[3],
    )
    assert row is not None, lines[3]
    # Columns line up under their headers.
    starts = [lines[0].index(h) for h in ("STRATEGY", "NEXT REFILL")]
    assert [lines[2].index("time_based"), lines[2].index("full")] == starts

    one = cli.ok("get", "flights").splitlines()
    assert re.fullmatch(HEADER, one[0]) and one[1].split()[:2] == ["flights", "10"]


# -- jobs bound to budgets: enqueue --budget, parked jobs in jobs list/show -----------


def test_enqueue_binds_the_job_to_every_budget_given(cli):
    cli.ok("create", "images", "--allocation", "10", "--strategy", "while_in_flight")
    cli.ok("create", "tenant:a", "--allocation", "10", "--strategy", "while_in_flight")
    proc = cli.sluice("enqueue", "q", "t", "--budget", "images", "--budget", "tenant:a:3", "--json")
    job = json.loads(proc.stdout)["job"]
    assert job["budgets"] == [{"key": "images", "cost": 1}, {"key": "tenant:a", "cost": 3}]
    human = cli.sluice("enqueue", "q", "t", "--budget", "images:2")
    assert human.returncode == 0, human.stderr
    assert re.fullmatch(r"enqueued job \S+ on q \(pending, budgets images:2\)\n", human.stdout)
    shown = cli.sluice("jobs", "show", job["id"]).stdout
    assert re.search(r"^budgets\s+images, tenant:a:3$", shown, re.M)
    assert re.search(r"^admission\s+admitted$", shown, re.M)  # nothing holds it back yet


def test_a_bad_budget_option_is_a_usage_error_naming_it(cli, capsys):
    for bad, why in (
        (":3", "the budget KEY is missing"),
        ("k:0", "COST must be from 1 to 2147483647, got 0"),
        ("k:x", "COST after the last ':' must be a whole number, got 'x'"),
        ("k:", "COST after the last ':' must be a whole number, got ''"),
        ("k:2147483648", "COST must be from 1 to 2147483647"),
        ("a b", "bad budget key 'a b'"),
    ):
        status = main(["enqueue", "q", "t", "--budget", bad, "--socket", cli.socket])
        out, err = capsys.readouterr()
        assert (status, out) == (2, ""), bad
        assert "sluice enqueue: error: argument --budget: " in err and why in err, (bad, err)
    with Client(cli.socket) as client:  # nothing reached the daemon
        assert client.status()["queues"] == []


def test_the_daemon_refusing_a_binding_exits_1_with_its_message(cli):
    cli.ok("create", "one", "--allocation", "1", "--strategy", "while_in_flight")
    unknown = cli.sluice("enqueue", "q", "t", "--budget", "nope")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.startswith("sluice: invalid_argument: ") and "'nope'" in unknown.stderr
    costly = cli.sluice("enqueue", "q", "t", "--budget", "one:5", "--json")
    assert costly.returncode == 1 and costly.stdout == ""
    assert costly.stderr.startswith("sluice: invalid_argument: ") and "'one'" in costly.stderr
    assert costly.stderr.count("\n") == 1


def test_a_parked_job_says_why_and_when_in_jobs_list_and_show(cli):
    cli.ok("create", "hourly", "--allocation", "1", "--strategy", "time_based", "--duration", "1h")
    cli.ok("create", "slots", "--allocation", "1", "--strategy", "while_in_flight")
    with Client(cli.socket) as client:
        jobs = [
            r["job"]["id"]
            for r in client.enqueue_many(
                [{"queue": "q", "type": "t", "budgets": [{"key": key}]}
                 for key in ("hourly", "hourly", "slots", "slots")]
            )
        ]  # fmt: skip
        claimed = client.claim_next(["q"], max=10)  # one of each runs, the others park
        assert len(claimed) == 2
        parked = {j: client.get(j)["admission"] for j in (jobs[1], jobs[3])}
    drip, slot = parked[jobs[1]], parked[jobs[3]]
    assert (drip["budget"], drip["exact"], slot["budget"]) == ("hourly", True, "slots")

    listing = cli.sluice("jobs", "list", "--queue", "q")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert re.fullmatch(
        r"ID\s+QUEUE\s+TYPE\s+STATUS\s+ATTEMPTS\s+PRIORITY\s+READY\s+ADMISSION\s+ERROR", lines[0]
    )
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "deferred" not in rows[jobs[0]] and "running" in rows[jobs[0]]
    eligible = local_time(drip["next_eligible_at"])
    assert rows[jobs[1]].split("  ")[-1] == (
        f"deferred: budget_exhausted on hourly, eligible {eligible}"
    )
    # while_in_flight: a slot frees when a running job ends; the instant is an estimate (~).
    want = "deferred: budget_exhausted on slots, eligible "
    want += (
        f"~{local_time(slot['next_eligible_at'])}" if slot["next_eligible_at"] else ": not known"
    )
    assert rows[jobs[3]].endswith(want)
    assert re.search(r"\bpending\b", rows[jobs[1]]) and re.search(r"\bpending\b", rows[jobs[3]])

    shown = cli.sluice("jobs", "show", jobs[1]).stdout
    assert re.search(
        rf"^admission\s+deferred: budget_exhausted on hourly, eligible {STAMP}$", shown, re.M
    )
    assert local_instant(drip["next_eligible_at"]) in shown
    assert json.loads(cli.sluice("jobs", "show", jobs[1], "--json").stdout)["job"]["admission"] == {
        **drip,
        "state": "deferred",
        "reason": "budget_exhausted",
    }

    # The budgets' table counts them: in flight, parked, and when the drip refills.
    doc = cli.json("get", "hourly")["budget"]
    row = cli.ok("get", "hourly").splitlines()[1]
    assert re.fullmatch(
        rf"hourly\s+1\s+time_based 1/1h\s+0\.\d\d\s+1\s+1\s+{LOCAL_TIME}\s+-", row
    ), row
    assert row.removesuffix("-").rstrip().endswith(local_time(doc["state"]["next_refill_at"]))
    assert re.fullmatch(r"slots\s+1\s+while_in_flight\s+0\s+1\s+1\s+-\s+-",
                        cli.ok("get", "slots").splitlines()[1])  # fmt: skip


def test_pause_and_resume_a_budget(cli):
    cli.ok("create", "openai", "--allocation", "5", "--strategy", "while_in_flight")
    before = int(time.time() * 1000)  # the daemon's wall clock is the host's here
    out = cli.ok("pause", "openai", "--retry-after", "600", "--reason", "429 upstream")
    assert out.splitlines()[0] == "paused budget openai"
    assert out.splitlines()[2].endswith("(429 upstream)")
    state = cli.json("get", "openai")["budget"]["state"]
    assert before + 600_000 <= state["paused_until"] and state["pause_reason"] == "429 upstream"
    shorter = cli.json("pause", "openai", "--until", str(before + 1_000))["budget"]["state"]
    assert shorter["paused_until"] == state["paused_until"]  # never shortened
    assert cli.sluice("enqueue", "q", "t", "--budget", "openai").returncode == 0
    claimed = json.loads(cli.sluice("jobs", "list", "--json").stdout)["jobs"][0]
    assert claimed["admission"]["reason"] == "budget_paused"
    assert cli.ok("resume", "openai").splitlines()[0] == "resumed budget openai"
    assert cli.json("get", "openai")["budget"]["state"]["paused_until"] is None
    both = cli.run("pause", "openai", "--retry-after", "5", "--until", "1")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    neither = cli.run("pause", "openai")
    assert neither.returncode == 2
    ghost = cli.run("pause", "ghost", "--retry-after", "5")
    assert ghost.returncode == 1 and "not_found" in ghost.stderr


# -- the table's math, in process ------------------------------------------------------


def _budget(
    allocation: int,
    available: float,
    duration_ms: int | None = None,
    burst: int | None = None,
    **state: Any,
) -> dict[str, Any]:
    """A budget object; ``state`` adds fields such as the daemon's ``next_refill_at``."""
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
        "state": {"available": available, "in_flight": 0, "parked": 0, **state},
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


def test_render_shows_a_pause_with_its_reason():
    now = 1_700_000_000_000
    paused = _budget(10, 7.0, paused_until=now + 30_000, pause_reason="429 from upstream")
    row = render([paused], now).splitlines()[1]
    assert row.endswith(f"{local_time(now + 30_000)} (429 from upstream)")


@pytest.mark.parametrize(
    ("text", "ms"),
    [("1700000000000", 1_700_000_000_000), ("2023-11-14T22:13:20Z", 1_700_000_000_000),
     ("2023-11-14T23:13:20+01:00", 1_700_000_000_000)],
)  # fmt: skip
def test_pause_until_reads_ms_and_iso_instants(text, ms):
    assert instant(text) == ms


@pytest.mark.parametrize("text", ["2023-11-14T22:13:20", "soon", "-5"])
def test_pause_until_refuses_a_zoneless_or_unreadable_instant(text):
    with pytest.raises(argparse.ArgumentTypeError):
        instant(text)


@pytest.mark.parametrize(("text", "value"), [("30", 30), ("2.5", 2.5)])
def test_retry_after_reads_seconds(text, value):
    assert seconds(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "x"])
def test_retry_after_refuses_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError):
        seconds(text)


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
    assert text[1].split() == ["k", "10", "while_in_flight", "7", "0", "0", "-", "-"]
    assert text[2].split()[2:] == ["time_based", "10000/1h", "burst", "500", "500.00", "0", "0",
                                   "full", "-"]  # fmt: skip
    at = datetime.fromtimestamp((now + 180_000) / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert text[3].split()[2:] == ["time_based", "10/1h", "burst", "1000", "2.50", "0", "0",
                                   *at.split(), "-"]  # fmt: skip
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


def test_the_daemons_next_refill_at_is_shown_when_it_sends_one():
    now = 1_700_000_000_000
    at = now + 12_345
    [_, drip, full, slots] = render(
        [
            _budget(6, 2.5, 60_000, next_refill_at=at),
            _budget(6, 6.0, 60_000, next_refill_at=None),
            _budget(4, 1.0, next_refill_at=None),
        ],
        now,
    ).splitlines()
    assert drip.split()[-3:] == [*local_time(at).split(), "-"]
    assert full.split()[-2:] == ["full", "-"] and slots.split()[-2:] == ["-", "-"]
    assert describe_strategy(_budget(6, 1.0, 60_000, burst=1)) == "time_based 6/1m burst 1"


@pytest.mark.parametrize(
    ("text", "binding"),
    [("images", {"key": "images"}), ("images:3", {"key": "images", "cost": 3}),
     ("tenant:a:1", {"key": "tenant:a", "cost": 1}), ("a.b-c_d", {"key": "a.b-c_d"})],
)  # fmt: skip
def test_budget_binding_reads_key_and_cost(text, binding):
    assert budget_binding(text) == binding


@pytest.mark.parametrize("text", [":3", "k:0", "k:x", "k:", "k:-1", "", "a b", "k:1.5"])
def test_budget_binding_rejects_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError):
        budget_binding(text)


def test_admission_and_bindings_text():
    assert admission_text(None, local_time) == ""
    assert admission_text({"state": "admitted", "reason": None}, local_time) == ""
    at = 1_700_000_000_000
    exact = {"state": "deferred", "reason": "budget_exhausted", "budget": "b",
             "next_eligible_at": at, "exact": True}  # fmt: skip
    assert admission_text(exact, local_time) == (
        f"deferred: budget_exhausted on b, eligible {local_time(at)}"
    )
    assert admission_text({**exact, "exact": False}, local_instant) == (
        f"deferred: budget_exhausted on b, eligible ~{local_instant(at)}"
    )
    paused = {"state": "deferred", "reason": "paused", "next_eligible_at": None, "exact": False}
    assert admission_text(paused, local_time) == "deferred: paused, eligible: not known"
    assert bindings_text([{"key": "a", "cost": 1}, {"key": "b", "cost": 4}]) == "a, b:4"
    held = {**exact, "reason": "budget_paused", "pause_reason": "429 upstream"}
    assert admission_text(held, local_time) == (
        f"deferred: budget_paused on b (429 upstream), eligible {local_time(at)}"
    )
    costs = [{"key": "a", "reserved": 10, "settled": 2.5}, {"key": "b", "reserved": 1,
                                                            "settled": None}]  # fmt: skip
    assert costs_text(costs) == "a 10 settled 2.5, b 1"
