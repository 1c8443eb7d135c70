"""Fairness groups end to end (issue 18): round robin on a real ``sluice serve``,
over the socket and HTTP, on both stores."""

from __future__ import annotations

import pytest

from tests.support import metric

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
