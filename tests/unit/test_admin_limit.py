"""The admin write limiter through the real dispatcher, on virtual time."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors.errors import Refused
from actors.quota import Rate
from daemon.admission.admin_limit import ADMIN_WRITES, WriteLimit, write_limit
from daemon.config import ADMIN_WRITE_BURST as BURST
from daemon.config import Config, parse_config, parse_write_rate
from daemon.core import Core
from daemon.dispatch import dispatch
from daemon.session import ALL_GRANTS, Session
from daemon.verbs import VERBS
from tests.unit.harness import running_core

WIF = {"allocation": 5, "strategy": {"type": "while_in_flight"}}
#: Verbs that need a management grant and only read. A new verb that needs one
#: must be put here or in ADMIN_WRITES: the test below fails until it is.
ADMIN_READS = {
    "audit_list", "budget_get", "budget_list", "dead_list", "periodic_list", "policy_get",
    "policy_list", "queue_list", "quota_get",
}  # fmt: skip
MANAGEMENT = {"manage", "operator", "set_admission_policy", "clear_admission_policy"}


def test_every_management_verb_is_classed_as_a_write_or_a_read():
    management = {v.name for v in VERBS.values() if v.grants and set(v.grants) <= MANAGEMENT}
    assert management == ADMIN_WRITES | ADMIN_READS
    assert not ADMIN_WRITES & ADMIN_READS
    assert "dead_replay" not in ADMIN_WRITES  # produce may replay: the door meters it


def token(name: str) -> Session:
    return Session(grants=ALL_GRANTS, token_name=name)


async def put(core: Core, who: Session, key: str = "b", client: str | None = None) -> Any:
    return await dispatch(core, who, "budget_put", {"key": key, **WIF}, client=client)


async def refused(core: Core, who: Session, client: str | None = None) -> Refused:
    with pytest.raises(Refused) as info:
        await put(core, who, client=client)
    return info.value


async def test_a_token_writes_a_burst_of_ten_then_one_a_second(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        ops = token("ops")
        for _ in range(BURST):
            await put(core, ops)
        refusal = await refused(core, ops)
        assert (refusal.code, refusal.status, refusal.message) == (
            "rate_limited", 429, "admin write rate limit exceeded: 1/s, burst 10 "
            "(set write_rate on the token or [daemon] admin_write_rate)")  # fmt: skip
        assert refusal.details == {
            "limit": "admin_writes", "rate": "1/s", "burst": 10, "retry_after": 1}  # fmt: skip
        await trio.sleep(0.999)  # virtual time: autojump_clock
        assert (await refused(core, ops)).details["retry_after"] == 1
        await trio.sleep(0.001)
        await put(core, ops)  # exactly one token a second
        assert (await refused(core, ops)).code == "rate_limited"
        # Reads are not limited, nor are other tokens.
        await dispatch(core, ops, "budget_list", {})
        await put(core, token("other"))


async def test_a_call_refused_before_its_write_costs_nothing(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        ops = token("ops")
        for _ in range(3 * BURST):
            with pytest.raises(Refused) as info:  # malformed: refused while planned
                await dispatch(core, ops, "budget_put", {"key": "b", "allocation": 0})
            assert info.value.code == "invalid_argument"
            with pytest.raises(Refused) as info:  # no such policy: refused while planned
                await dispatch(core, ops, "policy_clear", {"queue": "q"})
            assert info.value.code == "not_found"
        # A refusal found in the write transaction did reach the store: it counts.
        await put(core, ops)
        with pytest.raises(Refused) as info:
            await dispatch(core, ops, "budget_create", {"key": "b", **WIF})
        assert info.value.code == "conflict"
        for _ in range(BURST - 2):
            await put(core, ops)
        assert (await refused(core, ops)).code == "rate_limited"


async def test_open_mode_limits_http_clients_by_address_and_not_the_socket(
    tmp_path, autojump_clock
):
    async with running_core(tmp_path) as core:
        open_session = core.auth.new_session()
        for _ in range(3 * BURST):  # the socket (and in-process callers): no client, no limit
            await put(core, open_session)
        for _ in range(BURST):
            await put(core, open_session, client="10.0.0.1")
        assert (await refused(core, open_session, "10.0.0.1")).code == "rate_limited"
        await put(core, open_session, client="10.0.0.2")


async def test_full_buckets_are_forgotten(tmp_path, autojump_clock):
    async with running_core(tmp_path) as core:
        limiter = core.admin_writes
        await put(core, token("a"))
        for _ in range(BURST):
            await put(core, token("b"))
        assert len(limiter) == 2
        await trio.sleep(61)  # virtual time (autojump_clock): both buckets full again
        await put(core, token("c"))  # the sweep runs on a call
        assert len(limiter) == 1  # only c's bucket, just used
        for _ in range(BURST):  # b's forgotten bucket gave nothing away
            await put(core, token("b"))
        assert (await refused(core, token("b"))).code == "rate_limited"


def test_write_rates_parse_as_enqueue_rate_does_or_say_unlimited():
    assert parse_write_rate("20/s") == Rate(20, "s")
    assert parse_write_rate("3/m") == Rate(3, "m")
    assert parse_write_rate("unlimited") is None
    for bad in ("0/s", "20/x", "fast", "", 20, None):
        with pytest.raises(ValueError, match="unlimited"):
            parse_write_rate(bad)


def _config(daemon: dict[str, Any] | None = None, **tokens: dict[str, Any]) -> Config:
    tables = [{"name": name, "token": f"secret-{name}", **t} for name, t in tokens.items()]
    return parse_config({"daemon": daemon or {}, "tokens": tables}, "test.toml")


def test_each_caller_gets_the_token_s_limit_else_the_daemon_s():
    config = _config(
        {"admin_write_rate": "2/m", "admin_write_burst": 3},
        deploy={"write_rate": "20/s"}, big={"write_rate": "20/s", "write_burst": 50},
        script={"write_rate": "unlimited"}, person={}, burst_only={"write_burst": 7},
    )  # fmt: skip
    assert write_limit(config, "deploy") == WriteLimit(Rate(20, "s"), 20)  # burst: the count
    assert write_limit(config, "big") == WriteLimit(Rate(20, "s"), 50)
    assert write_limit(config, "script") is None
    assert write_limit(config, "person") == WriteLimit(Rate(2, "m"), 3)
    assert write_limit(config, "burst_only") == WriteLimit(Rate(2, "m"), 7)
    assert write_limit(config, None) == WriteLimit(Rate(2, "m"), 3)  # an open-mode HTTP client
    assert write_limit(_config({"admin_write_rate": "unlimited"}), None) is None
    assert write_limit(Config(), None) == WriteLimit(Rate(1, "s"), BURST)


async def test_configured_limits_on_virtual_time(tmp_path, autojump_clock):
    config = _config(
        {"admin_write_rate": "2/m", "admin_write_burst": 3},
        deploy={"write_rate": "20/s"}, script={"write_rate": "unlimited"},
    )  # fmt: skip
    with trio.fail_after(600):
        async with running_core(tmp_path, config=config) as core:
            for _ in range(100):
                await put(core, token("script"))
            for _ in range(3):
                await put(core, token("person"))
            refusal = await refused(core, token("person"))
            assert refusal.message.startswith("admin write rate limit exceeded: 2/m, burst 3 (")
            assert refusal.details["retry_after"] == 30
            for _ in range(20):
                await put(core, token("deploy"))
            assert (await refused(core, token("deploy"))).details["burst"] == 20
            t0 = trio.current_time()
            await trio.sleep(0.05)  # one token of 20/s
            await put(core, token("deploy"))
            assert (await refused(core, token("deploy"))).code == "rate_limited"
            assert trio.current_time() - t0 == pytest.approx(0.05)


async def test_a_reload_applies_at_the_next_write_without_free_tokens(tmp_path, autojump_clock):
    with trio.fail_after(600):
        async with running_core(tmp_path) as core:
            ops = token("ops")
            for _ in range(BURST):
                await put(core, ops)
            core.config = _config({"admin_write_rate": "unlimited"})
            for _ in range(3 * BURST):
                await put(core, ops)
            core.config = _config({"admin_write_rate": "1/s", "admin_write_burst": 2})
            await put(core, ops)  # a new bucket starts full: 2
            await put(core, ops)
            assert (await refused(core, ops)).details["burst"] == 2
            core.config = _config({"admin_write_rate": "10/s", "admin_write_burst": 5})
            # The existing bucket keeps its (empty) count: a raise hands out nothing.
            assert (await refused(core, ops)).details == {
                "limit": "admin_writes", "rate": "10/s", "burst": 5, "retry_after": 1}  # fmt: skip
            await trio.sleep(0.1)
            await put(core, ops)
