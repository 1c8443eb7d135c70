"""The store interface's contract (daemon/store/interface.py), one suite for every store.

Each test speaks only the interface: rows are :class:`JobRow`, writes run in a
transaction handed out by the store's :class:`Committer`, time is passed in.
The ``store`` fixture is parametrized over the implementations: file-backed
SQLite today; PostgreSQL (issue 15) joins the list and must pass unchanged.
Instants are tested at the horizon and one millisecond either side.

Illegal transitions (the table in actors/lifecycle.py) raise
:class:`IllegalTransition` and change nothing, whichever door they come through:
claim, heartbeat, complete, fail, release, reap, fold, replay, promote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from actors import lifecycle as lc
from actors.errors import Refused
from actors.lifecycle import IllegalTransition
from daemon.store.database import GroupCommit
from daemon.store.interface import (
    AuditStore,
    BudgetStore,
    JobRow,
    JobStore,
    PolicyStore,
    QueueStore,
    RetentionStore,
    SettingsStore,
    StaleRow,
    Store,
    UsageStore,
)
from daemon.store.opening import open_database
from daemon.store.postgres import PgConnection
from tests.postgres_thread import PostgresThread

T = 1_700_000_000_000  # the horizon of each test
LEASE_MS = 30_000


class Harness:
    """One implementation: its store, and a way to run a write at an instant."""

    def __init__(self, store: Store, run: Callable[[Callable[[Any], Any], int], Any]) -> None:
        self.store = store
        self._run = run

    def write(self, fn: Callable[[Any], Any], now: int = T) -> Any:
        """``fn(tx)`` in one transaction at ``now``; its result after commit."""
        return self._run(fn, now)

    def job(self, job_id: str) -> JobRow:
        row = self.store.jobs.get("ns", job_id)
        assert row is not None
        return row


def _runner(clock: list[int], execute: Callable[[Callable[[Any], Any]], Any]):
    """``run(fn, now)``: ``fn(tx)`` in one transaction at ``now``, through
    ``execute`` (the committer's ``run_now``, where the store lives). A bug in
    ``fn`` is raised as itself, not as the ``internal`` the committer answers."""

    def run(fn, now):
        clock[0] = now
        raised: list[BaseException] = []

        def write(tx):
            try:
                return fn(tx)
            except BaseException as exc:
                raised.append(exc)
                raise

        try:
            return execute(write)
        except Refused:
            if raised:
                raise raised[0] from None
            raise

    return run


def _sqlite(tmp_path) -> Iterator[Harness]:
    db = open_database(tmp_path / "contract.sqlite")
    clock = [T]
    committer = GroupCommit(db.conn, lambda: clock[0])
    try:
        yield Harness(committer.store, _runner(clock, committer.run_now))
    finally:
        db.close()


class _Remote:
    """One part of a store whose calls run on the PostgreSQL thread, bridged."""

    def __init__(self, part: Any, call: Callable[..., Any]) -> None:
        self._part = part
        self._call = call

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._part, name)
        return lambda *args, **kwargs: self._call(partial(method, *args, **kwargs))


class _RemoteStore:
    def __init__(self, store: Store, call: Callable[..., Any]) -> None:
        for part in ("jobs", "queues", "budgets", "policies", "settings", "audit", "usage",
                     "retention"):  # fmt: skip
            setattr(self, part, _Remote(getattr(store, part), call))


def _postgres(dsn: str) -> Iterator[Harness]:
    """The store on a fresh PostgreSQL database (``pg_dsn``), served by a Trio thread
    with trio-asyncio (as in the daemon); the test's calls cross into it."""
    with PostgresThread(dsn) as pg:
        clock = [T]
        committer = GroupCommit(PgConnection(), lambda: clock[0])
        run = _runner(clock, lambda write: pg.call(partial(committer.run_now, write)))
        yield Harness(_RemoteStore(committer.store, pg.call), run)  # type: ignore[arg-type]


@pytest.fixture(params=[
    "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])  # fmt: skip
def store(request, tmp_path) -> Iterator[Harness]:
    if request.param == "postgres":
        yield from _postgres(request.getfixturevalue("pg_dsn"))
    else:
        yield from _sqlite(tmp_path)


def _job(job_id: str, state: str = lc.PENDING, **fields: Any) -> JobRow:
    values: dict[str, Any] = {
        "id": job_id, "namespace": "ns", "queue": "q", "type": "t", "payload": "{}",
        "priority": 0, "state": state, "attempts": 0, "max_attempts": 3, "lease_ms": LEASE_MS,
        "ready_at": T, "created_at": T, "updated_at": T, "finished_at": None, "lease": None,
        "lease_expires_at": None, "unique_key": None, "budgets": None, "error": None,
        "result": None, "dead": None, "parked_on": None,
    }  # fmt: skip
    values.update(fields)
    return JobRow(**values)


def _insert(h: Harness, *rows: JobRow) -> None:
    h.write(lambda tx: tx.store.jobs.insert(list(rows)))


def _keys(rows: list[JobRow]) -> list[tuple[str, str]]:
    return [(row.namespace, row.queue) for row in rows]


def _claim(h: Harness, limit: int = 10, now: int = T, lease: str = "L") -> list[JobRow]:
    def write(tx):
        return tx.store.jobs.mark_running(
            tx.store.jobs.ready("ns", ["q"], limit), lease, None, tx.now_ms
        )

    return h.write(write, now)


def _unchanged(h: Harness, rows: list[JobRow], attempt: Callable[[Any], Any], now: int = T):
    """``attempt`` raises IllegalTransition, and every row in ``rows`` reads as before."""

    def write(tx):
        attempt(tx)

    with pytest.raises(IllegalTransition):
        h.write(write, now)
    assert [h.job(r.id) for r in rows] == rows


# -- the interface ------------------------------------------------------------------


def test_every_part_implements_its_protocol(store):
    s = store.store
    parts = {
        "jobs": JobStore, "queues": QueueStore, "budgets": BudgetStore, "policies": PolicyStore,
        "settings": SettingsStore, "audit": AuditStore, "usage": UsageStore,
        "retention": RetentionStore,
    }  # fmt: skip
    for name, protocol in parts.items():
        assert isinstance(getattr(s, name), protocol), name


# -- insert and read -------------------------------------------------------------------


def test_insert_then_get_gives_the_same_row_back(store):
    plain = _job("a")
    full = _job("b", lc.DEAD, unique_key="k", budgets='[{"key":"b","cost":1}]', error="e",
                result='"r"', dead='{"at":1}', finished_at=T)  # fmt: skip
    _insert(store, plain, full)
    assert store.job("a") == plain
    assert store.job("b") == full
    assert isinstance(store.job("a"), JobRow)
    assert store.store.jobs.get("other", "a") is None  # another namespace: absent
    assert store.store.jobs.get("ns", "missing") is None


def test_find_live_unique_sees_only_live_jobs(store):
    _insert(store, _job("dead", lc.DEAD, unique_key="k"), _job("live", unique_key="k2"))
    jobs = store.store.jobs
    assert jobs.find_live_unique("ns", "q", "k") is None
    assert jobs.find_live_unique("ns", "q", "k2") == store.job("live")


# -- promote at the horizon ----------------------------------------------------------


def test_promote_moves_scheduled_jobs_at_ready_at_not_a_millisecond_before(store):
    _insert(store, _job("s", lc.SCHEDULED, ready_at=T + 1))
    assert store.store.jobs.earliest_scheduled() == T + 1
    assert store.write(lambda tx: tx.store.jobs.promote_due(tx.now_ms), T) == []
    assert store.job("s").state == lc.SCHEDULED
    promoted = store.write(lambda tx: _keys(tx.store.jobs.promote_due(tx.now_ms)), T + 1)
    assert promoted == [("ns", "q")]
    assert store.job("s").state == lc.PENDING
    assert store.job("s").updated_at == T + 1
    assert store.write(lambda tx: tx.store.jobs.promote_due(tx.now_ms), T + 2) == []
    assert store.store.jobs.earliest_scheduled() is None


def test_promote_moves_only_what_the_table_allows(store):
    # Due by ready_at, but not scheduled: promote never touches them.
    others = [_job("p", ready_at=T - 1), _job("d", lc.DEAD, ready_at=T - 1),
              _job("c", lc.COMPLETED, ready_at=T - 1)]  # fmt: skip
    _insert(store, *others)
    assert store.write(lambda tx: tx.store.jobs.promote_due(tx.now_ms), T + 1) == []
    assert [store.job(r.id) for r in others] == others


# -- claim ---------------------------------------------------------------------------


def test_claim_takes_pending_jobs_in_priority_ready_at_id_order(store):
    _insert(store, _job("c", ready_at=T - 1), _job("b", priority=-1), _job("a"),
            _job("s", lc.SCHEDULED, ready_at=T + 1),
            _job("parked", parked_on="budget"))  # fmt: skip
    claimed = _claim(store, now=T + 1)
    assert [r.id for r in claimed] == ["b", "c", "a"]
    for row in claimed:
        assert row == store.job(row.id)
        assert (row.state, row.attempts, row.lease) == (lc.RUNNING, 1, "L")
        assert row.lease_expires_at == T + 1 + LEASE_MS
        assert row.updated_at == T + 1


def test_claim_respects_limit_and_caps(store):
    _insert(store, *[_job(f"j{i}") for i in range(5)])
    assert [r.id for r in store.write(lambda tx: tx.store.jobs.ready("ns", ["q"], 3))] == [
        "j0", "j1", "j2",
    ]  # fmt: skip
    capped = store.write(lambda tx: tx.store.jobs.ready("ns", ["q"], 3, {"q": 1}))
    assert [r.id for r in capped] == ["j0"]


def test_a_lease_ms_given_at_claim_overrides_the_jobs_own(store):
    _insert(store, _job("a"))

    def write(tx):
        return tx.store.jobs.mark_running(tx.store.jobs.ready("ns", ["q"], 1), "L", 5, tx.now_ms)

    (row,) = store.write(write)
    assert row.lease_expires_at == T + 5 == store.job("a").lease_expires_at


@pytest.mark.parametrize("state", [lc.SCHEDULED, lc.RUNNING, lc.COMPLETED, lc.DEAD])
def test_claiming_a_job_that_is_not_pending_is_illegal(store, state):
    row = _job("x", state, lease="old" if state == lc.RUNNING else None)
    fine = _job("fine")
    _insert(store, row, fine)

    def claim(tx):
        tx.store.jobs.mark_running([fine, row], "L", None, tx.now_ms)

    _unchanged(store, [row, fine], claim)


# -- heartbeat -------------------------------------------------------------------------


def test_heartbeat_extends_a_running_lease(store):
    _insert(store, _job("a"))
    (row,) = _claim(store)
    after = store.write(lambda tx: tx.store.jobs.extend_lease(row, T + 99, T + 1), T + 1)
    assert after == store.job("a")
    assert (after.lease_expires_at, after.updated_at, after.state) == (T + 99, T + 1, lc.RUNNING)


def test_heartbeat_under_a_lease_that_moved_on_is_stale_and_changes_nothing(store):
    _insert(store, _job("a"))
    (row,) = _claim(store)
    stale = row._replace(lease="other")
    with pytest.raises(StaleRow):
        store.write(lambda tx: tx.store.jobs.extend_lease(stale, T + 99, T + 1))
    assert store.job("a") == row


@pytest.mark.parametrize("state", [lc.SCHEDULED, lc.PENDING, lc.COMPLETED, lc.DEAD])
def test_heartbeat_of_a_job_that_is_not_running_is_illegal(store, state):
    row = _job("x", state)
    _insert(store, row)
    _unchanged(store, [row], lambda tx: tx.store.jobs.extend_lease(row, T + 99, tx.now_ms))


# -- finish: complete, fail, release -------------------------------------------------


def test_complete_finishes_a_running_job(store):
    _insert(store, _job("a"))
    (row,) = _claim(store)

    def write(tx):
        return tx.store.jobs.finish(row, event="complete", state=lc.COMPLETED, now=T + 1,
                                    result='"ok"')  # fmt: skip

    after = store.write(write, T + 1)
    assert after == store.job("a")
    assert (after.state, after.finished_at, after.lease, after.result) == (
        lc.COMPLETED, T + 1, None, '"ok"',
    )  # fmt: skip


def test_a_completion_may_replace_the_bindings_with_their_settled_costs(store):
    _insert(store, _job("a", budgets='[{"key":"llm","cost":10}]'))
    (row,) = _claim(store)
    settled = '[{"key":"llm","cost":10,"settled":2.5}]'

    def write(tx):
        return tx.store.jobs.finish(row, event="complete", state=lc.COMPLETED, now=T + 1,
                                    budgets=settled)  # fmt: skip

    after = store.write(write, T + 1)
    assert after == store.job("a") and after.budgets == settled


def test_fail_and_release_send_a_running_job_back_to_wait(store):
    _insert(store, _job("a"), _job("b"))
    a, b = _claim(store)

    def fail(tx):
        return tx.store.jobs.finish(a, event="fail", state=lc.SCHEDULED, now=T, ready_at=T + 1,
                                    error="boom")  # fmt: skip

    def release(tx):
        return tx.store.jobs.finish(b, event="release", state=lc.PENDING, now=T, attempts_delta=-1)

    failed, released = store.write(fail), store.write(release)
    assert (failed.state, failed.ready_at, failed.error, failed.attempts) == (
        lc.SCHEDULED, T + 1, "boom", 1,
    )  # fmt: skip
    assert (released.state, released.attempts, released.lease) == (lc.PENDING, 0, None)
    assert [store.job("a"), store.job("b")] == [failed, released]


def test_complete_under_a_stale_lease_changes_nothing(store):
    _insert(store, _job("a"))
    (row,) = _claim(store)
    stale = row._replace(lease="other")
    with pytest.raises(StaleRow):
        store.write(lambda tx: tx.store.jobs.finish(stale, event="complete",
                                                    state=lc.COMPLETED, now=T))  # fmt: skip
    assert store.job("a") == row


@pytest.mark.parametrize(
    ("event", "target"),
    [("complete", lc.DEAD), ("complete", lc.PENDING), ("fail", lc.COMPLETED),
     ("release", lc.DEAD), ("reap", lc.COMPLETED), ("teleport", lc.PENDING)],
)  # fmt: skip
def test_finishing_to_a_target_the_table_does_not_allow_is_illegal(store, event, target):
    _insert(store, _job("a"))
    (row,) = _claim(store)
    _unchanged(store, [row],
               lambda tx: tx.store.jobs.finish(row, event=event, state=target, now=T))  # fmt: skip


@pytest.mark.parametrize("state", [lc.SCHEDULED, lc.PENDING, lc.COMPLETED, lc.DEAD])
@pytest.mark.parametrize("event", ["complete", "fail", "release", "reap"])
def test_finishing_a_job_that_is_not_running_is_illegal(store, state, event):
    row = _job("x", state, lease="L")
    _insert(store, row)
    target = lc.COMPLETED if event == "complete" else lc.PENDING
    _unchanged(store, [row],
               lambda tx: tx.store.jobs.finish(row, event=event, state=target, now=T))  # fmt: skip


def test_complete_many_is_all_or_nothing(store):
    _insert(store, _job("a"), _job("b"), _job("c"))
    a, b, c = _claim(store)
    stale = b._replace(lease="other")
    jobs = store.store.jobs
    both = [(a, None), (stale, None)]
    assert store.write(lambda tx: tx.store.jobs.complete_many(both, T)) is None
    assert [jobs.get("ns", i) for i in "ab"] == [a, b]
    done = store.write(lambda tx: tx.store.jobs.complete_many([(a, None), (b, '"r"')], T + 1))
    assert done == [store.job("a"), store.job("b")]
    assert {r.state for r in done} == {lc.COMPLETED}
    assert store.job("b").result == '"r"'
    # c is running; a is completed now: completing both is illegal, nothing moves.
    completed = store.job("a")
    again = [(c, None), (completed, None)]
    _unchanged(store, [completed, c], lambda tx: tx.store.jobs.complete_many(again, T + 2))


def test_complete_many_of_one_claim_is_all_or_nothing(store):
    """One lease, one result (PostgreSQL's one-statement batch): a job finished
    meanwhile, or one named twice, and nothing of the batch moves."""
    _insert(store, _job("a"), _job("b"), _job("c"))
    a, b, c = _claim(store)
    assert a.lease == b.lease == c.lease
    store.write(lambda tx: tx.store.jobs.complete_many([(b, None)], T))  # b is done
    for batch in ([(a, None), (b, None), (c, None)], [(a, None), (a, None)]):
        assert (
            store.write(lambda tx, batch=batch: tx.store.jobs.complete_many(batch, T + 1)) is None
        )
        assert [store.job(i) for i in "ac"] == [a, c]
    done = store.write(lambda tx: tx.store.jobs.complete_many([(a, None), (c, None)], T + 2))
    assert [r.id for r in done] == ["a", "c"] and {r.state for r in done} == {lc.COMPLETED}
    assert [store.job(i).state for i in "ac"] == [lc.COMPLETED, lc.COMPLETED]


# -- reap at the horizon ---------------------------------------------------------------


def test_a_lease_lapses_at_its_expiry_not_a_millisecond_before(store):
    _insert(store, _job("a"))
    (row,) = _claim(store)
    expiry = T + LEASE_MS
    assert store.store.jobs.earliest_lease_expiry() == expiry
    assert store.write(lambda tx: tx.store.jobs.lapsed(tx.now_ms), expiry - 1) == []
    assert store.write(lambda tx: tx.store.jobs.lapsed(tx.now_ms), expiry) == [row]
    assert store.write(lambda tx: tx.store.jobs.lapsed(tx.now_ms), expiry + 1) == [row]

    def reap(tx):
        return tx.store.jobs.finish(row, event="reap", state=lc.PENDING, now=tx.now_ms)

    reaped = store.write(reap, expiry)
    assert (reaped.state, reaped.lease, reaped.lease_expires_at) == (lc.PENDING, None, None)
    assert store.write(lambda tx: tx.store.jobs.lapsed(tx.now_ms), expiry + 1) == []
    assert store.store.jobs.earliest_lease_expiry() is None


# -- park and release ------------------------------------------------------------------


def test_a_parked_job_leaves_the_ready_index_until_released(store):
    _insert(store, _job("a"), _job("b"), _job("c"))
    jobs = store.store.jobs
    store.write(lambda tx: tx.store.jobs.park([("budget", "a"), ("budget", "b")]))
    assert [r.id for r in store.write(lambda tx: tx.store.jobs.ready("ns", ["q"], 10))] == ["c"]
    assert jobs.parked_counts() == [("ns", "q", "budget", 2)]
    assert [r[0] for r in jobs.parked_oldest("ns", "budget", 1)] == ["a"]
    assert store.job("a").state == lc.PENDING  # parked is not a state
    store.write(lambda tx: tx.store.jobs.unpark(["a"]))
    assert [r.id for r in store.write(lambda tx: tx.store.jobs.ready("ns", ["q"], 10))] == [
        "a", "c",
    ]  # fmt: skip
    assert jobs.parked_counts() == [("ns", "q", "budget", 1)]


def test_unfinished_bound_groups_name_each_jobs_group_and_parking(store):
    """Issue 18: what a budget's reservations are counted from (by id; "" for no group)."""
    bound = '[{"key": "llm", "cost": 2}]'
    _insert(store, _job("a", budgets=bound, grp="gold"), _job("b", budgets=bound),
            _job("c", lc.COMPLETED, budgets=bound), _job("d"),
            _job("e", lc.SCHEDULED, budgets=bound, grp="x"))  # fmt: skip
    store.write(lambda tx: tx.store.jobs.park([("llm", "a")]))
    assert store.store.jobs.unfinished_bound_groups() == [
        ("a", "ns", "q", lc.PENDING, "gold", "llm", bound),
        ("b", "ns", "q", lc.PENDING, "", None, bound),
        ("e", "ns", "q", lc.SCHEDULED, "x", None, bound),
    ]


# -- fold and replay -------------------------------------------------------------------


def test_fold_reschedules_a_waiting_job_and_unparks_it(store):
    _insert(store, _job("a", parked_on="budget"))
    after = store.write(lambda tx: tx.store.jobs.fold(store.job("a"), '{"n":2}', T + 5, T + 1))
    assert after == store.job("a")
    assert (after.state, after.payload, after.ready_at, after.parked_on) == (
        lc.SCHEDULED, '{"n":2}', T + 5, None,
    )  # fmt: skip


@pytest.mark.parametrize("state", [lc.RUNNING, lc.COMPLETED, lc.DEAD])
def test_folding_a_job_that_is_not_waiting_is_illegal(store, state):
    row = _job("x", state)
    _insert(store, row)
    _unchanged(store, [row], lambda tx: tx.store.jobs.fold(row, "{}", T + 5, T))


def test_replay_brings_a_dead_letter_back(store):
    dead = _job("d", lc.DEAD, attempts=3, error="e", dead='{"at":1}', finished_at=T - 1)
    _insert(store, dead)
    after = store.write(lambda tx: tx.store.jobs.replay(dead, T + 1), T + 1)
    assert after == store.job("d")
    assert (after.state, after.attempts, after.error, after.dead, after.ready_at) == (
        lc.PENDING, 0, None, None, T + 1,
    )  # fmt: skip


@pytest.mark.parametrize("state", [lc.SCHEDULED, lc.PENDING, lc.RUNNING, lc.COMPLETED])
def test_replaying_a_job_that_is_not_dead_is_illegal(store, state):
    row = _job("x", state)
    _insert(store, row)
    _unchanged(store, [row], lambda tx: tx.store.jobs.replay(row, T))


# -- reads -----------------------------------------------------------------------------


def test_counts_listing_and_dead_ids(store):
    _insert(store, _job("a"), _job("b", lc.DEAD), _job("c", lc.DEAD, queue="r"))
    jobs = store.store.jobs
    assert sorted(jobs.state_counts()) == [
        ("ns", "q", lc.DEAD, 1), ("ns", "q", lc.PENDING, 1), ("ns", "r", lc.DEAD, 1),
    ]  # fmt: skip
    listed = jobs.list_jobs("ns", queue=None, state=None, after=None, limit=10)
    assert [r.id for r in listed] == ["a", "b", "c"]
    assert all(isinstance(r, JobRow) for r in listed)
    assert jobs.dead_ids("ns", None, None, 10) == ["b", "c"]
    assert jobs.dead_ids("ns", "r", None, 10) == ["c"]
    assert jobs.dead_ids("ns", None, "b", 10) == ["c"]


def test_bound_counts_the_unfinished_jobs_of_one_budget_by_cost(store):
    gpu3 = '[{"key":"gpu","cost":3}]'
    both = '[{"key":"cpu","cost":2},{"key":"gpu","cost":1}]'
    _insert(
        store,
        _job("a", budgets=gpu3),
        _job("b", lc.SCHEDULED, budgets=gpu3, ready_at=T + 60_000),
        _job("c", budgets=both),
        _job("d", lc.COMPLETED, budgets=gpu3, finished_at=T),  # finished: not bound
        _job("e", budgets=gpu3, namespace="other"),  # another namespace's budget
        _job("f"),  # unbound
    )
    _claim(store, limit=1)  # "a" runs: still bound
    bound = store.write(lambda tx: tx.store.budgets.bound("ns", "gpu"))
    assert bound == {3: 2, 1: 1}
    assert store.write(lambda tx: tx.store.budgets.bound("ns", "cpu")) == {2: 1}
    assert store.write(lambda tx: tx.store.budgets.bound("ns", "none")) == {}
    queues = store.write(lambda tx: tx.store.budgets.bound_queues("ns", "gpu"))
    assert queues == {"q"}
    assert store.write(lambda tx: tx.store.budgets.bound_queues("ns", "none")) == set()


def test_the_limit_state_is_read_back_whole_in_one_statement(store):
    """What a daemon reads back after another wrote (daemon.admission.cluster):
    the same values on both stores, through each one's JSON functions."""
    empty = store.write(lambda tx: tx.store.epoch.limits())
    assert (empty.running, empty.budgets, empty.rates, empty.policies) == ([], [], [], [])
    _insert(store, _job("a"), _job("b"), _job("c", parked_on="gpu", budgets='[{"key":"gpu"}]'))
    _claim(store, limit=2)
    policy = ("ns", "q", '{"max_in_flight":3}', T, T + 1, "alice", None, "api")

    def write(tx):
        tx.store.budgets.save(
            "ns", "gpu", allocation=5, strategy={"type": "while_in_flight"}, created_at=T,
            updated_at=T, units=2**40, as_of_ms=T, in_flight=2, source="config",
            enforce=False,
        )  # fmt: skip
        tx.store.policies.save(policy)
        tx.store.policies.charge("ns", "q", "day", T - 2000, 9)  # a third row: not read
        tx.store.policies.charge("ns", "q", "day", T - 1000, 4)
        tx.store.policies.charge("ns", "q", "day", T, 7)
        # Stacked windows: a second's row at the day's start is its own row.
        tx.store.policies.charge("ns", "q", "second", T, 2)
        tx.store.policies.charge("ns", "q", "second", T + 1000, 1)
        tx.store.epoch.save_rate("ns", (10, T, 0), T)
        return tx.store.epoch.limits()

    state = store.write(write)
    assert state.running == [("ns", "q", 2)]
    ((budget, parked),) = state.budgets
    assert parked is True and (budget.namespace, budget.key, budget.source) == (
        "ns",
        "gpu",
        "config",
    )
    assert (budget.pool.spec.allocation, budget.pool.in_flight) == (5, 2)
    # Shadow mode travels with the budget (schema 11), on both stores.
    assert budget.spec.enforce is False
    assert store.write(lambda tx: tx.store.budgets.load_all())[0].spec.enforce is False
    assert budget.pool.raw() == store.write(lambda tx: tx.store.budgets.load_all())[0].pool.raw()
    assert state.rates == [("ns", (10, T, 0))]
    # Each window's two latest rows (a daemon a moment behind reads the one before).
    assert state.policies == [(policy, {"day": {T: 7, T - 1000: 4}, "second": {T + 1000: 1, T: 2}})]


def test_ahead_counts_claimable_jobs_before_one_in_claim_order_up_to_a_limit(store):
    _insert(store, _job("a", priority=5), _job("b", priority=1, ready_at=T + 9),
            _job("c", priority=1, ready_at=T), _job("d", priority=1, ready_at=T),
            _job("p", priority=0, parked_on="gpu"), _job("s", lc.SCHEDULED, priority=0),
            _job("o", priority=0, queue="other"))  # fmt: skip
    ahead = {r: store.write(lambda tx, r=r: tx.store.jobs.ahead(store.job(r), 100))
             for r in "abcd"}  # fmt: skip
    # Claim order is c, d, b, a; parked, scheduled and other queues' jobs do not count.
    assert ahead == {"c": 0, "d": 1, "b": 2, "a": 3}
    assert store.write(lambda tx: tx.store.jobs.ahead(store.job("a"), 2)) == 2
