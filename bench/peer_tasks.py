"""The peers' apps and no-op jobs, built from the environment when imported.

The peers' worker processes are their own commands (``dramatiq peer_tasks``,
``huey_consumer peer_tasks.huey``), started with this directory on the path;
the producer process imports this module too, once its environment is set.
``PEERS_SYSTEM`` says what to build (``dramatiq``, ``huey-redis``,
``huey-sqlite`` or ``huey-sqlite-normal``), ``PEERS_REDIS_URL`` or
``PEERS_SQLITE`` where its broker is, ``PEERS_TALLY`` where
:func:`~peer_tally.record` counts the jobs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from peer_tally import QUEUE, record

SYSTEM = os.environ.get("PEERS_SYSTEM", "")
SQLITE_BUSY_S = 20.0  # under peers.py's default stall timeout (30 s)

if SYSTEM == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    # dramatiq's default middleware (age and time limits, retries, ...); no results.
    broker = RedisBroker(url=os.environ["PEERS_REDIS_URL"])
    dramatiq.set_broker(broker)

    @dramatiq.actor(queue_name=QUEUE)
    def noop(n: int) -> None:
        """The job: count it."""
        record(n)

elif SYSTEM.startswith("huey"):
    from huey import RedisHuey, SqliteHuey
    from huey.storage import SqliteStorage

    class NormalSqliteStorage(SqliteStorage):
        """huey's SQLite storage with ``synchronous = NORMAL``, which huey does not
        offer (only ``fsync=True``: FULL, ``False``: OFF); the opt-in system
        ``huey-sqlite-normal``, for a like-for-like look beside Sluicegate's NORMAL."""

        def _create_connection(self) -> Any:
            conn = super()._create_connection()
            conn.execute("PRAGMA synchronous = NORMAL")
            return conn

    # results=False: a task's return value is never stored (a no-op's None would
    # not be either, but this says so). SqliteHuey's fsync=None leaves SQLite's
    # own default synchronous: FULL in WAL with this SQLite, an fsync per commit.
    if SYSTEM == "huey-redis":
        huey = RedisHuey(QUEUE, url=os.environ["PEERS_REDIS_URL"], results=False)
    else:
        huey = SqliteHuey(
            QUEUE,
            filename=os.environ["PEERS_SQLITE"],
            results=False,
            storage_class=NormalSqliteStorage if SYSTEM == "huey-sqlite-normal" else None,
            # SQLite's busy timeout; huey's default 5 s failed the producer with "database
            # is locked" at load 6 (three writers, an fsync each, SQLite's unfair busy wait).
            timeout=SQLITE_BUSY_S,
        )

    @huey.task()
    def noop(n: int) -> None:
        """The job: count it."""
        record(n)

    @huey.on_startup()
    def ready() -> None:
        """A worker process is about to loop: say so to the parent (a file per pid)."""
        Path(os.environ["PEERS_TALLY"] + f".ready-{os.getpid()}").touch()
