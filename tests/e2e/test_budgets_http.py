"""Budgets over HTTP against a real daemon: seed 003's examples replayed, and the edges.

Every request/response example of seed 003 is sent as the seed writes it (the
raw bodies are the seed's text), jobs bound to budgets included.

Our budget object is seed 003's plus ``state: {available, in_flight, parked}``;
error bodies are seed 003's ``{"error"}`` plus ``code`` and details.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import msgpack
import pytest

from tests.support import DaemonProcess, RawClient, token_tables

pytestmark = pytest.mark.e2e

JSON = "application/json"
MSGPACK = "application/msgpack"

# -- seed 003's request bodies, verbatim ------------------------------------------

CREATE_TIME_BASED = """{
    "allocation": 10000,
    "strategy": {
        "type": "time_based",
        "duration_ms": 3600000
    }
}"""
DUPLICATE_CREATE = """{
    "allocation": 10000,
    "strategy": {
        "type": "time_based",
        "duration_ms": 7200000
    }
}
"""
REPLACE = CREATE_TIME_BASED
CREATE_WHILE_IN_FLIGHT = """{
    "allocation": 10,
    "strategy": {
        "type": "while_in_flight"
    }
}"""
ENQUEUE_MULTIPLE = """{
    "type": "example",
    "queue": "example",
    "payload": {},
    "budgets": [
        {
            "key": "schema-bot",
            "cost": 2
        },
        {"key": "image-service"}
    ]
}"""
ENQUEUE_CREATE_WITH = """{
    "type": "example",
    "queue": "example",
    "payload": {},
    "budgets": [
        {
            "key": "cpu-intensive",
            "create_with": {
                "allocation": 100,
                "strategy": {
                    "type": "while_in_flight"
                }
            }
        }
    ]
}"""
PATCH_BURST = """{
    "strategy": {
        "burst": 50000
    }
}"""
REDUCE_BELOW_COST = """{
    "allocation": 1
}"""

WHILE_IN_FLIGHT_5 = {"allocation": 5, "strategy": {"type": "while_in_flight"}}


def now_ms() -> int:
    """The wall clock in ms (to bracket a stored instant, never to time anything)."""
    return time.time_ns() // 1_000_000


def send(http: httpx.Client, method: str, path: str, raw: str | None = None) -> httpx.Response:
    """A request with a raw JSON body, as ``http ... --raw '...'`` sends it."""
    headers = {"content-type": JSON} if raw is not None else {}
    return http.request(method, path, content=raw, headers=headers)


def seed_fields(budget: dict[str, Any]) -> dict[str, Any]:
    """A budget object without our added ``state``: seed 003's fields only."""
    return {k: v for k, v in budget.items() if k != "state"}


