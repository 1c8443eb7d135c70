"""Stacked windows end to end (issue 18, part 4) on a real ``sluice serve``, on
both stores: the config file's ``windows``, the socket, HTTP and the CLI.

Real time runs here, so the windows that fill are days (a minute window next
to one never fills: two claims are under its cap whichever minute they land in).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from daemon.cli.main import main as sluice_main
from tests.support import RawClient

pytestmark = pytest.mark.e2e

PROVISIONED = """
[policies.default.celery]
windows = [
  { max_claims = 10, period = "second", tz = "UTC" },
  { max_claims = 100000, period = "day", tz = "America/New_York" },
]
"""
STACKED = [{"max_claims": 5, "period": "minute", "tz": "UTC", "start": "00:00"},
           {"max_claims": 2, "period": "day", "tz": "UTC", "start": "00:00"}]  # fmt: skip
DAY = {"period": "day", "tz": "UTC"}


def next_utc_midnight() -> int:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return int((today + timedelta(days=1)).timestamp() * 1000)


def fill(c: RawClient, queue: str, n: int) -> list[str]:
    jobs = [{"queue": queue, "type": "t"} for _ in range(n)]
    return [r["job"]["id"] for r in c.ok("enqueue_many", jobs=jobs)["results"]]


def test_stacked_windows_on_the_socket_over_http_and_in_the_cli(
    make_daemon, connect, capsys, monkeypatch
):
    daemon = make_daemon(PROVISIONED)
    c = connect(daemon)
    # The config file's windows, read back in that form.
    provisioned = c.ok("policy_get", queue="celery")["policy"]
    assert [(w["max_claims"], w["period"], w["tz"]) for w in provisioned["windows"]] == [
        (10, "second", "UTC"), (100000, "day", "America/New_York")]  # fmt: skip
    assert provisioned["source"] == "config" and "max_claims_per_window" not in provisioned

    # The socket: two claims fill the day; the deferral names it.
    assert c.ok("policy_set", queue="lane", windows=STACKED)["policy"]["windows"] == STACKED
    ids = fill(c, "lane", 3)
    got = c.ok("claim_next", queues=["lane"], max=5)
    assert len(got["jobs"]) == 2
    admission = got["jobs"][-1]["admission"]
    assert [(w["period"], w["used"]) for w in admission["windows"]] == [("minute", 2), ("day", 2)]
    midnight = next_utc_midnight()
    (held,) = c.ok("claim_next", queues=["lane"])["deferred"]
    assert (held["reason"], held["window"], held["exact"]) == ("window_exhausted", DAY, True)
    assert held["next_eligible_at"] in (midnight, midnight + 86_400_000)  # a run across midnight
    err = c.error("claim", job_id=ids[2])
    assert (err["code"], err["window"]) == ("deferred", DAY)

    # HTTP: the same policy through the admission routes; the same deferral.
    with daemon.http() as http:
        r = http.put("/api/v1/admission/web", json={"max_in_flight": 4, "windows": STACKED})
        assert r.status_code == 200 and r.json()["policy"]["windows"] == STACKED
        assert http.get("/api/v1/admission/web").json()["policy"]["windows"] == STACKED
        both = {"windows": STACKED, "max_claims_per_window": 3}
        r = http.put("/api/v1/admission/web", json=both)
        assert (r.status_code, r.json()["field"]) == (422, "windows")
        r = http.post("/v1/ops/claim_next", json={"queues": ["lane"]})
        assert r.json()["deferred"][0]["window"] == DAY
        r = http.post("/v1/ops/claim", json={"job_id": ids[2]})
        assert (r.status_code, r.json()["window"]) == (409, DAY)

    # The CLI: --window, repeatable; show lists every window.
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()

    def cli(*args: str) -> tuple[int, str, str]:
        status = sluice_main([*args, "--socket", str(daemon.socket)])
        out, err = capsys.readouterr()
        return status, out, err

    status, out, err = cli("queue", "budget", "set", "api", "--window", "10/s",
                           "--window", "100000/day@America/New_York")  # fmt: skip
    assert (status, err) == (0, "")
    assert out == ("saved the policy of queue 'api': windows 10/s@UTC · "
                   "100000/day@America/New_York\n")  # fmt: skip
    status, out, _err = cli("queue", "budget", "show", "lane")
    # The minute may have rolled since the claims (real time): 2 of 5, or 0 of 5.
    usage = r"usage    [02] of 5 this minute · 2 of 2 this day \(resets 00:00 UTC\) · 2 in flight"
    assert re.search(usage, out), out
    assert "status   deferred, day window exhausted until 00:00 UTC · 1 pending held back" in out
    for args, named in (
        (("--window", "10/fortnight"), "fortnight"),
        (("--window", "ten/s"), "N/PERIOD"),
        (("--window", "5/day@Mars/Olympus"), "Mars/Olympus"),
        (("--window", "5/s", "--max-claims-per-window", "3"), "--max-claims-per-window"),
    ):  # fmt: skip
        status, out, err = cli("queue", "budget", "set", "x", *args)
        assert (status, out) == (2, "") and named in err, (args, err)
    status, _out, err = cli("queue", "budget", "set", "x", "--window", "5/s", "--window", "6/s")
    assert status == 1 and "invalid_argument" in err and "repeats the period" in err
    monkeypatch.delenv("TZ")
    time.tzset()
