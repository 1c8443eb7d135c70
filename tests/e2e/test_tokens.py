"""Tokens mode: authentication, namespace isolation for every verb, grants and scope."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from daemon.verbs.table import VERBS
from tests.support import RawClient, token_tables

pytestmark = pytest.mark.e2e

TOKEN_A = "tok-a-0123456789"
TOKEN_B = "tok-b-9876543210"
TOKEN_IMG = "tok-img-555"
TOKEN_PRODUCER = "tok-producer-777"

OWNERS = ["produce", "consume", "manage"]
TOKENS_CONFIG = token_tables(
    # Room for every verb's tries: an admin write is metered even when its write refuses it.
    {"name": "owner-a", "token": TOKEN_A, "namespace": "A", "grants": OWNERS,
     "write_rate": "100/s", "write_burst": 100},
    {"name": "owner-b", "token": TOKEN_B, "namespace": "B", "grants": OWNERS, "hashed": True,
     "write_rate": "100/s", "write_burst": 100},
    {"name": "images-only", "token": TOKEN_IMG, "namespace": "A",
     "grants": ["produce", "consume"], "queues": ["img.*"]},
    {"name": "producer-a", "token": TOKEN_PRODUCER, "namespace": "A", "grants": ["produce"]},
)  # fmt: skip


#: A periodic entry of namespace A (yearly, so it never fires during a test).
PERIODIC_A = """
[[periodic]]
name = "a-yearly"
namespace = "A"
queue = "reports"
type = "report"
cron = "0 3 1 1 *"
tz = "America/Los_Angeles"
"""


@pytest.fixture
def tokens_daemon(make_daemon):
    return make_daemon(TOKENS_CONFIG + PERIODIC_A)


@pytest.fixture
def login(tokens_daemon, connect) -> Callable[[str], RawClient]:
    def open_as(token: str) -> RawClient:
        client = connect(tokens_daemon)
        client.ok("hello", token=token, client="e2e")
        return client

    return open_as


def test_every_verb_before_hello_is_unauthenticated(tokens_daemon, connect):
    c = connect(tokens_daemon)
    for name in VERBS:
        if name == "hello":
            continue
        err = c.error(name)
        assert (err["code"], err["status"]) == ("unauthenticated", 401), (name, err)
    # The connection stays usable: a good hello opens the session.
    hello = c.ok("hello", token=TOKEN_A)
    assert hello["namespace"] == "A" and hello["protocol"] == 1
    assert set(hello["grants"]) == {"produce", "consume", "manage"}
    assert c.ok("status")["namespace"] == "A"


def test_a_wrong_token_is_unauthenticated_and_closes_the_connection(tokens_daemon, connect):
    other = connect(tokens_daemon)
    other.ok("hello", token=TOKEN_B)
    for token in ["not-a-token", None, "", TOKEN_A.upper()]:
        c = connect(tokens_daemon)
        req = c.request("hello", **({} if token is None else {"token": token}))
        frames = c.read_until_closed()
        assert [f["id"] for f in frames] == [req], (token, frames)
        err = frames[0]["error"]
        assert (err["code"], err["status"]) == ("unauthenticated", 401), token
        # Others are unaffected.
        assert other.ok("status")["namespace"] == "B"


@attrs.define
class World:
    """Namespace A's jobs and clients, and B's client trying to reach them."""

    daemon: Any
    a: RawClient
    b: RawClient
    running: dict[str, Any]  # A's running job (with its lease)
    pending: dict[str, Any]
    dead: dict[str, Any]
    a_ids: set[str]

    def a_job(self, job: dict[str, Any]) -> dict[str, Any]:
        return self.a.ok("get", job_id=job["id"])["job"]


def _not_found(world: World, verb: str, **args: Any) -> None:
    err = world.b.error(verb, **args)
    assert (err["code"], err["status"]) == ("not_found", 404), (verb, err)
    # Indistinguishable from an id that does not exist at all.
    job_id = args.get("job_id") or args["job_ids"][0]
    absent = world.b.error(verb, **{**args, **_renamed(args, "06NOSUCHJOB0000000000000000")})
    assert err["message"].replace(job_id, "?") == absent["message"].replace(
        "06NOSUCHJOB0000000000000000", "?"
    )


def _renamed(args: dict[str, Any], job_id: str) -> dict[str, Any]:
    return {"job_ids": [job_id]} if "job_ids" in args else {"job_id": job_id}


def _check_hello(w: World) -> None:
    assert w.b.ok("hello", token=TOKEN_B)["namespace"] == "B"


def _check_get(w: World) -> None:
    _not_found(w, "get", job_id=w.pending["id"])


def _check_explain(w: World) -> None:
    for job in (w.pending, w.running, w.dead):
        _not_found(w, "explain", job_id=job["id"])


def _check_claim(w: World) -> None:
    _not_found(w, "claim", job_id=w.pending["id"])


def _check_heartbeat(w: World) -> None:
    _not_found(w, "heartbeat", job_id=w.running["id"], lease=w.running["lease"])


def _check_complete(w: World) -> None:
    _not_found(w, "complete", job_id=w.running["id"], lease=w.running["lease"])


def _check_complete_many(w: World) -> None:
    job = {"job_id": w.running["id"], "lease": w.running["lease"]}
    (result,) = w.b.ok("complete_many", jobs=[job])["results"]
    assert result["error"]["code"] == "not_found"  # B cannot complete A's job
    assert w.a.ok("get", job_id=w.running["id"])["job"]["status"] == "running"


def _check_fail(w: World) -> None:
    _not_found(w, "fail", job_id=w.running["id"], lease=w.running["lease"], error="x", dead=True)


def _check_release(w: World) -> None:
    _not_found(w, "release", job_id=w.running["id"], lease=w.running["lease"])


def _check_dead_replay(w: World) -> None:
    _not_found(w, "dead_replay", job_ids=[w.dead["id"]])
    assert w.b.ok("dead_replay", all=True)["results"] == []


def _check_list(w: World) -> None:
    assert w.b.ok("list", limit=1000)["jobs"] == []
    assert w.b.ok("list", queue="qa")["jobs"] == []


def _check_status(w: World) -> None:
    status = w.b.ok("status")
    assert status["namespace"] == "B" and status["queues"] == []


def _check_dead_list(w: World) -> None:
    assert w.b.ok("dead_list")["jobs"] == []


def _check_queue_list(w: World) -> None:
    assert w.b.ok("queue_list")["queues"] == []


def _check_enqueue(w: World) -> None:
    # B may use the same queue name: it is B's own queue.
    job = w.b.ok("enqueue", queue="qa", type="t")["job"]
    assert job["namespace"] == "B"
    err = w.a.error("get", job_id=job["id"])
    assert err["code"] == "not_found"
    assert w.b.ok("claim_next", queues=["qa"])["jobs"][0]["job"]["id"] == job["id"]


def _check_enqueue_many(w: World) -> None:
    results = w.b.ok("enqueue_many", jobs=[{"queue": "qa", "type": "t"}] * 2)["results"]
    assert {r["job"]["namespace"] for r in results} == {"B"}
    assert not {r["job"]["id"] for r in results} & w.a_ids


def _check_claim_next(w: World) -> None:
    # A's queue "qa" has a pending job; B's "qa" has none (B has enqueued nothing yet).
    got = w.b.ok("claim_next", queues=["qa"], max=1000)
    assert (got["jobs"], got["empty"]) == ([], True)


def _check_subscribe(w: World) -> None:
    assert w.b.ok("subscribe", queues=["qa-fresh"]) | {"id": 0} == {"id": 0, "ok": True}
    w.a.ok("subscribe", queues=["qa-fresh"])
    w.a.ok("enqueue", queue="qa-fresh", type="t")
    w.a.ok("status")  # the doorbell, if any, is sent before this answer
    assert [e["queue"] for e in w.a.events] == ["qa-fresh"]  # A's doorbell rang...
    w.b.ok("status")
    assert w.b.events == []  # ...and B heard nothing of it.


def _check_queue_configure(w: World) -> None:
    queue = w.b.ok("queue_configure", queue="qa", completed_ttl_ms=60_000)["queue"]
    assert queue["queue"] == "qa"
    assert [q["queue"] for q in w.b.ok("queue_list")["queues"]] == ["qa"]
    a_queues = {q["queue"]: q for q in w.a.ok("queue_list")["queues"]}
    assert a_queues["qa"]["pending"] >= 1  # A's queue of that name is A's still


_WIF = {"allocation": 5, "strategy": {"type": "while_in_flight"}}


def _a_budget(w: World) -> dict[str, Any]:
    """A's budget "a-budget" (created once), as A sees it."""
    found = {b["key"]: b for b in w.a.ok("budget_list")["budgets"]}
    if "a-budget" not in found:
        return w.a.ok("budget_create", key="a-budget", **_WIF)["budget"]
    return found["a-budget"]


