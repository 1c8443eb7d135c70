"""``sluice serve`` on PostgreSQL (issue 15): a job's life, two daemons on one
database, a restart, and a password that never reaches the log."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import asyncpg
import pytest

from tests.support import DaemonProcess, token_tables, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _daemon(workdir: Path, dsn: str, extra: str = "", http: bool = False) -> DaemonProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    proc = DaemonProcess(workdir, f'database = "{dsn}"\n{extra}', http=http)
    proc.start(timeout=30)
    return proc


@pytest.fixture
def two_daemons(tmp_path, pg_dsn) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    a = _daemon(tmp_path / "a", pg_dsn)
    b = _daemon(tmp_path / "b", pg_dsn)
    try:
        yield a, b
    finally:
        a.cleanup()
        b.cleanup()


def test_a_job_life_on_postgresql(tmp_path, pg_dsn):
    daemon = _daemon(tmp_path, pg_dsn)
    try:
        _a_job_life(daemon)
    finally:
        daemon.cleanup()


def _a_job_life(daemon: DaemonProcess) -> None:
    with closing(daemon.client()) as c:
        job = c.ok("enqueue", queue="q", type="t", payload={"n": 1}, priority=7)["job"]
        assert job["status"] == "pending" and job["priority"] == 7
        claimed = c.ok("claim_next", queues=["q"])["jobs"][0]["job"]
        assert claimed["id"] == job["id"] and claimed["status"] == "running"
        assert claimed["attempts"] == 1
        assert c.ok("claim_next", queues=["q"])["empty"] is True
        beat = c.ok("heartbeat", job_id=job["id"], lease=claimed["lease"], lease_ms=600_000)
        assert beat["lease_expires_at"] > claimed["lease_expires_at"]
        done = c.ok("complete", job_id=job["id"], lease=claimed["lease"], result={"ok": 1})
        assert done["job"]["status"] == "completed" and done["job"]["result"] == {"ok": 1}
        # Reads outside a transaction (get, list, status) on the pool.
        assert c.ok("get", job_id=job["id"])["job"]["status"] == "completed"
        assert [j["id"] for j in c.ok("list", status="completed")["jobs"]] == [job["id"]]
        (row,) = c.ok("status")["queues"]
        assert row["completed"] == 1 and row["pending"] == 0
        again = c.error("complete", job_id=job["id"], lease=claimed["lease"])
        assert again["code"] == "lease_lost"


def test_two_daemons_share_the_queue_and_never_hand_out_a_job_twice(two_daemons):
    a, b = two_daemons
    with closing(a.client()) as ca, closing(b.client()) as cb:
        _share(ca, cb)


def _share(ca, cb) -> None:
    ids = {ca.ok("enqueue", queue="q", type="t", payload={"i": i})["job"]["id"] for i in range(30)}
    ids |= {cb.ok("enqueue", queue="q", type="t", payload={"i": i})["job"]["id"] for i in range(30)}
    claimed: list[str] = []
    for _ in range(40):  # alternate: each daemon claims from the one queue
        for client in (ca, cb):
            jobs = client.ok("claim_next", queues=["q"], max=2)["jobs"]
            claimed += [j["job"]["id"] for j in jobs]
    assert len(claimed) == len(set(claimed)) == 60
    assert set(claimed) == ids
    assert ca.ok("claim_next", queues=["q"])["empty"] is True


def test_jobs_survive_a_restart_and_are_seen_by_the_next_daemon(tmp_path, pg_dsn):
    first = _daemon(tmp_path / "first", pg_dsn)
    try:
        with closing(first.client()) as c:
            job = c.ok("enqueue", queue="q", type="t", payload={})["job"]
    finally:
        first.stop()
    second = _daemon(tmp_path / "second", pg_dsn)
    try:
        with closing(second.client()) as c:
            assert c.ok("get", job_id=job["id"])["job"]["status"] == "pending"
            assert c.ok("claim_next", queues=["q"])["jobs"][0]["job"]["id"] == job["id"]
    finally:
        second.cleanup()


def test_the_password_never_reaches_the_log(tmp_path, pg_dsn):
    secret = "s3cret-Pw-9Z"  # trust auth ignores it; the log must not show it
    dsn = pg_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@")
    daemon = _daemon(tmp_path, dsn)
    try:
        with closing(daemon.client()) as c:
            c.ok("enqueue", queue="q", type="t", payload={})
    finally:
        daemon.stop()
    log = daemon.log_text()
    assert secret not in log
    assert "postgres:***@" in log


def test_a_claim_waiting_on_one_daemon_answers_an_enqueue_on_another(tmp_path, pg_dsn):
    a = _daemon(tmp_path / "a", pg_dsn)
    b = _daemon(tmp_path / "b", pg_dsn, http=True)
    try:
        with a.client() as ca, b.client() as cb:
            req = cb.request("claim_next", queues=["q"], wait_ms=20_000)  # waits on B
            wait_until(lambda: b.waiting_claims() == 1, what="the claim waiting on B")
            started = time.monotonic()
            job = ca.ok("enqueue", queue="q", type="t", payload={})["job"]
            answer = cb.answer(req)
            waited = time.monotonic() - started
    finally:
        a.cleanup()
        b.cleanup()
    assert answer["ok"] and answer["jobs"][0]["job"]["id"] == job["id"]
    # Woken by A's notice (or the 1 s poll at worst), not by the end of its wait.
    assert waited < 10


def test_the_leases_of_a_daemon_killed_mid_job_are_reaped_by_another(two_daemons):
    a, b = two_daemons
    with a.client() as ca:
        job = ca.ok("enqueue", queue="q", type="t", payload={}, max_attempts=3)["job"]
        claimed = ca.ok("claim_next", queues=["q"], lease_ms=1000)["jobs"][0]["job"]
    assert claimed["id"] == job["id"]
    a.kill()  # kill -9: its lease is never released
    with b.client() as cb:
        # Nobody claims on B meanwhile: B's reaper alone must return the job.
        got = wait_until(
            lambda: cb.ok("get", job_id=job["id"])["job"]["status"] == "pending",
            timeout=20, interval=0.1, what="B's reaper to return the dead daemon's job",
        )  # fmt: skip
        assert got
        again = cb.ok("claim_next", queues=["q"])["jobs"][0]["job"]
    assert again["id"] == job["id"] and again["attempts"] == 2
    assert again["error"] == "lease expired"


def test_a_periodic_slot_fires_once_across_daemons(tmp_path, pg_dsn):
    """Both daemons run the same ``[[periodic]]`` entry; each slot's record is read
    under the cluster's epoch lock (daemon.admission.cluster), so a slot one
    daemon fired is a duplicate for the other: one job per slot."""
    entry = '[[periodic]]\nname = "tick"\nqueue = "ticks"\ntype = "t"\nevery = "1s"\n'
    a = _daemon(tmp_path / "a", pg_dsn, extra=entry)
    try:
        b = _daemon(tmp_path / "b", pg_dsn, extra=entry)
        try:
            a.dsn = pg_dsn
            slots = "SELECT ready_at, count(*) FROM jobs WHERE queue = 'ticks' GROUP BY ready_at"
            wait_until(lambda: len(a.sql(slots)) >= 4, timeout=30, what="four slots fired")
            assert all(n == 1 for _at, n in a.sql(slots)), a.sql(slots)
        finally:
            b.cleanup()
    finally:
        a.cleanup()


def test_a_burst_through_two_daemons_never_passes_more_than_the_namespace_limit(tmp_path, pg_dsn):
    """The door's request bucket is split over the live daemons (1/n each): the
    same burst sent through both admits at most the namespace's capacity."""
    quota = "[quotas.default]\nrequest_rate = { capacity = 20, refill_per_s = 0.01 }\n"
    a = _daemon(tmp_path / "a", pg_dsn, extra=quota, http=False)
    try:
        b = _daemon(tmp_path / "b", pg_dsn, extra=quota, http=False)
        try:
            with closing(a.client()) as ca, closing(b.client()) as cb:

                def shares() -> list[float]:  # asked as another namespace: no token spent
                    return [c.ok("status", namespace="probe")["daemon"]["cluster"]["door_share"]
                            for c in (ca, cb)]  # fmt: skip

                # Each counts the other within a heartbeat; the joiner holds none till then.
                wait_until(lambda: shares() == [0.5, 0.5], timeout=20, what="both at 1/2")
                allowed = {"a": 0, "b": 0}
                for _ in range(30):  # the same burst, alternately through each
                    for name, c in (("a", ca), ("b", cb)):
                        frame = c.call("queue_list")
                        if frame["ok"]:
                            allowed[name] += 1
                        else:
                            assert frame["error"]["code"] == "rate_limited", frame
                # 20 a namespace: 10 a daemon.
                assert allowed == {"a": 10, "b": 10}
        finally:
            b.cleanup()
    finally:
        a.cleanup()


