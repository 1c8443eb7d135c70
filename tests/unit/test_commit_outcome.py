"""After a COMMIT whose answer was lost (PostgreSQL), the server's word decides
(daemon/store/commit_outcome.py): committed, aborted, asked again while away or
still finishing, and unknown after the bound. Fakes for the pool: the
end-to-end cut is tests/chaos/test_postgres_faults.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.store import bridge, commit_outcome
from daemon.store.commit_outcome import committed_after_all


class Pool:
    """Answers ``txid_status`` from a script: a status, or an error to raise."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, int]] = []

    async def fetchval(self, sql: str, xid: int) -> Any:
        self.asked.append((sql, xid))
        answer = self.answers.pop(0) if self.answers else "in progress"
        if isinstance(answer, BaseException):
            raise answer
        return answer


class Conn:
    def __init__(self, pool: Pool | None, xid: int | None = 42) -> None:
        self.pool = pool
        self.transaction_id = xid


def _resolve(conn: Any) -> bool:
    lost = ConnectionError("connection was closed in the middle of operation")
    return asyncio.run(bridge.run_in_asyncio(None, committed_after_all, conn, lost))


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setattr(commit_outcome, "RETRY_S", (0.001, 0.001))


def test_the_server_s_word_decides_and_is_asked_again_while_away_or_unfinished():
    pool = Pool(OSError("refused"), "in progress", None, "committed")
    conn = Conn(pool)
    assert _resolve(conn) is True
    assert [xid for _sql, xid in pool.asked] == [42] * 4
    assert "txid_status" in pool.asked[0][0]
    assert conn.transaction_id is None  # asked once: never for a later transaction
    assert _resolve(Conn(Pool("aborted"))) is False


def test_no_word_within_the_bound_is_not_taken_for_a_commit(monkeypatch, caplog):
    monkeypatch.setattr(commit_outcome, "RESOLVE_S", 0.02)
    pool = Pool()  # "in progress" for ever
    assert _resolve(Conn(pool)) is False
    assert len(pool.asked) >= 2
    assert "may have been committed" in caplog.text


def test_without_a_transaction_id_or_a_pool_nothing_is_asked():
    pool = Pool("committed")
    assert _resolve(Conn(pool, xid=None)) is False
    assert _resolve(Conn(None)) is False
    assert pool.asked == []
