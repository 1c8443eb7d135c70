"""Namespace quotas (seed 000) through the real core on MockClock: every rule and
scenario of the seed, with its exact texts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio
import trio.testing

from actors.errors import Refused
from actors.quota import Quota, Rate, parse_quota
from daemon.config import Config, parse_config
from daemon.core import Core
from daemon.store import settings as settings_sql
from tests.unit.harness import call, running_core


async def set_quota(core: Core, namespace: str = "default", **doc: Any) -> None:
    await call(core, "quota_set", namespace=namespace, quota=doc)


async def enqueue(core: Core, n: int = 1, queue: str = "q", namespace: str = "default",
                  **extra: Any) -> list[dict[str, Any]]:  # fmt: skip
    jobs = [{"queue": queue, "type": "t", **extra} for _ in range(n)]
    out = await call(core, "enqueue_many", namespace=namespace, jobs=jobs)
    return out["results"]


async def refused(coro: Any) -> Refused:
    with pytest.raises(Refused) as info:
        await coro
    return info.value


def job_count(core: Core) -> int:
    return core.conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


# -- the document ------------------------------------------------------------------


def test_the_document_every_field_optional_zero_real_negative_refused():
    assert parse_quota({}) == Quota()
    doc = {"max_pending": 10000, "on_excess": "drop", "enqueue_rate": "500/s",
           "max_running": 50, "max_archived_rows": 1000000, "max_dead_rows": 50000}  # fmt: skip
    quota = parse_quota(doc)
    assert quota.enqueue_rate == Rate(500, "s")
    assert quota.to_dict() == doc
    assert parse_quota({"max_pending": 0}).max_pending == 0  # zero is a real limit
    for field in ("max_pending", "max_running", "max_archived_rows", "max_dead_rows"):
        with pytest.raises(Refused) as info:
            parse_quota({field: -1})
        assert (info.value.code, info.value.details["field"]) == ("invalid_argument", field)


@pytest.mark.parametrize("rate", ["0/s", "5/d", "5", "/s", "5/ s", "-1/s", "1.5/s", 5])
def test_a_bad_enqueue_rate_is_refused_naming_the_field(rate):
    with pytest.raises(Refused) as info:
        parse_quota({"enqueue_rate": rate})
    assert info.value.details["field"] == "enqueue_rate"


@pytest.mark.parametrize(
    ("doc", "field"),
    [({"on_excess": "ignore"}, "on_excess"), ({"max_pending": "10"}, "max_pending"),
     ({"max_pending": True}, "max_pending"), ({"bogus": 1}, "bogus"),
     ({"request_rate": {"capacity": 1}}, "request_rate")],
)  # fmt: skip
async def test_a_refused_document_stores_nothing(tmp_path, autojump_clock, doc, field):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=5)
        error = await refused(call(core, "quota_set", quota=doc))
        assert (error.code, error.details["field"]) == ("invalid_argument", field)
        assert (await call(core, "quota_get"))["quota"] == {"max_pending": 5, "on_excess": "reject"}


async def test_the_settings_keys_and_the_reserved_prefix(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=1)
        await set_quota(core, namespace="billing", max_running=2)
        keys = [k for k, _v in settings_sql.quotas(core.conn)]
        assert keys == ["quota:default", "quota:ns:7:billing"]
        assert settings_sql.list_public(core.conn) == []  # quota: is hidden
        assert settings_sql.namespace_of("quota:ns:7:billing") == "billing"
        assert settings_sql.namespace_of("quota:ns:3:billing") is None


async def test_writes_are_audited_with_target_kind_namespace(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, namespace="billing", max_pending=1)
        await call(core, "quota_clear", namespace="billing")
        rows = core.conn.execute(
            "SELECT actor, namespace, target_kind, target, action, before, after FROM audit "
            "ORDER BY id"
        ).fetchall()
        assert rows == [
            ("open", "billing", "namespace", "billing", "set", "null",
             '{"max_pending":1,"on_excess":"reject"}'),
            ("open", "billing", "namespace", "billing", "clear",
             '{"max_pending":1,"on_excess":"reject"}', "null"),
        ]  # fmt: skip


# -- depth and rate ------------------------------------------------------------------


async def test_depth_refusal_texts(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=3)
        await enqueue(core, 2)
        over = await refused(enqueue(core, 2, queue="images"))
        assert over.message == "queue 'images' is full: 2 pending + 2 new > max_pending 3"
        assert (over.code, over.status) == ("queue_full", 429)
        assert over.details == {"reason": "QUEUE_FULL", "limit": "max_pending", "value": 4,
                                "max": 3}  # fmt: skip
        await enqueue(core, 1, delay_ms=60_000)  # a delayed job counts too
        at_cap = await refused(enqueue(core, 1, queue="images"))
        assert at_cap.message == "queue 'images' is full: 3 pending >= max_pending 3"
        assert job_count(core) == 3


async def test_a_batch_never_half_lands(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=10)
        await refused(enqueue(core, 11))
        assert job_count(core) == 0
        await enqueue(core, 10)
        assert job_count(core) == 10


async def test_rate_refusal_text_retry_after_and_refill(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, enqueue_rate="2/s")
        await enqueue(core, 2)
        limited = await refused(enqueue(core, 1))
        assert limited.message == "rate limit exceeded for: namespace 'default' enqueue_rate 2/s"
        assert (limited.code, limited.status) == ("rate_limited", 429)
        assert limited.details == {"reason": "RATE_LIMITED", "limit": "enqueue_rate",
                                   "retry_after": 1}  # fmt: skip
        await trio.sleep(0.5)  # virtual time: autojump_clock; half a second drips one job
        await enqueue(core, 1)
        await refused(enqueue(core, 1))
        assert job_count(core) == 3


async def test_depth_is_checked_first_and_spends_no_rate_tokens(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=1, enqueue_rate="1/h")
        await refused(enqueue(core, 2))  # over depth: the hour's one token is kept
        await enqueue(core, 1)
        assert (await refused(enqueue(core, 1))).code == "queue_full"


async def test_a_duplicate_is_still_refused_while_over_quota(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        [first] = await enqueue(core, 1, unique_key="u")
        await set_quota(core, max_pending=1)
        again = await refused(enqueue(core, 1, unique_key="u"))
        assert again.code == "queue_full"
        await call(core, "quota_clear")
        [dup] = await enqueue(core, 1, unique_key="u")
        assert dup["duplicate"] and dup["job"]["id"] == first["job"]["id"]


async def test_concurrent_producers_in_one_group_commit_never_overshoot(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=25)
        outcomes: list[str] = []

        async def produce() -> None:
            try:
                await enqueue(core, 3)
                outcomes.append("ok")
            except Refused as exc:
                outcomes.append(exc.code)

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(produce)
        assert core.writer.commits < 20  # they shared transactions
        assert outcomes.count("ok") == 8 and job_count(core) == 24


# -- drop ---------------------------------------------------------------------------------


async def test_drop_writes_the_over_quota_jobs_dead_as_shed(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=2, on_excess="drop")
        results = await enqueue(core, 3, unique_key=None)
        assert [r["shed"] for r in results] == [False, False, True]
        shed = results[2]["job"]
        assert shed["status"] == "dead"
        assert shed["error"].startswith("quota:")
        assert shed["dead"]["shed"] == "quota" and shed["dead"]["reason"] == "shed"
        # Never live: no worker sees it.
        got = await call(core, "claim_next", queues=["q"], max=10)
        assert shed["id"] not in [j["job"]["id"] for j in got["jobs"]]
        status = (await call(core, "status"))["queues"][0]
        assert (status["pending"], status["running"], status["dead"]) == (0, 2, 1)


async def test_a_shed_job_holds_no_unique_key(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_pending=0, on_excess="drop")
        [shed] = await enqueue(core, 1, unique_key="k")
        assert shed["shed"] and shed["job"]["unique_key"] is None
        await call(core, "quota_clear")
        [live] = await enqueue(core, 1, unique_key="k")
        assert not live["duplicate"] and live["job"]["status"] == "pending"


async def test_drop_on_rate_sheds_what_the_bucket_cannot_pay(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, enqueue_rate="3/m", on_excess="drop")
        results = await enqueue(core, 5)
        assert [r["shed"] for r in results] == [False] * 3 + [True] * 2
        assert "enqueue_rate 3/m" in results[4]["job"]["error"]
        sample = core.metrics.registry.get_sample_value
        assert sample("sluicegate_jobs_shed_total",
                      {"namespace": "default", "limit": "enqueue_rate"}) == 2  # fmt: skip


async def test_a_replay_goes_through_admission(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        [job] = await enqueue(core, 1)
        [claimed] = (await call(core, "claim_next", queues=["q"]))["jobs"]
        await call(core, "fail", job_id=job["job"]["id"], lease=claimed["job"]["lease"],
                   error="x", dead=True)  # fmt: skip
        await enqueue(core, 1)
        await set_quota(core, max_pending=1)
        over = await refused(call(core, "dead_replay", job_ids=[job["job"]["id"]]))
        assert over.code == "queue_full"
        assert (await call(core, "get", job_id=job["job"]["id"]))["job"]["status"] == "dead"


# -- dispatch: max_running ------------------------------------------------------------------


async def test_max_running_caps_claims_without_spending_attempts(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_running=2)
        results = await enqueue(core, 5)
        got = (await call(core, "claim_next", queues=["q"], max=10))["jobs"]
        assert len(got) == 2
        empty = await call(core, "claim_next", queues=["q"], max=10)
        assert empty["jobs"] == [] and empty["deferred"] == [{
            "queue": "q", "reason": "running_full", "pending": 3,
            "next_eligible_at": got[0]["job"]["lease_expires_at"], "exact": False,
        }]  # fmt: skip
        held = (await call(core, "get", job_id=results[4]["job"]["id"]))["job"]
        assert held["attempts"] == 0
        assert held["admission"]["reason"] == "running_full"
        by_id = await refused(call(core, "claim", job_id=results[4]["job"]["id"]))
        assert (by_id.code, by_id.details["reason"]) == ("deferred", "running_full")


async def test_a_freed_slot_wakes_a_waiting_claim(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await set_quota(core, max_running=1)
        await enqueue(core, 2)
        [first] = (await call(core, "claim_next", queues=["q"]))["jobs"]
        got: list[Any] = []

        async def wait() -> None:
            got.extend((await call(core, "claim_next", queues=["q"], wait_ms=60_000))["jobs"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(5)  # virtual time: autojump_clock
            assert got == []
            job = first["job"]
            await call(core, "complete", job_id=job["id"], lease=job["lease"])
        assert len(got) == 1
        assert trio.current_time() < 5.1


# -- fail closed, reload, provisioning ---------------------------------------------------------


async def test_an_unreadable_quota_stops_its_namespace_only(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await enqueue(core, 1, namespace="a")
        core.conn.execute(
            "INSERT INTO settings (key, value, updated_at) VALUES ('quota:ns:1:a', '{not json', 0)"
        )
        await trio.sleep(2.1)  # virtual time: autojump_clock; the watcher reloads
        stopped = await refused(enqueue(core, 1, namespace="a"))
        assert (stopped.code, stopped.status) == ("quota_unavailable", 503)
        empty = await call(core, "claim_next", namespace="a", queues=["q"])
        assert empty["deferred"][0]["reason"] == "quota_unavailable"
        assert any("namespace 'a' fails closed" in p for p in core.health_problems())
        got = await call(core, "quota_get", namespace="a")
        assert got["quota"] is None and got["error"]
        await enqueue(core, 1, namespace="b")  # another namespace is unaffected
        await call(core, "quota_clear", namespace="a")  # clearing resumes
        await enqueue(core, 1, namespace="a")
        assert (
            len((await call(core, "claim_next", namespace="a", queues=["q"], max=5))["jobs"]) == 2
        )


async def test_a_change_by_another_process_arrives_within_two_seconds(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await enqueue(core, 1)
        t0 = trio.current_time()
        doc = orjson.dumps({"max_pending": 1}).decode()
        settings_sql.put(core.conn, "quota:default", doc, 0)  # as another daemon would
        while True:
            try:
                await enqueue(core, 1)
            except Refused as exc:
                assert exc.code == "queue_full"
                break
            await trio.sleep(0.1)  # virtual time: autojump_clock
        assert trio.current_time() - t0 <= 2.1


async def test_a_provisioned_quota_is_read_only_and_a_bad_one_fails_closed(
    tmp_path, autojump_clock
):
    config = parse_config(
        {"quotas": {"billing": {"max_pending": 1, "enqueue_rate": "500/s"},
                    "broken": {"max_pending": -1}}}, "test.toml"
    )  # fmt: skip
    assert config.quota_problems == (
        "quotas.broken.max_pending: max_pending cannot be negative, got -1 "
        "(the namespace fails closed)",
    )
    async with running_core(tmp_path, config=config) as core:
        await core.writer.write(core.quotas.provision())
        await trio.sleep(2.1)  # virtual time: autojump_clock
        got = await call(core, "quota_get", namespace="billing")
        assert got == {"quota": {"max_pending": 1, "on_excess": "reject",
                                 "enqueue_rate": "500/s"}, "source": "config"}  # fmt: skip
        locked = await refused(call(core, "quota_set", namespace="billing", quota={}))
        assert locked.message == "the quota of namespace 'billing' is managed by config file"
        assert (await refused(enqueue(core, 1, namespace="broken"))).code == "quota_unavailable"
        await enqueue(core, 1, namespace="billing")
        assert (await refused(enqueue(core, 1, namespace="billing"))).code == "queue_full"


async def test_a_table_removed_from_the_file_removes_its_document_even_a_bad_one(
    tmp_path, autojump_clock
):
    from daemon.admission.quotas import PROVISIONED

    with_tables = parse_config(
        {"quotas": {"default": {"max_pending": "lots"}, "billing": {"max_pending": 1}}}, "t.toml"
    )
    async with running_core(tmp_path, config=with_tables) as core:
        await set_quota(core, "api-ns", max_pending=7)  # the API's: never touched
        await core.writer.write(core.quotas.provision())
        assert settings_sql.get(core.conn, PROVISIONED) == '["billing","default"]'
        got = await call(core, "quota_get", namespace="default")
        assert (got["quota"], got["source"]) == (None, "config") and "max_pending" in got["error"]
        assert (await refused(enqueue(core, 1))).code == "quota_unavailable"

        core.reload(parse_config({"quotas": {"billing": {"max_pending": 1}}}, "t.toml"))
        await core.writer.write(core.quotas.provision())
        assert await call(core, "quota_get", namespace="default") == {"quota": None,
                                                                     "source": None}  # fmt: skip
        await enqueue(core, 1)  # recovered at once
        assert core.health_problems() == []
        assert (await call(core, "quota_get", namespace="billing"))["source"] == "config"
        assert (await call(core, "quota_get", namespace="api-ns"))["source"] == "api"

        core.reload(parse_config({}, "t.toml"))
        await core.writer.write(core.quotas.provision())
        assert settings_sql.get(core.conn, PROVISIONED) is None
        assert (await call(core, "quota_get", namespace="billing"))["source"] is None
        assert (await call(core, "quota_get", namespace="api-ns"))["quota"] == {
            "max_pending": 7, "on_excess": "reject",
        }  # fmt: skip
        actions = core.conn.execute(
            "SELECT actor, target, action FROM audit WHERE target_kind = 'namespace' ORDER BY id"
        ).fetchall()
        assert [a for a in actions if a[0] == "config"] == [
            ("config", "default", "set"), ("config", "billing", "set"),
            ("config", "default", "clear"), ("config", "billing", "clear"),
        ]  # fmt: skip


def test_config_without_quotas_has_no_problems():
    assert Config().quota_problems == ()


async def test_status_shows_the_quota_and_usage_against_it(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await trio.testing.wait_all_tasks_blocked()  # the roll-up's first tick has run
        assert (await call(core, "status"))["quota"] is None
        await set_quota(core, max_pending=10, enqueue_rate="5/s", max_running=3)
        await enqueue(core, 4)
        await call(core, "claim_next", queues=["q"], max=2)
        quota = (await call(core, "status"))["quota"]
        assert quota == {
            "max_pending": 10, "on_excess": "reject", "enqueue_rate": "5/s", "max_running": 3,
            "usage": {"pending": 2, "running": 2, "completed": 0, "dead": 0,
                      "enqueue_tokens": 1.0, "waiting_claims": 0, "queues": 1, "door": {},
                      "retained_bytes": None, "storage_blocked": False,
                      # Not counted yet: the roll-up tick at start came before the namespace.
                      "monthly_jobs": None, "month": None,
                      "monthly_blocked": False},
        }  # fmt: skip


async def test_a_max_running_change_by_another_process_reaches_dispatch(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        await enqueue(core, 50)
        await call(core, "claim_next", queues=["q"], max=1)
        t0 = trio.current_time()
        settings_sql.put(core.conn, "quota:default", '{"max_running":1}', 0)  # another daemon
        for _ in range(30):  # the watcher reloads within 2 s
            if not (await call(core, "claim_next", queues=["q"], max=1))["jobs"]:
                break
            await trio.sleep(0.1)  # virtual time: autojump_clock
        assert trio.current_time() - t0 <= 2.1
        held = await call(core, "claim_next", queues=["q"], max=5)
        assert held["deferred"][0]["reason"] == "running_full"
