"""A COMMIT whose answer was lost, on PostgreSQL: ask the server how it ended.

When the connection breaks after the server received ``COMMIT`` and before its
answer arrived (the server stopped or crashed at that instant, the session
was terminated, the network cut), the transaction may have committed. Its
writes must not be answered ``unavailable`` then, which promises that nothing
was written: a producer would enqueue again, and a worker would be told its
completion failed.

So the cluster's epoch bump, every write transaction's first statement on
PostgreSQL, also returns the transaction's id (``txid_current()``, one more
column: :func:`daemon.store.epoch.bump_postgres`), noted on the connection
facade (:attr:`daemon.store.postgres.PgConnection.transaction_id`, cleared at
each ``BEGIN``). When ``COMMIT`` raises, :func:`committed_after_all` asks the
server ``txid_status(id)`` on another pooled connection, trying again with
backoff while the server is away or still finishing the transaction, for at
most :data:`RESOLVE_S`:

- ``committed``: the transaction's writes are answered as done;
- ``aborted``: ``unavailable``, truthfully;
- no answer in time: ``unavailable`` as before, logged as an error, for the
  outcome is unknown (the one case left where ``unavailable`` may be wrong).

The committer waits meanwhile; the writes queued behind it would meet the
same unreachable server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from daemon.store import bridge

log = logging.getLogger("sluicegate.store")

#: The longest wait for the server to say how a transaction ended (seconds):
#: enough for a terminated session or a cut connection, and for a server
#: restarted at once; short, since the committer, and so every write, waits.
RESOLVE_S = 3.0
#: First and longest pause between two questions (seconds).
RETRY_S = (0.05, 1.0)
_STATUS = "SELECT txid_status($1)"


def committed_after_all(conn: Any, exc: BaseException) -> bool:
    """After ``COMMIT`` raised ``exc`` on ``conn`` (inside a bridged call): whether
    the server committed the transaction all the same. False when it did not,
    when it cannot be asked in time, or when the transaction's id is unknown
    (SQLite; a transaction without the epoch bump)."""
    xid = getattr(conn, "transaction_id", None)
    pool = getattr(conn, "pool", None)
    if xid is None or pool is None:
        return False
    conn.transaction_id = None
    deadline = time.monotonic() + RESOLVE_S
    delay = RETRY_S[0]
    while True:
        left = deadline - time.monotonic()
        try:
            status = bridge.await_(asyncio.wait_for(pool.fetchval(_STATUS, xid), max(left, 0.1)))
        except Exception:  # the server still away: ask again
            status = None
        if status in ("committed", "aborted"):
            log.warning("the answer to COMMIT was lost (%r); the server says transaction "
                        "%d %s", exc, xid, status)  # fmt: skip
            return status == "committed"
        if left < delay:
            log.error("the answer to COMMIT was lost (%r) and the server did not say how "
                      "transaction %d ended within %g s: its writes answer unavailable, "
                      "though they may have been committed", exc, xid, RESOLVE_S)  # fmt: skip
            return False
        bridge.await_(asyncio.sleep(delay))
        delay = min(delay * 2, RETRY_S[1])
