"""``answer: "minimal"`` (PROTOCOL.md, "Smaller answers"): ``enqueue``,
``complete``, ``fail``, ``heartbeat`` and ``release`` answer ``{job: {id,
status, lease?}}`` and their other top-level fields; the write is the same."""

from __future__ import annotations

import pytest

from actors import lifecycle as lc
from actors.errors import Refused
from tests.unit.harness import call, claim_jobs, enqueue_answer, job_row, running_core


async def test_enqueue_answers_the_id_and_status_and_its_other_fields(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        small = await enqueue_answer(core, payload={"big": "x" * 1000}, answer="minimal")
        job_id = small["job"]["id"]
        assert small == {"job": {"id": job_id, "status": lc.PENDING},
                         "duplicate": False, "folded": False, "shed": False}  # fmt: skip
        assert job_row(core, job_id)["state"] == lc.PENDING  # written as with a full answer
        again = await enqueue_answer(core, unique_key="u", answer="minimal")
        dup = await enqueue_answer(core, unique_key="u", answer="minimal")
        assert dup["duplicate"] and dup["job"] == {"id": again["job"]["id"], "status": "pending"}
        full = await enqueue_answer(core, answer="full")
        assert full["job"]["payload"] == {} and full["job"]["attempts"] == 0


async def test_the_lease_verbs_answer_small_with_the_lease_where_one_is_held(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        for _ in range(4):
            await enqueue_answer(core)
        a, b, c, d = await claim_jobs(core, max=4)
        beat = await call(core, "heartbeat", job_id=a["id"], lease=a["lease"], answer="minimal")
        assert beat["job"] == {"id": a["id"], "status": lc.RUNNING, "lease": a["lease"]}
        assert beat["lease_expires_at"] > a["lease_expires_at"] - 1
        done = await call(core, "complete", job_id=a["id"], lease=a["lease"], answer="minimal")
        assert done == {"job": {"id": a["id"], "status": lc.COMPLETED}}
        failed = await call(core, "fail", job_id=b["id"], lease=b["lease"], error="e",
                            answer="minimal")  # fmt: skip
        assert failed["job"]["id"] == b["id"] and set(failed["job"]) == {"id", "status"}
        assert failed["job"]["status"] in (lc.SCHEDULED, lc.PENDING)
        back = await call(core, "release", job_id=c["id"], lease=c["lease"], answer="minimal")
        assert back == {"job": {"id": c["id"], "status": lc.PENDING}}
        full = await call(core, "complete", job_id=d["id"], lease=d["lease"], answer="full")
        assert full["job"]["finished_at"] is not None and full["job"]["id"] == d["id"]


@pytest.mark.parametrize("value", ["tiny", "", None, 1, True, ["minimal"], {"a": 1}])
async def test_an_unknown_answer_form_is_refused_and_writes_nothing(
    tmp_path, autojump_clock, value
):
    async with running_core(tmp_path) as core:
        with pytest.raises(Refused) as refused:
            await enqueue_answer(core, answer=value)
        assert (refused.value.code, refused.value.details.get("field")) == (
            "invalid_argument",
            "answer",
        )
        assert core.conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


@pytest.mark.parametrize("op", ["enqueue_many", "claim_next", "get", "complete_many"])
async def test_other_verbs_refuse_answer_as_an_unknown_field(tmp_path, autojump_clock, op):
    args = {
        "enqueue_many": {"jobs": [{"queue": "q", "type": "t"}]},
        "claim_next": {"queues": ["q"]},
        "get": {"job_id": "x"},
        "complete_many": {"jobs": [{"job_id": "x", "lease": "y"}]},
    }[op]
    async with running_core(tmp_path) as core:
        with pytest.raises(Refused) as refused:
            await call(core, op, **args, answer="minimal")
        assert refused.value.code == "invalid_argument"
        assert "answer" in refused.value.message
        assert core.conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
