"""daemon/verbs/args.py: strict structuring of verb arguments; refusals name the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.errors import Refused
from daemon.verbs.args import structure
from daemon.verbs.producing import EnqueueArgs, EnqueueManyArgs
from daemon.verbs.working import ClaimNextArgs, FailArgs

JOB = {"queue": "q", "type": "t"}


def _refusal(args, cls) -> Refused:
    with pytest.raises(Refused) as info:
        structure(args, cls)
    assert info.value.code == "invalid_argument"
    assert info.value.status == 422
    return info.value


def test_a_valid_job_with_defaults():
    job = structure(dict(JOB), EnqueueArgs)
    assert (job.queue, job.type, job.payload, job.priority, job.max_attempts) == (
        "q", "t", {}, 32768, 25
    )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "got"),
    [(True, "a boolean"), (False, "a boolean"), ("5", "a string"), (1.0, "a number"),
     (5.5, "a number"), (None, "null"), ([5], "an array"), ({"n": 5}, "an object")],
)  # fmt: skip
def test_an_int_field_takes_only_an_int(value, got):
    refusal = _refusal({**JOB, "priority": value}, EnqueueArgs)
    assert refusal.details == {"field": "priority"}
    assert refusal.message == f"priority: expected an integer, got {got}"


@pytest.mark.parametrize("value", [5, True, 1.5, None, ["q"], {"q": 1}])
def test_a_string_field_takes_only_a_string(value):
    assert _refusal({**JOB, "type": value}, EnqueueArgs).details == {"field": "type"}


@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_a_bool_field_takes_only_a_bool(value):
    args = {"job_id": "j", "lease": "l", "error": "e", "dead": value}
    assert _refusal(args, FailArgs).details == {"field": "dead"}


def test_optional_fields_accept_null():
    job = structure({**JOB, "lease_ms": None, "unique_key": None}, EnqueueArgs)
    assert job.lease_ms is None and job.unique_key is None


def test_payload_is_any_json():
    for payload in (None, 1, "x", [1, {"a": None}], {"deep": {"er": [True]}}):
        assert structure({**JOB, "payload": payload}, EnqueueArgs).payload == payload


def test_unknown_keys_are_refused_with_their_name():
    refusal = _refusal({**JOB, "prio": 1}, EnqueueArgs)
    assert refusal.details == {"field": "prio"}
    assert refusal.message == "prio: unknown field 'prio'; did you mean 'priority'?"
    assert _refusal({**JOB, "zzz": 1}, EnqueueArgs).message == "zzz: unknown field 'zzz'"


def test_missing_required_field_is_named():
    refusal = _refusal({"queue": "q"}, EnqueueArgs)
    assert refusal.details == {"field": "type"}
    assert refusal.message == "type is required"


def test_nested_list_item_paths():
    jobs = [dict(JOB), dict(JOB), {**JOB, "priority": "x"}]
    refusal = _refusal({"jobs": jobs}, EnqueueManyArgs)
    assert refusal.details == {"field": "jobs[2].priority"}
    assert refusal.message == "jobs[2].priority: expected an integer, got a string"
    assert _refusal({"jobs": [dict(JOB), {**JOB, "zzz": 1}]}, EnqueueManyArgs).details == {
        "field": "jobs[1].zzz"
    }
    assert _refusal({"jobs": [dict(JOB), {"queue": "q"}]}, EnqueueManyArgs).details == {
        "field": "jobs[1].type"
    }
    assert _refusal({"queues": ["a", 5]}, ClaimNextArgs).details == {"field": "queues[1]"}


def test_range_and_name_checks_refuse():
    for args, cls in [
        ({**JOB, "priority": 70000}, EnqueueArgs),
        ({**JOB, "priority": -1}, EnqueueArgs),
        ({**JOB, "queue": "bad queue"}, EnqueueArgs),
        ({**JOB, "queue": ""}, EnqueueArgs),
        ({**JOB, "queue": "q" * 129}, EnqueueArgs),
        ({**JOB, "delay_ms": 1, "ready_at": 5}, EnqueueArgs),
        ({**JOB, "debounce_ms": 5}, EnqueueArgs),
        ({**JOB, "max_attempts": 0}, EnqueueArgs),
        ({"jobs": []}, EnqueueManyArgs),
        ({"jobs": [dict(JOB)] * 1001}, EnqueueManyArgs),
        ({"queues": []}, ClaimNextArgs),
        ({"queues": ["q"], "max": 0}, ClaimNextArgs),
        ({"queues": ["q"], "max": 2**70}, ClaimNextArgs),
        ({"queues": ["q"], "wait_ms": -1}, ClaimNextArgs),
    ]:
        _refusal(args, cls)


@pytest.mark.parametrize(
    ("args", "cls", "field"),
    [
        ({**JOB, "priority": 70000}, EnqueueArgs, "priority"),
        ({**JOB, "queue": "bad queue"}, EnqueueArgs, "queue"),
        ({**JOB, "delay_ms": 1, "ready_at": 5}, EnqueueArgs, "delay_ms"),
        (
            {"jobs": [dict(JOB), dict(JOB), {**JOB, "priority": -1}]},
            EnqueueManyArgs,
            "jobs[2].priority",
        ),
        ({"jobs": []}, EnqueueManyArgs, "jobs"),
        ({"queues": ["q"], "max": 0}, ClaimNextArgs, "max"),
        ({"queues": ["ok", "b c"]}, ClaimNextArgs, "queues"),
    ],
)
def test_range_and_name_refusals_name_the_field(args, cls, field):
    assert _refusal(args, cls).details == {"field": field}


@pytest.mark.parametrize("value", ["ab", {"a": 1}])
def test_a_list_field_takes_only_an_array(value):
    # Not "ab" as ["a", "b"], nor {"a": 1} as ["a"].
    assert _refusal({"queues": value}, ClaimNextArgs).details == {"field": "queues"}
    assert _refusal({"jobs": value}, EnqueueManyArgs).details == {"field": "jobs"}


@given(st.integers(min_value=0, max_value=65535))
def test_every_priority_in_range_is_accepted(priority):
    assert structure({**JOB, "priority": priority}, EnqueueArgs).priority == priority


@given(st.one_of(st.booleans(), st.floats(allow_nan=False), st.text(), st.none()))
def test_nothing_but_an_int_is_a_priority(value):
    assert _refusal({**JOB, "priority": value}, EnqueueArgs).details == {"field": "priority"}