def test_a_quota_written_through_one_daemon_binds_the_other(two_daemons):
    """Seed 000's two-second cache across daemons: a quota document written
    through A is read by B's settings watcher (every 2 s) and enforced there,
    with no restart and no signal (waited for, never timed)."""
    a, b = two_daemons
    with a.client() as ca, b.client() as cb:
        assert cb.ok("enqueue", queue="q", type="t", payload={})["job"]
        ca.ok("quota_set", quota={"max_pending": 1})

        def refused_on_b() -> bool:
            frame = cb.call("enqueue", queue="q", type="t", payload={})
            return not frame["ok"] and frame["error"]["code"] == "queue_full"

        assert wait_until(refused_on_b, timeout=10, interval=0.2, what="B enforcing A's quota")
        assert cb.ok("quota_get")["quota"]["max_pending"] == 1


@contextmanager
def _epoch_lock_held(dsn: str) -> Iterator[None]:
    """Another session holds the cluster's epoch row lock (as another daemon's long
    transaction would) until the block ends."""
    taken, release = threading.Event(), threading.Event()

    async def hold() -> None:
        conn = await asyncpg.connect(dsn, timeout=5)
        try:
            async with conn.transaction():
                await conn.execute("UPDATE cluster_epoch SET epoch = epoch + 1 WHERE id = 1")
                taken.set()
                await asyncio.to_thread(release.wait, 30)
        finally:
            await conn.close()

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    try:
        assert taken.wait(10), "the epoch lock was not taken"
        yield
    finally:
        release.set()
        holder.join(10)


