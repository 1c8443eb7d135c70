"""Failpoints (daemon/failpoints.py): the variable's format, and nothing armed when unset."""

from __future__ import annotations

import pytest

from daemon import failpoints


def test_unset_arms_nothing():
    assert failpoints._parse("") == ({}, frozenset())


def test_exit_at_the_first_or_the_nth_hit_and_broken_modes():
    exits, broken = failpoints._parse(
        "commit_before=exit, retention_mid_batch=exit@3,ack_before_commit=on"
    )
    assert exits == {"commit_before": 1, "retention_mid_batch": 3}
    assert broken == {"ack_before_commit"}


@pytest.mark.parametrize(
    "text",
    ["nope=exit", "commit_before", "commit_before=crash", "commit_before=exit@0",
     "commit_before=exit@x", "ack_before_commit=exit"],
)  # fmt: skip
def test_a_typo_is_refused_rather_than_arming_nothing(text):
    with pytest.raises(ValueError, match="SLUICEGATE_FAILPOINTS"):
        failpoints._parse(text)


def test_a_hit_of_an_unarmed_point_returns(monkeypatch):
    monkeypatch.setattr(failpoints, "_EXITS", {"commit_before": 2})
    monkeypatch.setattr(failpoints, "_hits", {})
    exited: list[int] = []
    monkeypatch.setattr(failpoints.os, "_exit", exited.append)
    failpoints.hit("retention_mid_batch")
    failpoints.hit("commit_before")
    assert exited == []
    failpoints.hit("commit_before")
    assert exited == [failpoints.EXIT_STATUS]
