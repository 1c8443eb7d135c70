"""Operating several daemons on one PostgreSQL database (issue 15, Operations):
``/healthz`` names the database and whether it answers, never its password;
per-daemon metrics carry the ``daemon`` label: the leader role held by exactly
one of them, each one's pool, its LISTEN connection and the notices' lag.

The outage case (the database stopped under a daemon, ``/healthz`` 503, then
recovery) is in tests/e2e/test_postgres_outage.py: it needs a cluster of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support import DaemonProcess, metric, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SECRET = "s3cret-Pw-9Z"  # trust auth ignores it; nothing may show it


def _daemon(workdir: Path, dsn: str, name: str) -> DaemonProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    extra = f'database = "{dsn}"\nname = "{name}"\ndatabase_pool_size = 4\n'
    proc = DaemonProcess(workdir, extra)
    proc.start(timeout=30)
    return proc


@pytest.fixture
def pair(tmp_path, pg_dsn) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    dsn = pg_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")
    alpha = _daemon(tmp_path / "alpha", dsn, "alpha")
    beta = _daemon(tmp_path / "beta", dsn, "beta")
    try:
        yield alpha, beta
    finally:
        alpha.cleanup()
        beta.cleanup()


def test_healthz_names_the_database_and_never_its_password(pair, pg_dsn):
    alpha, _beta = pair
    parts = urlsplit(pg_dsn)
    with alpha.http() as http:
        r = http.get("/healthz")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok"
    database = r.json()["database"]
    assert database["store"] == "postgresql" and database["reachable"] is True
    assert database["name"] == parts.path.lstrip("/")
    if parts.hostname:  # the session's server on TCP (a throwaway cluster: a socket dir)
        assert database["host"] == f"{parts.hostname}:{parts.port}"
    assert SECRET not in r.text and "postgres@" not in r.text
    with alpha.client() as c:
        assert c.ok("status")["daemon"]["store"] == "postgresql"


def test_per_daemon_metrics_carry_the_daemon_label(pair):
    alpha, beta = pair

    def leaders() -> dict[str, float | None]:
        return {d: metric(p.metrics(), "sluicegate_leader", role="retention", daemon=d)
                for d, p in (("alpha", alpha), ("beta", beta))}  # fmt: skip

    # Each daemon has the gauge; once the first ticks are done, one holds the lease.
    wait_until(lambda: sum(v or 0 for v in leaders().values()) == 1,
               what="the retention lease taken")  # fmt: skip
    assert sorted(leaders().values()) == [0, 1]

    for name, daemon in (("alpha", alpha), ("beta", beta)):
        samples = daemon.metrics()
        assert metric(samples, "sluicegate_pg_pool_max_size", daemon=name) == 4
        size = metric(samples, "sluicegate_pg_pool_size", daemon=name)
        in_use = metric(samples, "sluicegate_pg_pool_in_use", daemon=name)
        assert size is not None and in_use is not None and 0 <= in_use <= size <= 4
        assert metric(samples, "sluicegate_notify_listening", daemon=name) == 1
        # Only this daemon's name: the label has one value per daemon.
        assert {dict(labels).get("daemon") for _n, labels in samples} - {None} == {name}

    # A job enqueued on alpha is announced to beta, which measures the notice's lag.
    with alpha.client() as c:
        c.ok("enqueue", queue="q", type="t", payload={})
    lag = wait_until(
        lambda: metric(beta.metrics(), "sluicegate_notify_lag_seconds_count", daemon="beta"),
        what="beta to hear alpha's notice",
    )
    assert lag >= 1
    assert metric(beta.metrics(), "sluicegate_notify_lag_seconds_sum", daemon="beta") >= 0
    for daemon in (alpha, beta):
        with daemon.http() as http:
            assert SECRET not in http.get("/metrics").text
        assert SECRET not in daemon.log_text()


def test_a_killed_leader_s_role_is_taken_before_its_lease_would_lapse(tmp_path, pg_dsn):
    """The retention role is a session advisory lock on PostgreSQL
    (daemon.store.pg_leader): ``kill -9`` of its holder closes the connection, the
    server releases the lock, and the other daemon takes the role at its next
    tick, before the lease row of the dead leader would have lapsed (three
    ticks): the row only says who leads."""
    extra = '[retention]\ninterval = "1s"\n'
    daemons = {}
    try:
        for name in ("alpha", "beta"):
            workdir = tmp_path / name
            workdir.mkdir()
            daemons[name] = DaemonProcess(
                workdir, f'database = "{pg_dsn}"\nname = "{name}"\n{extra}'
            )
            daemons[name].dsn = pg_dsn
            daemons[name].start(timeout=30)
        alpha = daemons["alpha"]

        def lease() -> tuple[str, int] | None:
            rows = alpha.sql("SELECT holder, expires_at FROM leader WHERE role = 'retention'")
            return (rows[0][0], rows[0][1]) if rows else None

        alive = dict(daemons)

        def leading() -> list[str]:
            gauge = "sluicegate_leader"
            return [n for n, d in alive.items()
                    if metric(d.metrics(), gauge, role="retention", daemon=n) == 1]  # fmt: skip

        wait_until(lambda: len(leading()) == 1 and lease() is not None, what="a leader")
        (leader,) = leading()
        follower = "beta" if leader == "alpha" else "alpha"
        holder, expires_at = lease()
        daemons[leader].kill()  # SIGKILL: no goodbye, its lease row stays
        del alive[leader]
        wait_until(lambda: lease() is not None and lease()[0] != holder, timeout=15,
                   what="the role taken over")  # fmt: skip
        _new, new_expires = lease()
        taken_at = new_expires - 3 * 1000  # the follower's renewal: its lease is three ticks
        assert taken_at < expires_at  # before the dead leader's lease lapsed
        wait_until(lambda: leading() == [follower], what="the follower leading")
    finally:
        for daemon in daemons.values():
            daemon.cleanup()
