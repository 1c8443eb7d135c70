"""Online backups of the SQLite store and their restore: ``sluice backup`` / ``sluice restore``.

A backup is SQLite's backup API (``sqlite3.Connection.backup``) run in steps
from a read-only connection that holds one read transaction from the first
step to the last. In WAL mode that transaction pins one snapshot: the daemon
goes on committing (readers never block the writer) and the copy is the
store exactly as it stood when the transaction began, never restarted by
those commits (a step-wise backup without it starts over whenever another
connection writes between two steps). The copy is written to a temporary
file beside the target (in rollback-journal mode: one self-contained file),
checked with ``PRAGMA integrity_check``, fsynced and renamed into place, so a
target path never holds half a backup.

A restore checks the backup (``integrity_check``, a Sluicegate schema no newer
than this build), copies it beside the live database, fsyncs it, and renames
it over the database while holding the daemon's own lock on the state
directory (:class:`~daemon.pid_lock.PidLock`): a running daemon makes it
refuse, and no daemon can start while it runs. The replaced database is
checkpointed first (so SQLite itself folds and removes its ``-wal`` and
``-shm``), kept under a dated name beside it, and any ``-wal``/``-shm`` left
are removed before the rename, since WAL frames of the old database would be
replayed onto the new one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import attrs

from daemon.pid_lock import PidLock
from daemon.startup import StartupError
from daemon.store.schema import MIGRATIONS

#: Pages copied per step of a backup (4 KiB pages: 4 MiB a step).
STEP_PAGES = 1024
#: ``progress(done_pages, total_pages)``.
ProgressFn = Callable[[int, int], None]


class BackupRefused(Exception):
    """A backup or restore that was not done: the message says why; nothing changed."""


@attrs.frozen
class BackupReport:
    """What a backup wrote."""

    source: str
    target: str
    pages: int
    bytes: int
    version: int
    jobs: int
    seconds: float


@attrs.frozen
class RestoreReport:
    """What a restore did."""

    backup: str
    database: str
    version: int
    jobs: int
    #: Where the replaced database was kept (None: there was none).
    kept: str | None
    #: ``-wal`` / ``-shm`` files of the replaced database removed after its checkpoint.
    removed: tuple[str, ...]
    seconds: float


def _readonly(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def check_store_file(path: Path) -> tuple[int, int]:
    """``(schema version, jobs)`` of a Sluicegate SQLite file that passes
    ``PRAGMA integrity_check``; else :class:`BackupRefused` saying what is wrong."""
    if not path.exists():
        raise BackupRefused(f"no such file: {path}")
    if not path.is_file():
        raise BackupRefused(f"not a regular file: {path}")
    try:
        conn = _readonly(path)
    except sqlite3.Error as exc:
        raise BackupRefused(f"cannot open {path}: {exc}") from None
    try:
        result = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if result != ["ok"]:
            shown = "; ".join(str(r) for r in result[:3])
            raise BackupRefused(f"{path} fails integrity_check: {shown}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if version < 1 or "jobs" not in tables:
            raise BackupRefused(
                f"{path} is a SQLite database but not a Sluicegate store "
                f"(schema version {version}, no jobs table)"
                if "jobs" not in tables
                else f"{path} is not a Sluicegate store (schema version {version})"
            )
        if version > len(MIGRATIONS):
            raise BackupRefused(
                f"{path} has schema version {version}, newer than this sluicegate "
                f"({len(MIGRATIONS)}); restore it with the release that wrote it"
            )
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):  # no SQLite header
            raise BackupRefused(f"{path} is not a SQLite database: {exc}") from None
        raise BackupRefused(f"{path} is damaged: {exc}") from None  # "malformed", torn pages
    finally:
        conn.close()
    return version, jobs


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_beside(target: Path, tag: str) -> Path:
    return target.with_name(f".{target.name}.{tag}-{os.getpid()}-{time.monotonic_ns()}")


@contextlib.contextmanager
def _removed_on_failure(path: Path) -> Iterator[None]:
    try:
        yield
    except BaseException:
        for leftover in (path, Path(f"{path}-journal"), Path(f"{path}-wal"), Path(f"{path}-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        raise


def _copy(source: sqlite3.Connection, temp: Path, pages: int, progress: ProgressFn | None) -> int:
    """Copy ``source`` into the new file ``temp`` in steps inside one read
    transaction; fsync it; return its page count."""
    total = [0]

    def step(_status: int, remaining: int, count: int) -> None:
        total[0] = count
        if progress is not None:
            progress(count - remaining, count)

    target = sqlite3.connect(temp, isolation_level=None)
    try:
        source.execute("BEGIN")
        source.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot starts
        try:
            source.backup(target, pages=pages, progress=step)
        finally:
            source.execute("COMMIT")
        # A self-contained file: the rollback journal, not the source's WAL mode, so
        # that reading it (a restore, even from a read-only mount) leaves no -wal/-shm.
        target.execute("PRAGMA journal_mode = DELETE")
    finally:
        target.close()
    _fsync(temp)
    return total[0]


def backup_store(
    database: Path,
    target: Path,
    *,
    force: bool = False,
    pages: int = STEP_PAGES,
    progress: ProgressFn | None = None,
) -> BackupReport:
    """Copy the live store ``database`` to ``target``, consistently, while a daemon serves.

    Refuses (:class:`BackupRefused`, nothing written) an existing ``target``
    unless ``force``, a missing or non-Sluicegate ``database``, or a target
    directory that does not exist; a copy failing ``integrity_check`` is
    removed and refused.
    """
    started = time.monotonic()
    if pages < 1:
        raise ValueError("pages must be at least 1")
    if not database.is_file():
        raise BackupRefused(f"no database at {database} (is [daemon] database right?)")
    if target.resolve() == database.resolve():
        raise BackupRefused(f"{target} is the live database itself")
    if target.exists() and not force:
        raise BackupRefused(f"{target} exists; choose a new path or pass --force to replace it")
    if target.exists() and not target.is_file():
        raise BackupRefused(f"{target} exists and is not a regular file")
    if not target.parent.is_dir():
        raise BackupRefused(f"no directory {target.parent} for the backup")
    try:
        source = _readonly(database)
        source.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise BackupRefused(f"cannot read {database}: {exc}") from None
    temp = _temp_beside(target, "backup")
    try:
        with _removed_on_failure(temp):
            try:
                count = _copy(source, temp, pages, progress)
            except sqlite3.Error as exc:
                raise BackupRefused(f"backup of {database} failed: {exc}") from None
            try:
                version, jobs = check_store_file(temp)
            except BackupRefused as exc:
                raise BackupRefused(f"the copy was refused and removed: {exc}") from None
            os.replace(temp, target)
    finally:
        source.close()
    _fsync(target.parent)
    return BackupReport(
        source=str(database),
        target=str(target),
        pages=count,
        bytes=target.stat().st_size,
        version=version,
        jobs=jobs,
        seconds=time.monotonic() - started,
    )


def _fold_wal(database: Path) -> tuple[str, ...]:
    """Checkpoint the database being replaced (if there is one) so that SQLite
    folds and removes its ``-wal``/``-shm``; remove those left (a database
    too damaged to open, or a ``-wal`` without its database)."""
    if database.exists():
        with contextlib.suppress(sqlite3.Error):
            conn = sqlite3.connect(database, isolation_level=None)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
    removed = []
    for suffix in ("-wal", "-shm"):
        stale = Path(f"{database}{suffix}")
        if stale.exists():
            stale.unlink()
            removed.append(str(stale))
    return tuple(removed)


def _keep(database: Path) -> str:
    """Link the database being replaced to ``<name>.replaced-<UTC time>`` (a
    copy where links are refused); return that name."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    kept = database.with_name(f"{database.name}.replaced-{stamp}")
    n = 1
    while kept.exists():
        n += 1
        kept = database.with_name(f"{database.name}.replaced-{stamp}-{n}")
    try:
        os.link(database, kept)
    except OSError:
        shutil.copy2(database, kept)
    return str(kept)