def json_body(response: httpx.Response, status: int) -> Any:
    """The JSON body of a response that must have ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == JSON
    return response.json()


def keys(http: httpx.Client) -> list[str]:
    """The keys ``GET /budgets`` lists, in its order."""
    return [b["key"] for b in json_body(http.get("/budgets"), 200)["budgets"]]


# -- seed 003, in the seed's order --------------------------------------------------


def test_seed_003_examples_in_order(daemon):
    with daemon.http() as http:
        # Create a time_based budget: 201, created_at == updated_at, a full pool.
        before = now_ms()
        created = json_body(send(http, "POST", "/budgets/image-service", CREATE_TIME_BASED), 201)
        after = now_ms()
        at = created["created_at"]
        assert before <= at <= after  # an instant in ms since the epoch
        assert seed_fields(created) == {
            "allocation": 10000,
            "created_at": at,
            "key": "image-service",
            "strategy": {"duration_ms": 3600000, "type": "time_based"},
            "updated_at": at,
        }
        assert created["state"] == {
            "available": 10000,
            "in_flight": 0,
            "parked": 0,
            "next_refill_at": None,
            "paused_until": None,
            "pause_reason": None,
        }

        # Duplicate create rejected: 409 with the seed's text; nothing written.
        dup = json_body(send(http, "POST", "/budgets/image-service", DUPLICATE_CREATE), 409)
        assert dup == {"error": "budget 'image-service' already exists", "code": "conflict"}
        got = json_body(http.get("/budgets/image-service"), 200)
        assert seed_fields(got) == seed_fields(created)

        # Replace an existing budget: 200, created_at kept, updated_at moves on.
        replaced = json_body(send(http, "PUT", "/budgets/image-service", REPLACE), 200)
        assert replaced["created_at"] == at and replaced["updated_at"] >= at
        assert seed_fields(replaced) == {
            **seed_fields(created),
            "updated_at": replaced["updated_at"],
        }
        assert replaced["state"]["available"] == 10000  # a replace hands out no tokens

        # Create a while_in_flight budget with PUT: 200 (not 201).
        bot = json_body(send(http, "PUT", "/budgets/schema-bot", CREATE_WHILE_IN_FLIGHT), 200)
        assert seed_fields(bot) == {
            "allocation": 10,
            "created_at": bot["created_at"],
            "key": "schema-bot",
            "strategy": {"type": "while_in_flight"},
            "updated_at": bot["created_at"],
        }
        assert bot["state"] == {
            "available": 10,
            "in_flight": 0,
            "parked": 0,
            "next_refill_at": None,
            "paused_until": None,
            "pause_reason": None,
        }

        # Patch an existing budget: only the burst changes.
        patched = json_body(send(http, "PATCH", "/budgets/image-service", PATCH_BURST), 200)
        assert seed_fields(patched) == {
            "allocation": 10000,
            "created_at": at,
            "key": "image-service",
            "strategy": {"burst": 50000, "duration_ms": 3600000, "type": "time_based"},
            "updated_at": patched["updated_at"],
        }
        assert patched["updated_at"] >= replaced["updated_at"]
        # Raising the cap keeps the count: ~10000 (plus a drip of ms), not 50000.
        assert 10000 <= patched["state"]["available"] < 10001

        # List budgets: {"budgets": [...]} in key order, the objects as they stand.
        listed = json_body(http.get("/budgets"), 200)
        assert list(listed) == ["budgets"]
        assert [seed_fields(b) for b in listed["budgets"]] == [
            seed_fields(patched),
            seed_fields(bot),
        ]
        assert listed["budgets"][1]["state"] == bot["state"]

        # Delete a budget: 204 and no body at all.
        deleted = http.delete("/budgets/schema-bot")
        assert deleted.status_code == 204
        assert deleted.content == b"" and "content-type" not in deleted.headers

        # Gone: 404, and the list shows what is left.
        gone = json_body(http.get("/budgets/schema-bot"), 404)
        assert gone == {"error": "budget 'schema-bot' not found", "code": "not_found"}
        assert keys(http) == ["image-service"]


# -- seed 003's examples that need jobs bound to budgets ----------------------------


def _seed_budgets(http: httpx.Client) -> None:
    """image-service (time_based 10000/1h) and schema-bot (while_in_flight 10)."""
    json_body(send(http, "PUT", "/budgets/image-service", CREATE_TIME_BASED), 200)
    json_body(send(http, "PUT", "/budgets/schema-bot", CREATE_WHILE_IN_FLIGHT), 200)


def _enqueued(response: httpx.Response) -> dict[str, Any]:
    """Seed 003's enqueue answer: 201 and the job's fields flattened with the flags."""
    body = json_body(response, 201)
    assert (body["attempts"], body["duplicate"], body["folded"]) == (0, False, False)
    # The seed's "ready" is our "pending" (a job that may be claimed now).
    assert (body["priority"], body["queue"], body["type"], body["status"]) == (
        32768, "example", "example", "pending",
    )  # fmt: skip
    assert isinstance(body["id"], str) and isinstance(body["ready_at"], int)
    return body


def test_seed_003_enqueue_a_job_against_multiple_budgets(daemon):
    with daemon.http() as http:
        _seed_budgets(http)
        job = _enqueued(send(http, "POST", "/jobs", ENQUEUE_MULTIPLE))
        assert job["budgets"] == [
            {"cost": 2, "key": "schema-bot"},
            {"cost": 1, "key": "image-service"},
        ]


def test_seed_003_enqueue_a_job_using_create_with(daemon):
    with daemon.http() as http:
        assert keys(http) == []
        job = _enqueued(send(http, "POST", "/jobs", ENQUEUE_CREATE_WITH))
        assert job["budgets"] == [{"cost": 1, "key": "cpu-intensive"}]
        made = json_body(http.get("/budgets/cpu-intensive"), 200)
        assert seed_fields(made) == {
            "allocation": 100,
            "created_at": made["created_at"],
            "key": "cpu-intensive",
            "strategy": {"type": "while_in_flight"},
            "updated_at": made["created_at"],
        }


def test_seed_003_delete_a_referenced_budget_rejected(daemon):
    with daemon.http() as http:
        _seed_budgets(http)
        _enqueued(send(http, "POST", "/jobs", ENQUEUE_MULTIPLE))
        refused = json_body(http.delete("/budgets/image-service"), 409)
        assert refused["error"] == (
            "budget 'image-service' is referenced by 1 unfinished job. "
            "Delete them or wait for them to finish before deleting it."
        )
        assert refused["code"] == "conflict"
        assert keys(http) == ["image-service", "schema-bot"]


def test_seed_003_reduce_a_budget_below_a_jobs_cost_rejected(daemon):
    with daemon.http() as http:
        _seed_budgets(http)
        _enqueued(send(http, "POST", "/jobs", ENQUEUE_MULTIPLE))
        refused = json_body(send(http, "PATCH", "/budgets/schema-bot", REDUCE_BELOW_COST), 422)
        assert refused["error"] == (
            "budget 'schema-bot' cannot allocate 1: 1 unfinished job draw up to 2 from it. "
            "Raise the allocation, delete them, or wait for them to drain."
        )
        assert json_body(http.get("/budgets/schema-bot"), 200)["allocation"] == 10


# -- msgpack ------------------------------------------------------------------------


def test_msgpack_request_and_response_for_create_and_get(daemon):
    both = {"content-type": MSGPACK, "accept": MSGPACK}
    with daemon.http() as http:
        r = http.post("/budgets/packed", content=msgpack.packb(WHILE_IN_FLIGHT_5), headers=both)
        assert r.status_code == 201 and r.headers["content-type"] == MSGPACK
        created = msgpack.unpackb(r.content)
        assert seed_fields(created) == {
            "key": "packed",
            "allocation": 5,
            "strategy": {"type": "while_in_flight"},
            "created_at": created["created_at"],
            "updated_at": created["created_at"],
        }
        got = http.get("/budgets/packed", headers={"accept": MSGPACK})
        assert got.status_code == 200 and got.headers["content-type"] == MSGPACK
        assert msgpack.unpackb(got.content) == created
        # The same budget as JSON when msgpack is not asked for.
        assert json_body(http.get("/budgets/packed"), 200) == created
        # A msgpack body answered in JSON, and a msgpack refusal.
        body = msgpack.packb({"allocation": 7, "strategy": {"type": "while_in_flight"}})
        put = http.put("/budgets/packed", content=body, headers={"content-type": MSGPACK})
        assert json_body(put, 200)["allocation"] == 7
        bad = http.post("/budgets/other", content=msgpack.packb({"allocation": 0}), headers=both)
        assert bad.status_code == 422 and bad.headers["content-type"] == MSGPACK
        refused = msgpack.unpackb(bad.content)
        assert (refused["code"], refused["field"]) == ("invalid_argument", "allocation")
        assert keys(http) == ["packed"]


# -- invalid input --------------------------------------------------------------------

INVALID: list[tuple[dict[str, Any], str]] = [
    ({"allocation": 0, "strategy": {"type": "while_in_flight"}}, "allocation"),
    ({"allocation": "5", "strategy": {"type": "while_in_flight"}}, "allocation"),
    ({"allocation": True, "strategy": {"type": "while_in_flight"}}, "allocation"),
    ({"allocation": 2**31, "strategy": {"type": "while_in_flight"}}, "allocation"),
    ({"strategy": {"type": "while_in_flight"}}, "allocation"),
    ({"allocation": 5}, "strategy"),
    ({"allocation": 5, "strategy": "while_in_flight"}, "strategy"),
    ({"allocation": 5, "strategy": {"type": "leaky_bucket"}}, "strategy.type"),
    ({"allocation": 5, "strategy": {}}, "strategy.type"),
    ({"allocation": 5, "strategy": {"type": "time_based"}}, "strategy.duration_ms"),
    (
        {"allocation": 5, "strategy": {"type": "time_based", "duration_ms": 0}},
        "strategy.duration_ms",
    ),
    (
        {"allocation": 5, "strategy": {"type": "time_based", "duration_ms": 1000, "burst": 0}},
        "strategy.burst",
    ),
    ({"allocation": 5, "strategy": {"type": "while_in_flight", "burst": 3}}, "strategy.burst"),
    (
        {"allocation": 5, "strategy": {"type": "while_in_flight", "duration_ms": 1000}},
        "strategy.duration_ms",
    ),
    (
        {"allocation": 5, "strategy": {"type": "time_based", "duration_ms": 1000, "window": 1}},
        "strategy.window",
    ),
    ({**WHILE_IN_FLIGHT_5, "colour": "blue"}, "colour"),
]


def test_invalid_budgets_are_422_with_the_field_and_write_nothing(daemon):
    with daemon.http() as http:
        kept = json_body(http.put("/budgets/kept", json=WHILE_IN_FLIGHT_5), 200)
        listing = json_body(http.get("/budgets"), 200)
        for method in ("POST", "PUT"):
            # A fresh key and the existing one (a PUT must not half-replace it).
            for key in ("fresh", "kept"):
                for body, field in INVALID:
                    r = http.request(method, f"/budgets/{key}", json=body)
                    case = (method, key, body)
                    assert r.status_code == 422, (case, r.text)
                    assert (r.json()["code"], r.json()["field"]) == ("invalid_argument", field), (
                        case
                    )
            for path in ("/budgets/bad%20key", "/budgets/" + "k" * 129, "/budgets/a%2Fb"):
                r = http.request(method, path, json=WHILE_IN_FLIGHT_5)
                assert r.status_code == 422, (method, path, r.text)
                assert (r.json()["code"], r.json()["field"]) == ("invalid_argument", "key")
        assert json_body(http.get("/budgets"), 200) == listing
        assert json_body(http.get("/budgets/kept"), 200) == kept


def test_patch_and_delete_of_an_absent_budget_are_404(daemon):
    with daemon.http() as http:
        for r in (
            http.patch("/budgets/absent", json={"allocation": 3}),
            http.patch("/budgets/absent", json={}),
            http.delete("/budgets/absent"),
            http.get("/budgets/absent"),
        ):
            assert json_body(r, 404) == {"error": "budget 'absent' not found", "code": "not_found"}
        assert keys(http) == []  # a PATCH never creates


def test_patch_null_resets_burst_but_allocation_and_strategy_have_no_default(daemon):
    body = {"allocation": 10, "strategy": {"type": "time_based", "duration_ms": 60000, "burst": 3}}
    with daemon.http() as http:
        made = json_body(http.post("/budgets/tb", json=body), 201)
        for patch, field in (
            ({"allocation": None}, "allocation"),
            ({"allocation": 0}, "allocation"),
            ({"allocation": "10"}, "allocation"),
            ({"strategy": None}, "strategy"),
            ({"strategy": {"duration_ms": None}}, "strategy.duration_ms"),
            ({"strategy": {"type": "sliding"}}, "strategy.type"),
            ({"strategy": {"burst": 0}}, "strategy.burst"),
            ({"strategy": {"window": 1}}, "strategy.window"),
        ):
            refused = json_body(http.patch("/budgets/tb", json=patch), 422)
            assert (refused["code"], refused["field"]) == ("invalid_argument", field), patch
        assert seed_fields(json_body(http.get("/budgets/tb"), 200)) == seed_fields(made)

        # Only the given fields change; null resets burst to its default (none).
        alloc = json_body(http.patch("/budgets/tb", json={"allocation": 20}), 200)
        assert (alloc["allocation"], alloc["strategy"]) == (20, body["strategy"])
        reset = json_body(http.patch("/budgets/tb", json={"strategy": {"burst": None}}), 200)
        assert reset["strategy"] == {"type": "time_based", "duration_ms": 60000}
        assert reset["allocation"] == 20 and reset["created_at"] == made["created_at"]

        # A change of type drops the other type's settings.
        wif = {"strategy": {"type": "while_in_flight"}}
        assert json_body(http.patch("/budgets/tb", json=wif), 200)["strategy"] == wif["strategy"]
        back = json_body(http.patch("/budgets/tb", json={"strategy": {"type": "time_based"}}), 422)
        assert back["field"] == "strategy.duration_ms"


# -- patch keeps create's rules ------------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"strategy": {"burst": 5}}, "strategy.burst"),
        ({"strategy": {"colour": "blue"}}, "strategy.colour"),
        ({"strategy": {"type": "while_in_flight", "burst": 5}}, "strategy.burst"),
    ],
)
def test_patch_of_a_while_in_flight_budget_refuses_time_based_or_unknown_fields(
    daemon, patch, field
):
    with daemon.http() as http:
        made = json_body(http.put("/budgets/wif", json=WHILE_IN_FLIGHT_5), 200)
        r = http.patch("/budgets/wif", json=patch)
        assert json_body(r, 422)["field"] == field
        assert json_body(http.get("/budgets/wif"), 200) == made  # not even updated_at moved


def test_patch_allocation_keeps_the_int32_bound_of_create(daemon):
    with daemon.http() as http:
        made = json_body(http.put("/budgets/wif", json=WHILE_IN_FLIGHT_5), 200)
        refused = json_body(http.patch("/budgets/wif", json={"allocation": 2**31}), 422)
        assert refused["field"] == "allocation"
        assert json_body(http.get("/budgets/wif"), 200) == made


# -- the tokens contract over the socket ---------------------------------------------


def test_raising_allocation_and_burst_hands_out_no_tokens(daemon, connect):
    c = connect(daemon)
    made = c.ok("budget_create", key="tb", allocation=10,
                strategy={"type": "time_based", "duration_ms": 3_600_000})["budget"]  # fmt: skip
    assert made["state"]["available"] == 10
    raised = c.ok("budget_patch", key="tb", allocation=1000, strategy={"burst": 1000})["budget"]
    assert raised["allocation"] == 1000 and raised["strategy"]["burst"] == 1000
    # The count stays (plus the drip of the few ms since): ~10, never 1000.
    assert 10 <= raised["state"]["available"] < 11
    again = c.ok("budget_get", key="tb")["budget"]["state"]["available"]
    assert raised["state"]["available"] <= again < 11
    # A PUT with the same raise hands out nothing either.
    raise_all = {"type": "time_based", "duration_ms": 3_600_000, "burst": 1000}
    put = c.ok("budget_put", key="tb", allocation=1000, strategy=raise_all)
    assert put["budget"]["state"]["available"] < 11
    # Lowering the cap clamps the count down to it.
    lowered = c.ok("budget_patch", key="tb", strategy={"burst": 4})["budget"]
    assert lowered["state"]["available"] == 4

    # while_in_flight: available is allocation - in flight, so a raise does show.
    c.ok("budget_create", key="wif", **WHILE_IN_FLIGHT_5)
    assert c.ok("budget_patch", key="wif", allocation=8)["budget"]["state"] == {
        "available": 8, "in_flight": 0, "parked": 0, "next_refill_at": None,
        "paused_until": None, "pause_reason": None,
    }  # fmt: skip


# -- tokens mode ----------------------------------------------------------------------

TOKEN_A = "tok-budget-a-0123"
TOKEN_B = "tok-budget-b-4567"
TOKEN_WORKER = "tok-budget-worker-89"
OWNERS = ["produce", "consume", "manage"]
TOKENS_CONFIG = token_tables(
    {"name": "owner-a", "token": TOKEN_A, "namespace": "A", "grants": OWNERS},
    {"name": "owner-b", "token": TOKEN_B, "namespace": "B", "grants": OWNERS, "hashed": True},
    {"name": "worker-a", "token": TOKEN_WORKER, "namespace": "A",
     "grants": ["produce", "consume"]},
)  # fmt: skip
BUDGET_VERBS: dict[str, dict[str, Any]] = {
    "budget_list": {},
    "budget_get": {"key": "img"},
    "budget_create": {"key": "img2", **WHILE_IN_FLIGHT_5},
    "budget_put": {"key": "img", **WHILE_IN_FLIGHT_5},
    "budget_patch": {"key": "img", "allocation": 1},
    "budget_delete": {"key": "img"},
}


def test_budgets_are_per_namespace_and_need_manage(make_daemon, connect):
    d: DaemonProcess = make_daemon(TOKENS_CONFIG)

    def login(token: str) -> RawClient:
        client = connect(d)
        client.ok("hello", token=token)
        return client

    a, b, worker = login(TOKEN_A), login(TOKEN_B), login(TOKEN_WORKER)
    img = a.ok("budget_create", key="img", **WHILE_IN_FLIGHT_5)["budget"]
    a.ok("budget_create", key="only-a", allocation=3, strategy={"type": "while_in_flight"})

    # B cannot see, change or delete A's budgets: not_found, as if absent.
    for verb, args in (
        ("budget_get", {"key": "img"}),
        ("budget_patch", {"key": "img", "allocation": 1}),
        ("budget_delete", {"key": "img"}),
    ):
        err = b.error(verb, **args)
        assert err == {"code": "not_found", "status": 404, "message": "budget 'img' not found"}
        absent = b.error(verb, **{**args, "key": "never"})
        assert absent["message"] == "budget 'never' not found"
    assert b.ok("budget_list")["budgets"] == []
    # Naming A's namespace outright is forbidden without operator.
    err = b.error("budget_get", key="img", namespace="A")
    assert (err["code"], err["status"]) == ("forbidden", 403)

    # The same key in B is B's own budget; A's stays as it was.
    mine = b.ok("budget_create", key="img", allocation=9, strategy={"type": "while_in_flight"})
    assert mine["budget"]["allocation"] == 9
    assert [x["key"] for x in b.ok("budget_list")["budgets"]] == ["img"]
    assert a.ok("budget_get", key="img")["budget"] == img
    assert [x["key"] for x in a.ok("budget_list")["budgets"]] == ["img", "only-a"]

    # Without manage, every budget verb is forbidden, even in its own namespace.
    for verb, args in BUDGET_VERBS.items():
        err = worker.error(verb, **args)
        assert (err["code"], err["status"]) == ("forbidden", 403), verb
    assert a.ok("budget_get", key="img")["budget"] == img

    # The same over HTTP with bearers.
    with d.http(TOKEN_B) as http_b, d.http(TOKEN_WORKER) as http_w, d.http() as anonymous:
        assert json_body(http_b.get("/budgets/only-a"), 404)["code"] == "not_found"
        assert json_body(http_b.delete("/budgets/only-a"), 404)["code"] == "not_found"
        assert keys(http_b) == ["img"]
        assert json_body(http_w.get("/budgets"), 403)["code"] == "forbidden"
        assert json_body(http_w.post("/budgets/w", json=WHILE_IN_FLIGHT_5), 403)["code"] == (
            "forbidden"
        )
        assert json_body(anonymous.get("/budgets"), 401)["code"] == "unauthenticated"
    assert [x["key"] for x in a.ok("budget_list")["budgets"]] == ["img", "only-a"]


# -- max_budgets ----------------------------------------------------------------------


def test_max_budgets_refuses_a_third_budget(make_daemon):
    d: DaemonProcess = make_daemon("max_budgets = 2\n")
    with d.http() as http:
        json_body(http.post("/budgets/one", json=WHILE_IN_FLIGHT_5), 201)
        json_body(http.put("/budgets/two", json=WHILE_IN_FLIGHT_5), 200)
        expected = {
            "error": "max_budgets exceeded: 3 > 2",
            "code": "quota_exceeded",
            "limit": "max_budgets",
            "value": 3,
            "max": 2,
        }
        assert json_body(http.post("/budgets/three", json=WHILE_IN_FLIGHT_5), 403) == expected
        assert json_body(http.put("/budgets/three", json=WHILE_IN_FLIGHT_5), 403) == expected
        assert keys(http) == ["one", "two"]
        # Replacing or patching an existing budget is no new budget.
        json_body(http.put("/budgets/one", json={**WHILE_IN_FLIGHT_5, "allocation": 6}), 200)
        json_body(http.patch("/budgets/two", json={"allocation": 7}), 200)
        # A delete makes room.
        assert http.delete("/budgets/two").status_code == 204
        json_body(http.post("/budgets/three", json=WHILE_IN_FLIGHT_5), 201)
        assert keys(http) == ["one", "three"]


# -- restart --------------------------------------------------------------------------


def test_budgets_survive_a_restart(make_daemon):
    d: DaemonProcess = make_daemon()
    time_based = {"allocation": 10, "strategy": {"type": "time_based", "duration_ms": 3_600_000}}
    with d.http() as http:
        wif = json_body(http.post("/budgets/wif", json=WHILE_IN_FLIGHT_5), 201)
        full = json_body(http.post("/budgets/full", json=time_based), 201)
        json_body(http.post("/budgets/drip", json=time_based), 201)
        # Raise the cap: 10 tokens of 1000, refilling at 10/h (one per 6 min).
        drip = json_body(http.patch("/budgets/drip", json={"strategy": {"burst": 1000}}), 200)
        assert 10 <= drip["state"]["available"] < 11
        before = json_body(http.get("/budgets"), 200)
    assert d.stop() == 0
    d.start()
    with d.http() as http:
        assert json_body(http.get("/budgets/wif"), 200) == wif
        assert json_body(http.get("/budgets/full"), 200) == full
        again = json_body(http.get("/budgets/drip"), 200)
        assert seed_fields(again) == seed_fields(drip)
        # The pool's count is persisted: a restart hands out no burst.
        assert drip["state"]["available"] <= again["state"]["available"] < 11
        after = json_body(http.get("/budgets"), 200)
    assert [seed_fields(b) for b in after["budgets"]] == [seed_fields(b) for b in before["budgets"]]
    assert [b["key"] for b in after["budgets"]] == ["drip", "full", "wif"]
