"""Live updates: Server-Sent Events driven by the daemon's commits.

:class:`Pulse` is one ``after_commit`` hook of the group committer: every
committed transaction (an enqueue, a claim, a completion, a policy or budget
write, a reaped lease) wakes the board's open streams. A stream then re-reads
its headers and chips through the verbs and sends only the fragments that
changed, as ``fragment`` events, plus an ``announce`` event when a queue
becomes exhausted, paused or unavailable (for the ``aria-live`` region).

Besides commits, a stream wakes at the next window reset or eligible instant
of the queues it shows (a window reopens without any write), and every
:data:`KEEPALIVE_S` to send a comment: that is how a closed connection is
noticed, and it also picks up the rare change that commits nothing (a quota
document that stopped decoding). After a wake it waits :data:`COALESCE_S`
so a busy daemon costs a stream at most a few renders a second. The
daemon's drain rings the pulse too (``core.on_drain``), so an open board
never holds a shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import orjson
import trio

from daemon.board import present
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.services import Services

KEEPALIVE_S = 15.0
COALESCE_S = 0.15
#: What a stream renders: (fragments by element id, headers by queue).
Render = Callable[[Session], tuple[dict[str, str], list[dict[str, Any]]]]


class Pulse:
    """Wakes live streams after each commit, and samples budget levels."""

    def __init__(self, core: Services) -> None:
        self._core = core
        self._event = trio.Event()
        self.listeners = 0
        core.writer.after_commit.append(self.ring)
        core.on_drain.append(self._wake)

    def ring(self) -> None:
        """After a commit (cheap: called for every transaction)."""
        core = self._core
        core.history.sample(core.budgets.items(), core.clock.now_ms())
        self._wake()

    def _wake(self) -> None:
        if self.listeners:
            self._event.set()
            self._event = trio.Event()

    async def wait(self, deadline: float) -> bool:
        """Until the next commit (True) or ``deadline`` (trio time, False)."""
        event = self._event
        self.listeners += 1
        try:
            with trio.move_on_at(deadline):
                await event.wait()
        finally:
            self.listeners -= 1
        return event.is_set()


def sse(event: str, data: Any) -> bytes:
    """One Server-Sent Event."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def announcement(h: dict[str, Any]) -> str:
    """What a screen reader hears when a queue becomes held back."""
    text = f"Queue {h['queue']} is now {h['word']}."
    at = h.get("next_eligible_at") or (
        h.get("resets_at") if h["label"] == "window_exhausted" else None
    )
    if at:
        text += f" Eligible again {present.in_zone(at, h.get('tz'))}."
    return text


async def stream(
    core: Services, pulse: Pulse, session_of: Callable[[], Session | None], render: Render
) -> AsyncIterator[bytes]:
    """The events of one board page, until the client leaves or the daemon drains."""
    sent: dict[str, str] = {}
    labels: dict[str, str] | None = None
    yield b"retry: 2000\n\n"
    while True:
        session = session_of()
        if session is None or core.draining:
            yield sse("end", {})
            return
        fragments, headers = render(session)
        for ident, html in fragments.items():
            if sent.get(ident) != html:
                yield sse("fragment", {"id": ident, "html": html})
        sent = fragments
        now_labels = {h["queue"]: h["label"] for h in headers}
        if labels is not None:
            for h in headers:
                label = h["label"]
                if label != labels.get(h["queue"]) and label in present.ANNOUNCED:
                    yield sse("announce", {"text": announcement(h)})
        labels = now_labels
        deadline = trio.current_time() + KEEPALIVE_S
        now_ms = core.clock.now_ms()
        for h in headers:
            for at in (h.get("resets_at"), h.get("next_eligible_at"), h.get("wakes_at")):
                if at is not None and at > now_ms:
                    deadline = min(deadline, core.clock.deadline_for(at) + 0.05)
        if not core.draining:
            await pulse.wait(deadline)  # a commit, the drain, or the deadline
        if trio.current_time() >= deadline:
            yield b": keepalive\n\n"
        await trio.sleep(COALESCE_S)