def test_a_stop_during_a_transaction_lets_it_finish_and_exits(tmp_path, pg_dsn):
    """SIGTERM while a write transaction waits for the epoch lock: once the drain's
    grace is over the stop cancels the daemon's tasks, but not the transaction on
    the wire (cancelled there, asyncpg never gave its connection back and the
    daemon never exited). It commits once the lock is free, and the daemon exits 0."""
    daemon = _daemon(tmp_path, pg_dsn, extra='shutdown_grace = "100ms"\n')
    daemon.dsn = pg_dsn
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() " \
        "AND wait_event_type = 'Lock'"  # fmt: skip
    try:
        with closing(daemon.client()) as c:
            c.ok("status")  # serving: the schema is there (the socket is bound before)
            with _epoch_lock_held(pg_dsn):
                c.request("enqueue", queue="q", type="t", payload={})
                wait_until(lambda: daemon.sql(waiting)[0][0] == 1, what="the enqueue on the lock")
                daemon.proc.send_signal(signal.SIGTERM)
                # The grace is over when the daemon closes our connection; the stop goes on.
                assert c.read_until_closed(timeout=10) == []
                assert daemon.proc.poll() is None  # its transaction still waits for the lock
        assert daemon.proc.wait(15) == 0
    finally:
        daemon.cleanup()
    assert daemon.sql("SELECT count(*) FROM jobs WHERE queue = 'q'") == [(1,)]


