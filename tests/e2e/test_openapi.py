"""GET /openapi.json: built from the verb table, and true of a real daemon (schemathesis)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import msgpack
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from daemon.openapi import SOCKET_ONLY, args_schema, openapi_document
from daemon.verbs import VERBS
from daemon.verbs.args import between, name, text
from tests.support import DaemonProcess

#: Examples per operation: about 40 operations, so a few hundred requests in all.
EXAMPLES = 12
#: No 5xx, and every answer as the document says (status, content type, headers,
#: body). Not the checks that judge the API's choices: a body the schema allows
#: may still be refused (a queue that does not exist, a window in a bad zone).
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
)


def test_every_verb_is_described_with_its_arguments():
    spec = openapi_document()
    ops = {p.removeprefix("/v1/ops/") for p in spec["paths"] if p.startswith("/v1/ops/")}
    assert ops == set(VERBS) - SOCKET_ONLY
    schemas = spec["components"]["schemas"]
    enqueue = schemas["enqueue_call"]
    assert enqueue["required"] == ["queue", "type"]
    assert enqueue["additionalProperties"] is False
    assert enqueue["properties"]["priority"] == {"type": "integer", "minimum": 0, "maximum": 65535}
    assert enqueue["properties"]["namespace"]["pattern"] == "^[A-Za-z0-9._:-]{1,128}$"
    assert enqueue["properties"]["budgets"]["items"] == {"$ref": "#/components/schemas/BindingArgs"}
    assert schemas["enqueue_many_call"]["properties"]["jobs"]["items"] == {
        "$ref": "#/components/schemas/EnqueueArgs"
    }
    claim_next = spec["paths"]["/v1/ops/claim_next"]["post"]
    assert claim_next["responses"]["429"] == {"$ref": "#/components/responses/Error429"}
    assert "Retry-After" in spec["components"]["responses"]["Error429"]["headers"]
    error = schemas["Error"]
    assert error["required"] == ["error", "code"]
    assert {"rate_limited", "unsupported_media_type"} <= set(error["properties"]["code"]["enum"])
    rest = {"/jobs", "/jobs/{id}", "/budgets", "/budgets/{key}", "/api/v1/quota",
            "/api/v1/admission", "/api/v1/admission/{queue}", "/healthz", "/metrics"}  # fmt: skip
    assert rest <= set(spec["paths"])
    budget = spec["paths"]["/budgets/{key}"]
    assert set(budget) == {"get", "post", "put", "patch", "delete"}
    assert "204" in budget["delete"]["responses"] and "201" in budget["post"]["responses"]


@attrs.frozen
class Inner:
    key: str = attrs.field(validator=name)


@attrs.frozen
class Args:
    """A verb's arguments as a new verb would declare them."""

    queue: str = attrs.field(validator=name)
    count: int = attrs.field(default=1, validator=between(1, 9))
    note: str | None = attrs.field(default=None, validator=text(20))
    delay_ms: int | None = attrs.field(default=None, validator=between(0))
    tags: list[str] = attrs.Factory(list)
    inner: Inner | None = None
    anything: Any = None


def test_a_new_argument_class_is_described_from_its_fields_and_validators():
    components: dict[str, Any] = {}
    schema = args_schema(Args, components)
    assert schema["required"] == ["queue"] and schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["count"] == {"type": "integer", "minimum": 1, "maximum": 9}
    assert props["note"] == {"type": ["string", "null"], "minLength": 1, "maxLength": 20}
    assert props["delay_ms"] == {"type": ["integer", "null"], "minimum": 0}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["inner"] == {"anyOf": [{"$ref": "#/components/schemas/Inner"}, {"type": "null"}]}
    assert props["anything"] == {}
    assert components["Inner"]["properties"]["key"]["maxLength"] == 128


# -- against a real daemon ----------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[DaemonProcess]:
    """One daemon for the whole module: each operation meets the state the others left."""
    daemon = DaemonProcess(tmp_path_factory.mktemp("openapi"))
    daemon.start()
    yield daemon
    daemon.cleanup()


@pytest.mark.e2e
def test_the_daemon_serves_the_document(served):
    with served.http() as http:
        r = http.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == openapi_document()


@schemathesis.serializer("application/msgpack")
def _to_msgpack(_ctx: Any, value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


@schemathesis.deserializer("application/msgpack")
def _from_msgpack(_ctx: Any, response: Any) -> Any:
    return msgpack.unpackb(response.content, raw=False)


# Loaded from the document the daemon serves (the test above shows they are the
# same), so the operations are known when pytest collects; the daemon is the
# module fixture's, named by base_url at each call.
schema = schemathesis.openapi.from_dict(
    openapi_document(),
    config=schemathesis.Config.from_dict({
        "request-timeout": 10,
        "generation": {"mode": "positive", "max-examples": EXAMPLES, "deterministic": True},
        "checks": {"enabled": False, **{check: {"enabled": True} for check in CHECKS}},
    }),
)  # fmt: skip


@pytest.mark.e2e
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_answers_as_its_document_says(case, served):
    if isinstance(case.body, dict) and case.body.get("wait_ms"):
        case.body["wait_ms"] = 0  # a long poll would only make the run long
    case.call_and_validate(base_url=served.http_url)
