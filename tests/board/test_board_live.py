"""Live updates (SSE) on virtual time: driven by commits and window resets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import orjson
import trio

from daemon.board import live
from daemon.board.app import board_app
from daemon.core import Core
from tests.unit.harness import call, running_core

HOURLY = {"period": "hour", "tz": "UTC", "start": "00:00"}


def decode(chunk: bytes) -> tuple[str, Any]:
    """One SSE chunk: (event name, data); comments and ``retry`` as ("", text)."""
    text = chunk.decode()
    if not text.startswith("event: "):
        return "", text
    head, data = text.strip().split("\n", 1)
    return head[len("event: ") :], orjson.loads(data[len("data: ") :])


async def events_of(core: Core, queue: str | None) -> AsyncIterator[bytes]:
    board = board_app(core)
    session = core.auth.new_session()
    return live.stream(
        core, board.pulse, lambda: session, lambda s: board.fragments(s, "default", queue)
    )


async def until(stream: AsyncIterator[bytes], wanted: str) -> tuple[str, Any]:
    while True:
        name, data = decode(await stream.__anext__())
        if name == wanted:
            return name, data


async def test_a_claim_updates_the_header_within_a_second(tmp_path, autojump_clock):
    with trio.fail_after(60):
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="images", max_in_flight=5)
            await call(core, "enqueue", queue="images", type="t")
            stream = await events_of(core, "images")
            first = {}
            for _ in range(4):  # retry, then the three fragments of a queue page
                name, data = decode(await stream.__anext__())
                if name == "fragment":
                    first[data["id"]] = data["html"]
            assert set(first) == {"live-images", "pending-list", "running-list"}
            assert "0 of 5 in flight" in first["live-images"]
            t0 = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(call, core, "claim_next", queues=["images"]))
                _, data = await until(stream, "fragment")
            assert data["id"] == "live-images" and "1 of 5 in flight" in data["html"]
            assert trio.current_time() - t0 < 1
            await stream.aclose()


async def test_exhaustion_is_announced_and_the_reset_reopens_without_a_write(
    tmp_path, autojump_clock
):
    with trio.fail_after(2 * 3600):  # virtual: the next hourly reset is under an hour away
        async with running_core(tmp_path) as core:
            await call(core, "policy_set", queue="q", max_claims_per_window=1, window=HOURLY)
            await call(core, "enqueue", queue="q", type="t")
            await call(core, "enqueue", queue="q", type="t")
            stream = await events_of(core, None)
            _, data = await until(stream, "fragment")
            assert "0 of 1 used" in data["html"]
            await call(core, "claim_next", queues=["q"])
            _, said = await until(stream, "announce")
            assert said["text"].startswith("Queue q is now exhausted. Eligible again ")
            resets = core.policies.get("default", "q").meters[0].end
            _, data = await until(stream, "fragment")
            assert "1 of 1 used" in data["html"] and "exhausted" in data["html"]
            _, data = await until(stream, "fragment")  # nothing was written: the reset woke it
            assert core.clock.now_ms() >= resets
            assert "0 of 1 used" in data["html"] and "admitted" in data["html"]
            await stream.aclose()


async def test_the_stream_ends_when_the_session_goes(tmp_path, autojump_clock):
    with trio.fail_after(60):
        async with running_core(tmp_path) as core:
            board = board_app(core)
            sessions = [core.auth.new_session()]
            stream = live.stream(
                core,
                board.pulse,
                lambda: sessions[0] if sessions else None,
                lambda s: board.fragments(s, "default", None),
            )
            await stream.__anext__()
            sessions.clear()
            await call(core, "enqueue", queue="q", type="t")  # a commit wakes it
            assert decode(await stream.__anext__())[0] == "end"
            await stream.aclose()


async def test_the_drain_ends_an_open_stream_at_once(tmp_path, autojump_clock):
    with trio.fail_after(60):
        async with running_core(tmp_path) as core:
            stream = await events_of(core, None)
            await stream.__anext__()  # retry
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(until, stream, "end"))
                await trio.sleep(1)  # virtual time: the stream waits (keepalive in 15 s)
                t0 = trio.current_time()
                core.drain()  # no commit: only the drain wakes the stream
            assert trio.current_time() - t0 < 1  # not the 15 s keepalive
            await stream.aclose()
