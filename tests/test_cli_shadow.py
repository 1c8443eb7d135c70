"""``--shadow`` / ``--enforce`` on the commands that set limits: what each sends."""

from __future__ import annotations

import pytest

from daemon.cli.budget import patch_of
from daemon.cli.main import build_parser, main
from daemon.cli.queue import describe, policy_of
from daemon.cli.quota import document_of, render


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_each_limit_command_sends_enforce_only_when_asked():
    assert document_of(parse("quota", "set", "--max-pending", "3", "--shadow")) == {
        "max_pending": 3, "enforce": False}  # fmt: skip
    assert "enforce" not in document_of(parse("quota", "set", "--max-pending", "3"))
    policy = policy_of(parse("queue", "budget", "set", "q", "--max-in-flight", "2", "--shadow"))
    assert policy == {"max_in_flight": 2, "enforce": False}
    assert patch_of(parse("budget", "patch", "b", "--enforce")) == {"enforce": True}
    assert patch_of(parse("budget", "patch", "b", "--shadow")) == {"enforce": False}
    made = parse("budget", "create", "b", "--allocation", "1", "--strategy", "while_in_flight",
                 "--shadow")  # fmt: skip
    assert made.enforce is False


def test_shadow_and_enforce_together_exit_2(capsys):
    assert main(["budget", "patch", "b", "--shadow", "--enforce"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_shadowed_limit_says_so():
    assert describe({"max_in_flight": 2, "enforce": False}).endswith("shadow - not enforced")
    shown = render({"quota": {"max_pending": 3, "enforce": False}, "source": "api"})
    assert "enforce            false (shadow - not enforced)" in shown


@pytest.mark.parametrize("command", [("quota", "set"), ("queue", "budget", "set"),
                                     ("budget", "set"), ("budget", "patch")])  # fmt: skip
def test_help_names_both_options(capsys, command):
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--shadow" in out and "--enforce" in out
