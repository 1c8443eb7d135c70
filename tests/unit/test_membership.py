"""daemon/admission/membership.py: each daemon's share of the per-daemon limits
(issue 15's door split). The members table is the same in both dialects; the
core runs on SQLite here, and other daemons are rows another writer put there.
"""

from __future__ import annotations

import trio

from daemon.admission.membership import HEARTBEAT_S, Membership
from tests.unit.harness import running_core


def member(core, name: str) -> None:
    """Another daemon's heartbeat, as it shows in the database."""
    now = core.clock.now_ms()
    with core.conn:
        core.conn.execute(
            "INSERT INTO members (daemon, joined_at, heartbeat_at) VALUES (?, ?, ?) "
            "ON CONFLICT (daemon) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
            (name, now, now),
        )


async def test_a_daemon_alone_takes_the_whole_limit_at_once(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core, trio.open_nursery() as nursery:
        shares: list[float] = []
        membership = Membership(committer=core.writer, now_ms=core.clock.now_ms,
                                set_share=shares.append)  # fmt: skip
        await nursery.start(membership.run)
        assert shares == [0.0, 1.0]  # no 3 s of refusals for a lone daemon
        member(core, "other")  # a second daemon registers: this one halves at its beat
        await trio.sleep(HEARTBEAT_S * 1.5 + 0.1)  # virtual time (autojump_clock)
        assert shares[-1] == 0.5
        nursery.cancel_scope.cancel()


async def test_a_daemon_joining_others_waits_until_they_have_counted_it(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core, trio.open_nursery() as nursery:
        member(core, "other")
        shares: list[float] = []
        membership = Membership(committer=core.writer, now_ms=core.clock.now_ms,
                                set_share=shares.append)  # fmt: skip
        await nursery.start(membership.run)
        assert shares == [0.0] and membership.members == 2
        await trio.sleep(HEARTBEAT_S * 1.5 - 0.1)  # virtual time (autojump_clock)
        assert shares == [0.0]  # the other may still use the whole limit
        member(core, "other")
        await trio.sleep(0.2)  # virtual time (autojump_clock)
        assert shares == [0.0, 0.5]
        nursery.cancel_scope.cancel()


async def test_a_clean_stop_leaves_and_no_heartbeat_brings_the_row_back(tmp_path, autojump_clock):
    async with running_core(tmp_path, timers=False) as core, trio.open_nursery() as nursery:
        membership = Membership(committer=core.writer, now_ms=core.clock.now_ms,
                                set_share=lambda _share: None)  # fmt: skip
        await nursery.start(membership.run)
        rows = "SELECT daemon FROM members"
        assert core.conn.execute(rows).fetchall() == [(membership.name,)]
        membership.leave()  # what the daemon's drain does
        await trio.sleep(HEARTBEAT_S * 4)  # virtual time (autojump_clock)
        assert core.conn.execute(rows).fetchall() == []
        nursery.cancel_scope.cancel()
