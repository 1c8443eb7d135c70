"""daemon/verbs/args.py: the hot verbs' fast checks agree with the converter.

Whatever the arguments, the fast check either returns exactly what the
converter makes of them, or declines (None) and leaves the refusal to it.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.errors import Refused
from daemon.verbs.args import converter, structure
from daemon.verbs.fast_checks import (
    _ENQUEUE,
    FAST,
    _maker,
    fast_complete,
    fast_complete_many,
    register_fast,
)
from daemon.verbs.producing import EnqueueArgs, EnqueueManyArgs
from daemon.verbs.working import ClaimNextArgs, CompleteArgs, CompleteManyArgs

deep: list = []
for _ in range(300):
    deep = [deep]

ODD = st.sampled_from(
    [None, True, False, 0, 1, -1, 1.5, 65535, 65536, 100_000, 100_001, 86_400_000, 86_400_001,
     3_600_000, 3_600_001, 2**63, "", "q", "a" * 64, "a" * 65, "a" * 128, "a" * 129, "a" * 256,
     "bad name", "ok.name:1-2", [], ["q"], [1], {}, {"k": 1}, deep, b"bytes",
     "é" * 64, "é" * 65, "a\nb", "customer 42/ü"]
)  # fmt: skip


def _args(keys: tuple[str, ...]) -> st.SearchStrategy[dict]:
    return st.dictionaries(st.sampled_from((*keys, "extra")), ODD, max_size=len(keys) + 1)


def _agree(cls: type, args: dict) -> None:
    fast = FAST[cls](dict(args))
    if fast is not None:  # accepted: the converter must accept it alike
        assert fast == converter.structure(dict(args), cls)


def test_every_hot_class_has_its_check():
    assert set(FAST) == {
        EnqueueArgs, EnqueueManyArgs, ClaimNextArgs, CompleteArgs, CompleteManyArgs,
    }  # fmt: skip


@given(_args(_ENQUEUE))
@settings(max_examples=400, deadline=None)
def test_enqueue(args):
    _agree(EnqueueArgs, args)


BINDING = st.dictionaries(
    st.sampled_from(("key", "cost", "create_with", "extra")),
    st.one_of(ODD, st.sampled_from(["a", "b", "gpu", 2, 2**31 - 1, 2**31])),
    max_size=3,
)


@given(st.one_of(ODD, st.lists(st.one_of(BINDING, ODD), max_size=17)))
@settings(max_examples=400, deadline=None)
def test_enqueue_bindings(budgets):
    _agree(EnqueueArgs, {"queue": "q", "type": "t", "budgets": budgets})


@given(st.lists(_args(_ENQUEUE), max_size=3))
@settings(max_examples=200, deadline=None)
def test_enqueue_many(jobs):
    _agree(EnqueueManyArgs, {"jobs": jobs})


@given(_args(("queues", "max", "wait_ms", "lease_ms")))
@settings(max_examples=300, deadline=None)
def test_claim_next(args):
    _agree(ClaimNextArgs, args)


@given(_args(("job_id", "lease", "result")))
@settings(max_examples=300, deadline=None)
def test_complete(args):
    _agree(CompleteArgs, args)


@given(st.lists(_args(("job_id", "lease", "result")), max_size=3))
@settings(max_examples=200, deadline=None)
def test_complete_many(jobs):
    _agree(CompleteManyArgs, {"jobs": jobs})


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (EnqueueArgs, {"queue": "q", "type": "t"}),
        (EnqueueArgs, {"queue": "q", "type": "t", "payload": {"a": [1, 2.5, None]}, "priority": 0,
                       "delay_ms": 5, "max_attempts": 1, "lease_ms": 10, "unique_key": "u",
                       "debounce_ms": None, "budgets": None}),
        (EnqueueArgs, {"queue": "q", "type": "t", "unique_key": "u", "debounce_ms": 0}),
        (EnqueueArgs, {"queue": "q", "type": "t",
                       "budgets": [{"key": "gpu", "cost": 3}, {"key": "api"}]}),
        (EnqueueManyArgs, {"jobs": [{"queue": "q", "type": "t", "payload": i} for i in range(3)]}),
        (ClaimNextArgs, {"queues": ["a", "b"], "max": 1000, "wait_ms": 0, "lease_ms": None}),
        (ClaimNextArgs, {"queues": ["a"]}),
        (CompleteArgs, {"job_id": "j", "lease": "l", "result": {"ok": True}}),
        (CompleteArgs, {"job_id": "j", "lease": "l"}),
        (CompleteManyArgs, {"jobs": [{"job_id": "j", "lease": "l"}] * 3}),
    ],
)  # fmt: skip
def test_valid_arguments_take_the_fast_path(cls, args):
    fast = FAST[cls](dict(args))
    assert fast is not None
    assert fast == converter.structure(dict(args), cls)


@pytest.mark.parametrize(
    "args",
    [
        {"queue": "q", "type": "t", "delay_ms": 1, "ready_at": 1},
        {"queue": "q", "type": "t", "debounce_ms": 1},
        {"queue": "q", "type": "t", "budgets": [{"key": "b", "cost": 0}]},
        {"queue": "q", "type": "t", "payload": deep},
        {"queue": "q", "type": "t", "priority": True},
    ],
)
def test_refusals_are_left_to_the_converter(args):
    assert FAST[EnqueueArgs](dict(args)) is None
    with pytest.raises(Refused) as refused:
        structure(dict(args), EnqueueArgs)
    assert refused.value.code == "invalid_argument"


@attrs.frozen
class _GrownComplete:
    """CompleteArgs with a field its fast check was not written for."""

    job_id: str
    lease: str
    result: Any = None
    extra: int = 0


@attrs.frozen
class _GrownBatch:
    jobs: list[_GrownComplete]


def test_a_class_whose_fields_changed_keeps_the_converter_alone():
    register_fast(_GrownComplete, fast_complete)
    register_fast(_GrownBatch, fast_complete_many)  # its items have no fast check
    assert _GrownComplete not in FAST and _GrownBatch not in FAST
    assert structure({"job_id": "j", "lease": "l", "extra": 1}, _GrownComplete).extra == 1


def test_the_maker_sets_every_field_by_name_and_refuses_a_missing_or_unknown_one():
    make = _maker(CompleteArgs)
    made = make(job_id="j1", lease="l1", result={"ok": 1}, cost=None)
    assert made == CompleteArgs(job_id="j1", lease="l1", result={"ok": 1}, cost=None)
    with pytest.raises(TypeError):
        make(job_id="j1", lease="l1", result=None)  # cost left out
    with pytest.raises(TypeError):
        make(job_id="j1", lease="l1", result=None, cost=None, extra=1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.lease = "other"  # still frozen
