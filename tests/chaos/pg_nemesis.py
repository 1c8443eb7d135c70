"""PostgreSQL's faults for the chaos tests (tests/chaos/test_postgres_faults.py),
and the database's own record of every move into and out of ``running``.

- :func:`terminate_backends`: ``pg_terminate_backend`` on a seeded random
  choice of one database's server connections (the daemons'), from an admin
  connection to another database, so the shared server's other databases are
  never touched.
- :data:`RECORDER`: a trigger that writes each job's move into or out of
  ``running`` to a table ``moves`` with a sequence number, in the database the
  daemons share; :func:`running_peaks` replays it in commit order (the
  sequence is taken under the row's lock, and the daemons' write transactions
  run one at a time under the cluster's epoch lock), so a peak above a queue's
  ``max_in_flight`` is an over-admission the database itself saw.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import asyncpg

from tests.postgres import CONNECT_TIMEOUT, run_asyncio

_BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() ORDER BY pid"
)
_TERMINATE = (
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest($1::int[]) AS pid"
)


def terminate_backends(admin_dsn: str, database: str, rng: random.Random,
                       everyone: bool = False) -> int:  # fmt: skip
    """Terminate a random non-empty subset (``everyone``: all) of the server
    connections to ``database``; how many were terminated."""

    async def run() -> int:
        conn = await asyncpg.connect(admin_dsn, timeout=CONNECT_TIMEOUT)
        try:
            pids = [r[0] for r in await conn.fetch(_BACKENDS, database)]
            if not pids:
                return 0
            chosen = pids if everyone else rng.sample(pids, rng.randint(1, len(pids)))
            return int(await conn.fetchval(_TERMINATE, chosen))
        finally:
            await conn.close()

    return run_asyncio(run())


RECORDER = (
    "CREATE TABLE moves (seq bigserial PRIMARY KEY, id text, queue text, "
    "source text, target text, at bigint, budgets text)",
    """CREATE FUNCTION record_move() RETURNS trigger AS $$
    BEGIN
      IF OLD.state IS DISTINCT FROM NEW.state
         AND (OLD.state = 'running' OR NEW.state = 'running') THEN
        INSERT INTO moves (id, queue, source, target, at, budgets)
        VALUES (NEW.id, NEW.queue, OLD.state, NEW.state, NEW.updated_at, NEW.budgets);
      END IF;
      RETURN NEW;
    END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER record_move AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION record_move()",
)
#: The record, in commit order: (seq, id, queue, source, target, at, budgets).
MOVES = "SELECT seq, id, queue, source, target, at, budgets FROM moves ORDER BY seq"


def running_peaks(moves: Iterable[tuple[Any, ...]]) -> dict[str, int]:
    """The most jobs running at once per queue, replaying :data:`MOVES`' rows."""
    running: dict[str, int] = defaultdict(int)
    peaks: dict[str, int] = defaultdict(int)
    for _seq, _id, queue, source, target, *_ in moves:
        if target == "running":
            running[queue] += 1
            peaks[queue] = max(peaks[queue], running[queue])
        elif source == "running":
            running[queue] -= 1
    return dict(peaks)