def test_a_budget_bound_through_one_daemon_cannot_be_deleted_through_the_other(two_daemons):
    """B never saw the job bound: the delete's and the lowering's check read the
    store (daemon.admission.budget_gate, BudgetGate.bound)."""
    a, b = two_daemons
    with a.client() as ca, b.client() as cb:
        ca.ok("budget_create", key="gpu", allocation=4, strategy={"type": "while_in_flight"})
        ca.ok("enqueue", queue="q", type="t", budgets=[{"key": "gpu", "cost": 3}])
        refused = cb.error("budget_delete", key="gpu")
        assert (refused["code"], refused["status"]) == ("conflict", 409)
        assert "referenced by 1 unfinished job" in refused["message"]
        lowered = cb.error("budget_patch", key="gpu", allocation=2)
        assert (lowered["code"], lowered["field"]) == ("invalid_argument", "allocation")
        job = cb.ok("claim_next", queues=["q"])["jobs"][0]["job"]
        cb.ok("complete", job_id=job["id"], lease=job["lease"], answer="minimal")
        ca.ok("budget_delete", key="gpu")  # nothing bound any more: it goes
        # B reads the limits back at its next write (a membership heartbeat every
        # 2 s at the latest), and at once on A's notice (Doorbell.limits_changed).
        assert wait_until(lambda: cb.ok("budget_list")["budgets"] == [], timeout=5,
                          what="B to see the delete")  # fmt: skip


def test_each_role_is_held_by_one_daemon(two_daemons):
    """Retention and the roll-up are advisory-lock roles: one daemon each."""
    a, b = two_daemons

    def holders(role: str) -> int:
        line = f"this daemon now holds the {role} role"
        return sum(line in d.log_text() for d in (a, b))

    for role in ("retention", "rollup"):
        assert wait_until(lambda role=role: holders(role) >= 1, timeout=20, what=role)
        assert holders(role) == 1, role


def test_another_tenant_cannot_settle_a_job_through_the_other_daemon_in_share_mode(
    tmp_path, pg_dsn
):
    """Found by hand against share mode: a job claimed through daemon A is settled
    through daemon B (which never saw it: the store answers, in a share-mode
    transaction). Another namespace's token gets ``not_found`` for every verb
    that names it, and the owner's completions through B land, once."""
    tokens = token_tables(
        {"name": "a", "token": "tok-a-0123456789", "namespace": "A",
         "grants": ["produce", "consume"]},
        {"name": "b", "token": "tok-b-9876543210", "namespace": "B",
         "grants": ["produce", "consume"], "hashed": True},
    )  # fmt: skip
    da, db = _daemon(tmp_path / "a", pg_dsn, tokens), _daemon(tmp_path / "b", pg_dsn, tokens)
    try:
        with closing(da.client()) as a1, closing(db.client()) as a2, closing(db.client()) as b2:
            a1.ok("hello", token="tok-a-0123456789")
            a2.ok("hello", token="tok-a-0123456789")
            b2.ok("hello", token="tok-b-9876543210")
            for _ in range(2):  # the second, in share mode: the queue is known
                a1.ok("enqueue_many", jobs=[{"queue": "q", "type": "t"}] * 5)
            jobs = [j["job"] for j in a1.ok("claim_next", queues=["q"], max=5)["jobs"]]
            named = [{"job_id": j["id"], "lease": j["lease"]} for j in jobs]
            assert b2.ok("claim_next", queues=["q"], max=50)["jobs"] == []
            assert b2.error("complete", **named[0])["code"] == "not_found"
            assert b2.error("heartbeat", **named[0])["code"] == "not_found"
            results = b2.ok("complete_many", jobs=named)["results"]
            assert {r["error"]["code"] for r in results} == {"not_found"}
            assert a2.ok("get", job_id=jobs[0]["id"])["job"]["status"] == "running"
            results = a2.ok("complete_many", jobs=named)["results"]
            assert [r.get("state") for r in results] == ["completed"] * 5
            again = a2.ok("complete_many", jobs=named[:1] * 2)["results"]
            assert [r["error"]["code"] for r in again] == ["lease_lost", "lease_lost"]
            assert a2.ok("status")["daemon"]["cluster"]["shared"] > 0
    finally:
        da.cleanup()
        db.cleanup()