def _check_budget_hidden(verb: str, **args: Any) -> Callable[[World], None]:
    def check(w: World) -> None:
        before = _a_budget(w)
        err = w.b.error(verb, key="a-budget", **args)
        assert (err["code"], err["message"]) == ("not_found", "budget 'a-budget' not found")
        absent = w.b.error(verb, key="no-such-budget", **args)
        assert absent["message"] == "budget 'no-such-budget' not found"  # same as absent
        assert _a_budget(w) == before

    return check


def _check_budget_list(w: World) -> None:
    _a_budget(w)
    assert "a-budget" not in {b["key"] for b in w.b.ok("budget_list")["budgets"]}


def _check_budget_own_namespace(verb: str) -> Callable[[World], None]:
    def check(w: World) -> None:
        before = _a_budget(w)
        key = f"{verb}-b"
        mine = w.b.ok(verb, key=key, allocation=7, strategy={"type": "while_in_flight"})
        assert mine["budget"]["allocation"] == 7
        assert key not in {b["key"] for b in w.a.ok("budget_list")["budgets"]}
        # The same key in B is B's own budget; A's is untouched.
        w.b.ok(verb, key="a-budget", **_WIF) if verb == "budget_put" else None
        assert _a_budget(w) == before

    return check


def _check_quota_get(w: World) -> None:
    assert w.b.ok("quota_get") | {"id": 0} == {"id": 0, "ok": True, "quota": None, "source": None}
    assert w.b.error("quota_get", namespace="A")["code"] == "forbidden"