def restore_store(
    backup: Path, database: Path, lock_path: Path, *, keep: bool = True
) -> RestoreReport:
    """Replace ``database`` by a copy of ``backup`` while holding the daemon's
    lock ``lock_path``; refuse (:class:`BackupRefused`) while a daemon holds it,
    or for a backup that fails its checks. With ``keep``, the replaced
    database stays beside it as ``<name>.replaced-<UTC time>``."""
    started = time.monotonic()
    if backup.exists() and database.exists() and backup.resolve() == database.resolve():
        raise BackupRefused(f"{backup} is the live database itself")
    if not lock_path.parent.is_dir():
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = PidLock(lock_path, f"state directory {lock_path.parent}")
    try:
        lock.acquire()
    except StartupError as exc:
        raise BackupRefused(f"{exc}; stop it before restoring") from None
    try:
        version, jobs = check_store_file(backup)
        database.parent.mkdir(parents=True, exist_ok=True)
        temp = _temp_beside(database, "restore")
        with _removed_on_failure(temp):
            source = _readonly(backup)
            try:
                _copy(source, temp, STEP_PAGES, None)
            finally:
                source.close()
            mode = database.stat().st_mode & 0o777 if database.exists() else 0o600
            os.chmod(temp, mode)
            removed = _fold_wal(database)
            kept = _keep(database) if keep and database.exists() else None
            os.replace(temp, database)
        _fsync(database.parent)
    finally:
        lock.release()
    return RestoreReport(
        backup=str(backup),
        database=str(database),
        version=version,
        jobs=jobs,
        kept=kept,
        removed=removed,
        seconds=time.monotonic() - started,
    )
