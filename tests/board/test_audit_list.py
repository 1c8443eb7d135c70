"""The ``audit_list`` verb the board's histories read."""

from __future__ import annotations

import pytest
import trio

from actors.errors import Refused
from daemon.config import parse_config
from daemon.dispatch import dispatch
from tests.unit.harness import call, running_core

TOKENS = [
    {
        "name": "owner",
        "token": "owner-secret",
        "namespace": "a",
        "grants": ["manage"],
        "queues": ["imag*"],
    },
    {"name": "worker", "token": "worker-secret", "namespace": "a", "grants": ["consume"]},
]


async def test_pages_oldest_first_or_newest_first(tmp_path):
    with trio.fail_after(30):
        async with running_core(tmp_path) as core:
            for n in (1, 2, 3):
                await call(core, "policy_set", queue="q", max_in_flight=n)
            records = (await call(core, "audit_list", target_kind="queue", target="q"))["records"]
            assert [r["after"]["max_in_flight"] for r in records] == [1, 2, 3]
            page = await call(core, "audit_list", newest_first=True, limit=2)
            assert [r["after"]["max_in_flight"] for r in page["records"]] == [3, 2]
            rest = await call(core, "audit_list", newest_first=True, after=page["next"])
            assert [r["after"]["max_in_flight"] for r in rest["records"]] == [1]
            assert rest["next"] is None
            with pytest.raises(Refused) as bad:
                await call(core, "audit_list", target_kind="jobs")
            assert bad.value.details["field"] == "target_kind"


async def test_scoped_to_the_tokens_queues_and_grant(tmp_path):
    config = parse_config({"tokens": TOKENS}, "test.toml")
    with trio.fail_after(30):
        async with running_core(tmp_path, config=config) as core:
            owner = core.auth.check("owner-secret")
            await dispatch(core, owner, "policy_set", {"queue": "images", "max_in_flight": 1})
            core.writer.run_now(
                lambda tx: core.policies.put(
                    tx, "a", "payroll", core.policies.get("a", "images").policy, "someone"
                )
            )
            seen = (await dispatch(core, owner, "audit_list", {}))["records"]
            assert [r["target"] for r in seen] == ["images"]
            hidden = await dispatch(
                core, owner, "audit_list", {"target_kind": "queue", "target": "payroll"}
            )
            assert hidden == {"records": [], "next": None}
            worker = core.auth.check("worker-secret")
            with pytest.raises(Refused) as refused:
                await dispatch(core, worker, "audit_list", {})
            assert refused.value.code == "forbidden"