def _check_quota_write(verb: str, **args: Any) -> Callable[[World], None]:
    def check(w: World) -> None:
        # Quota writes are the operator's, even for the token's own namespace.
        for target in ({}, {"namespace": "A"}):
            assert w.b.error(verb, **target, **args)["code"] == "forbidden"
        assert w.a.ok("quota_get")["quota"] is None

    return check


def _a_policy(w: World, queue: str = "a-pol") -> dict[str, Any]:
    """A's policy on ``queue`` (set once), as A sees it."""
    found = {p["queue"]: p for p in w.a.ok("policy_list")["policies"]}
    if queue not in found:
        return w.a.ok("policy_set", queue=queue, max_in_flight=3)["policy"]
    return found[queue]


def _check_policy_hidden(verb: str) -> Callable[[World], None]:
    def check(w: World) -> None:
        before = _a_policy(w)
        err = w.b.error(verb, queue="a-pol")
        assert (err["code"], err["message"]) == ("not_found", "policy of queue 'a-pol' not found")
        assert _a_policy(w) == before

    return check


def _check_policy_list(w: World) -> None:
    _a_policy(w)
    assert w.b.ok("policy_list")["policies"] == []
    assert w.b.ok("admission_status")["queues"] == []


def _check_policy_set(w: World) -> None:
    before = _a_policy(w, "shared-pol")
    mine = w.b.ok("policy_set", queue="shared-pol", max_in_flight=9)["policy"]
    assert mine["max_in_flight"] == 9
    assert _a_policy(w, "shared-pol") == before  # B's queue of that name is B's own


def _check_periodic_list(w: World) -> None:
    assert [e["name"] for e in w.a.ok("periodic_list")["periodic"]] == ["a-yearly"]
    assert w.b.ok("periodic_list")["periodic"] == []
    assert w.b.error("periodic_list", namespace="A")["code"] == "forbidden"


def _check_audit_list(w: World) -> None:
    _a_policy(w)  # A's policy write is audited in A
    assert any(r["target"] == "a-pol" for r in w.a.ok("audit_list", limit=1000)["records"])
    assert all(r["target"] != "a-pol" for r in w.b.ok("audit_list", limit=1000)["records"])
    assert w.b.error("audit_list", namespace="A")["code"] == "forbidden"


