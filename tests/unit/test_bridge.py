"""The greenlet bridge (daemon/store/bridge.py) and the PostgreSQL statement
translation (daemon/store/postgres.py); no server needed."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import trio
import trio_asyncio

from daemon.store import bridge
from daemon.store.postgres import _count, numbered, postgres_text


async def _value(v, delay=0.0):
    await asyncio.sleep(delay)
    return v


async def _fail():
    await asyncio.sleep(0)
    raise LookupError("from the driver")


async def test_a_bridged_function_awaits_each_statement_and_returns():
    def fn(n):
        return [bridge.await_(_value(i)) for i in range(n)], bridge.current()

    async with trio_asyncio.open_loop():
        values, conn = await bridge.run("conn-A", fn, 3)
    assert values == [0, 1, 2]
    assert conn == "conn-A"


async def test_a_failing_statement_raises_inside_the_function_where_it_was_awaited():
    def fn():
        try:
            bridge.await_(_fail())
        except LookupError as exc:
            return f"caught: {exc}"
        return "not raised"

    async with trio_asyncio.open_loop():
        assert await bridge.run(None, fn) == "caught: from the driver"


async def test_an_error_the_function_does_not_catch_comes_out_of_run():
    def fn():
        bridge.await_(_fail())

    async with trio_asyncio.open_loop():
        with pytest.raises(LookupError, match="from the driver"):
            await bridge.run(None, fn)


async def test_concurrent_calls_each_see_their_own_connection():
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def fn(name):
        for _ in range(3):
            bridge.await_(_value(None, 0.001))
            seen[name].append(bridge.current())

    async with trio_asyncio.open_loop(), trio.open_nursery() as nursery:
        nursery.start_soon(bridge.run, "a", fn, "a")
        nursery.start_soon(bridge.run, "b", fn, "b")
    assert seen == {"a": ["a"] * 3, "b": ["b"] * 3}


def test_outside_the_bridge_a_statement_is_refused_and_its_coroutine_closed():
    coro = _value(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would fail here
        with pytest.raises(bridge.NotBridged):
            bridge.await_(coro)
    assert coro.cr_frame is None  # closed
    with pytest.raises(bridge.NotBridged):
        bridge.current()
    assert not bridge.bridged()


async def test_a_cancelled_call_cancels_the_pending_statement():
    reached = []

    def fn():
        try:
            bridge.await_(_value(None, 60))
        finally:
            reached.append("finally")

    async with trio_asyncio.open_loop():
        with trio.move_on_after(0.05):
            await bridge.run(None, fn)
    assert reached == ["finally"]


def test_parameters_are_numbered_outside_quotes():
    assert numbered("SELECT ? , '?', \"a?\" FROM t WHERE x = ? AND y IN (?, ?)") == (
        "SELECT $1 , '?', \"a?\" FROM t WHERE x = $2 AND y IN ($3, $4)"
    )


def test_sqlite_spellings_become_postgresql_ones():
    assert postgres_text("SELECT id FROM jobs INDEXED BY ix_jobs_queue WHERE a = ?") == (
        "SELECT id FROM jobs WHERE a = $1"
    )
    assert postgres_text("SELECT length(CAST(payload AS BLOB)) FROM jobs") == (
        "SELECT octet_length(payload) FROM jobs"
    )
    assert postgres_text("SELECT n, SUM(jobs - rolled) FROM u GROUP BY n") == (
        "SELECT n, SUM(jobs - rolled)::bigint FROM u GROUP BY n"
    )


def test_rows_changed_come_from_the_status_line():
    assert _count("UPDATE 3") == 3
    assert _count("INSERT 0 1") == 1
    assert _count("DELETE 0") == 0
    assert _count("BEGIN") == 0
