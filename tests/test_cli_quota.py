"""``sluice quota``: what the CLI refuses itself (exit 2), and the listing it prints."""

from __future__ import annotations

import pytest

from daemon.cli.main import main
from daemon.cli.quota import render

NO_SOCKET = ("--socket", "/nonexistent/sluicegate.sock")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--max-pending", "-1"), "--max-pending"),
        (("--max-running", "1.5"), "--max-running"),
        (("--max-dead-rows", "lots"), "--max-dead-rows"),
        (("--max-archived-rows", str(2**63)), "--max-archived-rows"),
        (("--enqueue-rate", "0/s"), "--enqueue-rate"),
        (("--enqueue-rate", "500/d"), "--enqueue-rate"),
        (("--enqueue-rate", "500"), "--enqueue-rate"),
        (("--enqueue-rate", "-1/s"), "--enqueue-rate"),
        (("--on-excess", "shed"), "--on-excess"),
        (("--namespace", "bad name", "--max-pending", "1"), "--namespace"),
        (("--request-rate", "100"), "--request-rate"),
        (("--request-rate", "100,-1"), "--request-rate"),
        (("--message-rate", "x,1"), "--message-rate"),
        (("--message-rate", "1,nan"), "--message-rate"),
        (("--monthly-jobs-quota", "-5"), "--monthly-jobs-quota"),
        (("--retained-release-band", "1.5"), "--retained-release-band"),
    ],
)
def test_a_value_the_cli_can_reject_exits_2_naming_the_option(capsys, args, option):
    # Refused before connecting: the socket does not exist.
    assert main(["quota", "set", *args, *NO_SOCKET]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"argument {option}:" in err


def test_set_without_a_limit_exits_2_rather_than_wipe_the_document(capsys):
    assert main(["quota", "set", *NO_SOCKET]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("sluice: quota set: give at least one of --max-pending")
    assert "sluice quota clear" in err


def test_a_missing_subcommand_or_namespace_value_exits_2(capsys):
    assert main(["quota", *NO_SOCKET]) == 2
    assert main(["quota", "get", "--namespace", *NO_SOCKET]) == 2
    capsys.readouterr()


def test_no_daemon_exits_1(capsys):
    assert main(["quota", "get", *NO_SOCKET]) == 1
    assert "cannot connect to /nonexistent/sluicegate.sock" in capsys.readouterr().err


def test_render_lists_every_seed_field_and_the_door_limits():
    doc = {"max_pending": 0, "on_excess": "reject", "request_rate": {"capacity": 5,
           "refill_per_s": 1.0}, "max_item_bytes": 65536}  # fmt: skip
    assert render({"quota": doc, "source": "config"}, "billing").splitlines() == [
        "namespace          billing",
        "source             config",
        "max_pending        0",
        "on_excess          reject",
        "enqueue_rate       unlimited",
        "max_running        unlimited",
        "max_archived_rows  unlimited",
        "max_dead_rows      unlimited",
        'request_rate       {"capacity":5,"refill_per_s":1.0}',
        "max_item_bytes     65536",
    ]


def test_render_without_a_document_and_with_one_that_does_not_decode():
    assert render({"quota": None, "source": None}) == "no quota: every limit is unlimited"
    assert render({"quota": None, "source": None}, "x") == (
        "namespace  x\nno quota: every limit is unlimited"
    )
    broken = render({"quota": None, "source": "api", "error": "not JSON: oops"})
    lines = broken.splitlines()
    assert lines[:2] == ["source  api", "error   not JSON: oops"]
    assert "fails closed" in lines[2]