def _check_what_if(w: World) -> None:
    before = w.a.ok("budget_create", key="a-preview", **_WIF)["budget"]
    patch = {"op": "budget_patch", "key": "a-preview", "allocation": 1}
    assert w.b.error("what_if", change=patch)["code"] == "not_found"
    quota = {"op": "quota_set", "quota": {"max_pending": 1}}
    for target in ({}, {"namespace": "A"}):
        assert w.b.error("what_if", change=quota, **target)["code"] == "forbidden"
    # B's queue "qa" is B's own: only B's pending jobs there are counted.
    mine = w.b.ok("what_if", change={"op": "policy_set", "queue": "qa", "max_in_flight": 50})
    queues = {q["queue"]: q["pending"] for q in w.b.ok("status")["queues"]}
    theirs = {q["queue"]: q["pending"] for q in w.a.ok("status")["queues"]}
    own = queues.get("qa", 0)
    assert own != theirs["qa"]
    assert mine["now"]["admissible_now"] == {"before": own, "after": own}
    assert w.a.ok("budget_get", key="a-preview")["budget"] == before


#: How each verb is checked for isolation between namespaces. A new verb must
#: be added here (the test fails until it is): decide how it could leak.
ISOLATION: dict[str, Callable[[World], None]] = {
    "hello": _check_hello,
    "get": _check_get,
    "explain": _check_explain,
    "claim": _check_claim,
    "heartbeat": _check_heartbeat,
    "complete": _check_complete,
    "complete_many": _check_complete_many,
    "fail": _check_fail,
    "release": _check_release,
    "dead_replay": _check_dead_replay,
    # Listings and counts (before B has anything of its own).
    "list": _check_list,
    "status": _check_status,
    "dead_list": _check_dead_list,
    "queue_list": _check_queue_list,
    "claim_next": _check_claim_next,
    "subscribe": _check_subscribe,
    # Writes land in B's own namespace.
    "enqueue": _check_enqueue,
    "enqueue_many": _check_enqueue_many,
    "queue_configure": _check_queue_configure,
    # Budgets: another namespace's are absent; writes land in the caller's.
    "budget_get": _check_budget_hidden("budget_get"),
    "budget_patch": _check_budget_hidden("budget_patch", allocation=1),
    "budget_delete": _check_budget_hidden("budget_delete"),
    "budget_pause": _check_budget_hidden("budget_pause", retry_after_s=30),
    "budget_resume": _check_budget_hidden("budget_resume"),
    "budget_list": _check_budget_list,
    "budget_create": _check_budget_own_namespace("budget_create"),
    "budget_put": _check_budget_own_namespace("budget_put"),
    # Quotas: read your own; writes need the operator grant.
    "quota_get": _check_quota_get,
    "quota_set": _check_quota_write("quota_set", quota={"max_pending": 1}),
    "quota_clear": _check_quota_write("quota_clear"),
    # Periodic entries (config file): each namespace sees only its own.
    "periodic_list": _check_periodic_list,
    # Queue policies: another namespace's are absent; writes land in the caller's.
    "policy_get": _check_policy_hidden("policy_get"),
    "policy_clear": _check_policy_hidden("policy_clear"),
    "policy_list": _check_policy_list,
    "audit_list": _check_audit_list,
    "admission_status": _check_policy_list,
    "policy_set": _check_policy_set,
    # Previews read the caller's namespace only, with the change's own grant.
    "what_if": _check_what_if,
}


def test_every_verb_keeps_namespaces_apart(tokens_daemon, login):
    missing = sorted(set(VERBS) - set(ISOLATION))
    assert not missing, f"decide how these verbs are isolated between namespaces: {missing}"
    a, b = login(TOKEN_A), login(TOKEN_B)
    dead = a.ok("enqueue", queue="qa", type="t")["job"]
    lease = a.ok("claim", job_id=dead["id"])["job"]["lease"]
    a.ok("fail", job_id=dead["id"], lease=lease, error="x", dead=True)
    running = a.ok("enqueue", queue="qa", type="t")["job"]
    running = a.ok("claim", job_id=running["id"])["job"]
    pending = a.ok("enqueue", queue="qa", type="t", priority=0)["job"]
    a_ids = {dead["id"], running["id"], pending["id"]}
    world = World(tokens_daemon, a, b, running, pending, dead, a_ids)

    for verb in [v for v in ISOLATION if v in VERBS]:
        ISOLATION[verb](world)

    # With jobs of its own, B still sees only those.
    b_jobs = b.ok("list", limit=1000)["jobs"]
    assert b_jobs and {j["namespace"] for j in b_jobs} == {"B"}
    assert not {j["id"] for j in b_jobs} & a_ids
    assert [q["queue"] for q in b.ok("status")["queues"]] == ["qa"]
    assert b.ok("dead_list")["jobs"] == []
    # A's jobs are exactly as A left them.
    assert world.a_job(dead)["status"] == "dead"
    now = world.a_job(running)
    assert (now["status"], now["lease"], now["attempts"]) == ("running", running["lease"], 1)
    assert (world.a_job(pending)["status"], world.a_job(pending)["attempts"]) == ("pending", 0)


