"""Fairness groups end to end (issue 18): round robin on a real ``sluice serve``,
over the socket and HTTP, on both stores."""

from __future__ import annotations

import json
import time

import pytest

from daemon.cli.main import main as sluice_main
from tests.support import DaemonProcess, metric

pytestmark = pytest.mark.e2e


def test_round_robin_over_the_socket_and_http(daemon, connect):
    c = connect(daemon)
    with daemon.http() as http:
        r = http.put("/api/v1/admission/q", json={"fairness": "round_robin",
                                                   "weights": {"A": 2}})  # fmt: skip
        assert r.status_code == 200 and r.json()["policy"]["weights"] == {"A": 2}
        c.ok("enqueue_many", jobs=[{"queue": "q", "type": "t", "group": "A"}] * 20)
        c.ok("enqueue", queue="q", type="t", group="B")
        r = http.post("/jobs", json={"queue": "q", "type": "t", "group": "C"})
        assert r.status_code == 201 and r.json()["group"] == "C"
        r = http.post("/jobs", json={"jobs": [{"queue": "q", "type": "t", "group": "B"},
                                              {"queue": "q", "type": "t"}]})  # fmt: skip
        assert [x["job"]["group"] for x in r.json()["results"]] == ["B", None]
        bad = http.post("/jobs", json={"queue": "q", "type": "t", "group": ""})
        assert (bad.status_code, bad.json()["field"]) == (422, "group")

        got = []
        for i in range(8):  # alternately over the socket and over HTTP
            if i % 2:
                answer = http.post("/v1/ops/claim_next", json={"queues": ["q"]}).json()
            else:
                answer = c.ok("claim_next", queues=["q"])
            got += [j["job"]["group"] for j in answer["jobs"]]
        # A (weight 2) takes two turns in three while B, C and the default group
        # have work; every group is served within the first eight claims.
        assert set(got) == {"A", "B", "C", None} and got.count("A") == 4, got

        status = http.post("/v1/ops/admission_status", json={"queue": "q"}).json()
        groups = {g["group"]: g for g in status["queues"][0]["groups"]}
        assert (groups["A"]["pending"], groups["A"]["in_flight"], groups["A"]["weight"]) == (
            16,
            4,
            2,
        )
    assert metric(daemon.metrics(), "sluicegate_group_claims_total", queue="q", group="A") == 4


def test_the_cli_sets_group_fields_and_enqueues_with_a_group(daemon, connect, capsys,
                                                            monkeypatch):  # fmt: skip
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()

    def cli(*args: str) -> tuple[int, str, str]:
        status = sluice_main([*args, "--socket", str(daemon.socket)])
        out, err = capsys.readouterr()
        return status, out, err

    status, out, err = cli("queue", "budget", "set", "tiers", "--max-in-flight", "10",
                           "--fairness", "round_robin", "--weight", "gold=3",
                           "--min-in-flight", "gold=2", "--per-group", "5",
                           "--group-limit", "gold=8")  # fmt: skip
    assert (status, err) == (0, "")
    assert out == ("saved the policy of queue 'tiers': max_in_flight 10 · round robin (weights "
                   "gold=3; others 1) · 5 in flight per group · group limits gold=8 · "
                   "reserved gold=2\n")  # fmt: skip
    policy = connect(daemon).ok("policy_get", queue="tiers")["policy"]
    assert (policy["weights"], policy["min_in_flight"], policy["max_in_flight_per_group"]) == (
        {"gold": 3},
        {"gold": 2},
        5,
    )
    status, out, _err = cli("enqueue", "tiers", "t", "--group", "gold", "--json")
    assert status == 0 and json.loads(out)["job"]["group"] == "gold"
    # What the CLI refuses itself: exit 2, naming the option, nothing sent.
    for args, named in ((("--weight", "gold"), "--weight"),
                        (("--weight", "gold=0"), "--weight"),
                        (("--min-in-flight", "a=1", "--min-in-flight", "a=2"), "--min-in-flight"),
                        (("--per-group", "-1"), "--per-group"),
                        (("--fairness", "lifo"), "--fairness")):  # fmt: skip
        status, _out, err = cli("queue", "budget", "set", "tiers", *args)
        assert status == 2 and named in err, (args, err)
    assert cli("enqueue", "tiers", "t", "--group", "")[0] == 2
    # The daemon's refusal: reservations over max_in_flight, exit 1.
    status, _out, err = cli("queue", "budget", "set", "tiers", "--max-in-flight", "3",
                            "--min-in-flight", "gold=4")  # fmt: skip
    assert status == 1 and "invalid_argument" in err and "min_in_flight" in err
    monkeypatch.delenv("TZ")
    time.tzset()


@pytest.mark.postgres
def test_two_daemons_on_postgresql_share_groups_and_caps(tmp_path, pg_dsn, connect):
    """Several daemons on one database: a group enqueued through one is served
    in turn by the other, and a group's cap holds across both (in flight per
    group is read back at every reload)."""
    daemons = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        proc = DaemonProcess(tmp_path / name, f'database = "{pg_dsn}"\n', http=False)
        proc.start(timeout=30)
        daemons.append(proc)
    try:
        a, b = (connect(d) for d in daemons)
        a.ok("policy_set", queue="q", fairness="round_robin", max_in_flight_per_group=2)
        a.ok("enqueue_many", jobs=[{"queue": "q", "type": "t", "group": "x"}] * 5)
        b.ok("enqueue_many", jobs=[{"queue": "q", "type": "t", "group": "y"}] * 5)
        got_a = [j["job"]["group"] for j in a.ok("claim_next", queues=["q"], max=100)["jobs"]]
        got_b = [j["job"]["group"] for j in b.ok("claim_next", queues=["q"], max=100)["jobs"]]
        # Each daemon serves both groups; together never over a group's cap of 2.
        assert sorted(got_a + got_b) == ["x", "x", "y", "y"], (got_a, got_b)
        assert set(got_a) == {"x", "y"}
        assert b.ok("claim_next", queues=["q"])["deferred"][0]["reason"] == "group_in_flight_cap"
    finally:
        for proc in daemons:
            proc.cleanup()
