"""Opening the SQLite database: WAL mode, pragmas, migrations, and a clear error.

The daemon opens its one file here, at start; a file system that refuses
(disk full, read-only, I/O error, not a database) is one
:class:`~daemon.store.health.StoreUnavailable` naming the path and the cause,
never a traceback.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from daemon.store.health import StoreHealth, StoreUnavailable, is_store_failure
from daemon.store.schema import migrate
from daemon.store.sqlite_lib import sqlite_utils


def open_database(
    path: Path | str,
    synchronous: str = "normal",
    *,
    autocheckpoint: bool = True,
    journal_size_limit: int = 64 << 20,
) -> sqlite_utils.Database:
    """Open (creating and migrating) the database at ``path`` in WAL mode.

    ``autocheckpoint=False`` leaves WAL checkpoints to a
    :class:`~daemon.store.checkpointer.Checkpointer`. A WAL reset after a
    checkpoint truncates the file to ``journal_size_limit`` bytes.

    Raises :class:`~daemon.store.health.StoreUnavailable` naming the path and
    the cause when the file system refuses (disk full, read-only, I/O error,
    not a database).
    """
    if synchronous not in ("normal", "full"):
        raise ValueError("synchronous must be 'normal' or 'full'")
    conn: sqlite3.Connection | None = None
    try:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, cached_statements=512
        )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute(f"PRAGMA journal_size_limit = {int(journal_size_limit)}")
        if not autocheckpoint:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("PRAGMA cache_size = -65536")  # 64 MiB of page cache
        db = sqlite_utils.Database(conn)
        migrate(db)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, OSError) or is_store_failure(exc):
            cause = str(exc)
            if isinstance(exc, OSError) and exc.errno:
                cause = os.strerror(exc.errno)
                cause = cause[:1].lower() + cause[1:]  # "file exists", as in a sentence
            if not StoreHealth(path).has_headroom():  # SQLite may say only "disk I/O error"
                cause = f"{cause} (the filesystem is full)"
            raise StoreUnavailable(f"cannot open the database {path}: {cause}") from exc
        if isinstance(exc, sqlite3.Error):  # not a store failure, but no store either
            raise StoreUnavailable(f"cannot open the database {path}: {exc}") from exc
        raise
    return db