def test_naming_another_namespace_needs_operator(tokens_daemon, login):
    a, b = login(TOKEN_A), login(TOKEN_B)
    job_id = a.ok("enqueue", queue="qa", type="t")["job"]["id"]
    for verb, args in [
        ("get", {"job_id": job_id}),
        ("list", {}),
        ("status", {}),
        ("enqueue", {"queue": "qa", "type": "t"}),
        ("claim_next", {"queues": ["qa"]}),
        ("dead_list", {}),
    ]:
        err = b.error(verb, namespace="A", **args)
        assert (err["code"], err["status"]) == ("forbidden", 403), (verb, err)
    # Naming one's own namespace is fine.
    assert b.ok("status", namespace="B")["namespace"] == "B"
    assert [j["id"] for j in a.ok("list")["jobs"]] == [job_id]


def test_queue_scope_and_grants(tokens_daemon, login):
    owner, images, producer = login(TOKEN_A), login(TOKEN_IMG), login(TOKEN_PRODUCER)
    mail_job = owner.ok("enqueue", queue="mail", type="t")["job"]["id"]

    # A token scoped to img.* may not touch other queues, nor reveal their jobs.
    for verb, args in [
        ("enqueue", {"queue": "mail", "type": "t"}),
        (
            "enqueue_many",
            {"jobs": [{"queue": "img.a", "type": "t"}, {"queue": "mail", "type": "t"}]},
        ),
        ("claim_next", {"queues": ["img.a", "mail"]}),
        ("get", {"job_id": mail_job}),
        ("claim", {"job_id": mail_job}),
        ("list", {"queue": "mail"}),
    ]:
        err = images.error(verb, **args)
        assert (err["code"], err["status"]) == ("forbidden", 403), (verb, err)
    img_job = images.ok("enqueue", queue="img.thumbs", type="t")["job"]["id"]
    assert [j["id"] for j in images.ok("list")["jobs"]] == [img_job]  # mail's job unseen
    # Paging never stops early at a page of jobs it may not see.
    seen, after = [], None
    for _ in range(10):
        page = images.ok("list", limit=1, **({"after": after} if after else {}))
        seen += [j["id"] for j in page["jobs"]]
        if not (after := page["next"]):
            break
    assert seen == [img_job]
    assert images.ok("claim_next", queues=["img.thumbs"])["jobs"][0]["job"]["id"] == img_job

    # A token without consume may not claim; without manage, no dead letters.
    for verb, args in [
        ("claim_next", {"queues": ["mail"]}),
        ("claim", {"job_id": mail_job}),
        ("dead_list", {}),
        ("queue_list", {}),
    ]:
        err = producer.error(verb, **args)
        assert (err["code"], err["status"]) == ("forbidden", 403), (verb, err)
    assert producer.ok("enqueue", queue="mail", type="t")["job"]["namespace"] == "A"
    assert producer.ok("get", job_id=mail_job)["job"]["status"] == "pending"  # reading is fine


def test_http_bearer(tokens_daemon):
    with tokens_daemon.http() as anonymous:
        r = anonymous.get("/jobs")
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
        assert anonymous.post("/jobs", json={"queue": "q", "type": "t"}).status_code == 401
        assert anonymous.get("/healthz").status_code == 200
    with tokens_daemon.http("wrong-token") as wrong:
        assert wrong.get("/jobs").status_code == 401
    with tokens_daemon.http(TOKEN_A) as a, tokens_daemon.http(TOKEN_B) as b:
        r = a.post("/jobs", json={"queue": "q", "type": "t"})
        assert r.status_code == 201 and r.json()["namespace"] == "A"
        job_id = r.json()["id"]
        assert a.get(f"/jobs/{job_id}").status_code == 200
        r = b.get(f"/jobs/{job_id}")
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        assert b.get("/jobs").json()["jobs"] == []
        r = b.post("/v1/ops/claim_next", json={"queues": ["q"]})
        assert r.status_code == 200 and r.json()["empty"] is True
        r = b.get(f"/jobs/{job_id}", params={"namespace": "A"})
        assert r.status_code == 403 and r.json()["code"] == "forbidden"
