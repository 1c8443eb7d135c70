"""The model, run: the Core on SQLite against the reference model (issue 17, part 3).

CI runs it derandomized (the same examples every run) with
``SLUICEGATE_MODEL_EXAMPLES`` examples, 200 unless set. A long run, by hand::

    SLUICEGATE_MODEL_EXAMPLES=20000 .venv/bin/pytest tests/model -n0

How the machine drives Trio from synchronous rules: :mod:`tests.model.driver`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.machine import ModelMachine

EXAMPLES = int(os.environ.get("SLUICEGATE_MODEL_EXAMPLES", "200"))
STEPS = int(os.environ.get("SLUICEGATE_MODEL_STEPS", "40"))

MODEL_SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)


def test_core_agrees_with_the_model():
    run_state_machine_as_test(ModelMachine, settings=MODEL_SETTINGS)
