"""Copying a whole store into an empty one: ``sluice store copy``.

``--from`` and ``--to`` each name a SQLite file or a ``postgresql://`` DSN, so
a store moves from SQLite to PostgreSQL (docs/scaling.md, "Moving up"), back,
or between two of a kind. :func:`copy_store` does it in four steps:

1. The source is opened in one read transaction (a consistent snapshot, even
   under a running daemon) and must be at this build's schema version: an
   older one is refused, naming ``sluice db migrate``; a newer one is refused
   as the daemon refuses it.
2. The target is refused if any table of the schema holds a row; else it is
   created if need be, migrated to this build's version, and its one write
   transaction begun (:mod:`daemon.store.copy_ends`).
3. Every table of the schema (:func:`~daemon.store.copy_layout.schema_tables`)
   is read in primary-key order, in batches: at most :data:`BATCH_ROWS` rows,
   fewer when rows are large (about :data:`BATCH_BYTES` a batch), so memory
   stays bounded whatever the store's size. Each batch is written before the
   next is read, and ``progress(done, total)`` is told after each.
4. The target commits once. Any failure rolls it back and is one
   :class:`~daemon.store.copy_layout.CopyRefused`: the target holds no rows.

The drivers are asyncpg (under ``asyncio.run``: the CLI has no Trio) and the
standard library's sqlite3, called in place; nothing here runs in a daemon.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path

import attrs

from daemon.store.copy_ends import PG_ERRORS, PostgresEnd, SqliteEnd
from daemon.store.copy_layout import CopyRefused, Table, ValueRefused, row_bytes, schema_tables
from daemon.store.migration import SchemaTooNew
from daemon.store.pg_opening import redacted
from daemon.store.schema import MIGRATIONS

__all__ = ["BATCH_ROWS", "CopyRefused", "CopyReport", "copy_store", "store_end"]

#: The most rows one batch holds, the first batch's rows, and about how many
#: bytes a batch may hold (a table of large payloads gets smaller batches).
BATCH_ROWS = 2_000
FIRST_BATCH = 100
BATCH_BYTES = 8 << 20

End = SqliteEnd | PostgresEnd
Progress = Callable[[int, int], None]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@attrs.frozen
class CopyReport:
    """A copy done: its ends (as shown), the schema version, and the rows per table."""

    source: str
    target: str
    version: int
    tables: dict[str, int]
    seconds: float

    @property
    def rows(self) -> int:
        """Rows copied, all tables together."""
        return sum(self.tables.values())


def store_end(text: str, password: str | None = None) -> End:
    """The end ``text`` names: a ``postgresql://`` (or ``postgres://``) DSN, or a
    SQLite file path. Raises ``ValueError`` for any other ``scheme://``, and for a
    password given to a file."""
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresEnd(text, password)
    if scheme := _SCHEME.match(text):
        raise ValueError(
            f"unknown scheme {scheme[1]}:// in {redacted(text)}: "
            "give a SQLite file path or a postgresql:// DSN"
        )
    if password is not None:
        raise ValueError(f"{text} is a SQLite file: a password file is for a postgresql:// DSN")
    return SqliteEnd(Path(text))


def copy_store(
    source: str,
    target: str,
    *,
    source_password: str | None = None,
    target_password: str | None = None,
    batch_rows: int = BATCH_ROWS,
    progress: Progress | None = None,
) -> CopyReport:
    """Copy every row of the store at ``source`` into the empty store at ``target``.

    Raises ``ValueError`` for a location that names neither a SQLite file nor
    a PostgreSQL DSN, or the same store twice, and
    :class:`~daemon.store.copy_layout.CopyRefused` for a copy that did not
    happen (nothing is left in the target then).
    """
    if batch_rows < 1:
        raise ValueError("a batch holds at least one row")
    ends = store_end(source, source_password), store_end(target, target_password)
    if _same(*ends):
        raise ValueError(f"--from and --to name the same store ({ends[0].shown})")
    return asyncio.run(_copy(*ends, batch_rows, progress or (lambda _done, _total: None)))


def _same(source: End, target: End) -> bool:
    """Whether both ends name one store (one file, or one DSN)."""
    if isinstance(source, SqliteEnd) and isinstance(target, SqliteEnd):
        return source.path.resolve() == target.path.resolve()
    return isinstance(source, PostgresEnd) and source.dsn == getattr(target, "dsn", None)


async def _copy(source: End, target: End, batch_rows: int, progress: Progress) -> CopyReport:
    """The copy's steps (the module's docstring), closing both ends however it ends."""
    started = time.monotonic()
    tables = schema_tables()
    copied: dict[str, int] = {}
    step = f"reading {source.shown}"
    try:
        version = await source.open_source()
        _check_source(source, version)
        counts = {t.name: await source.count(t) for t in tables}
        step = f"opening {target.shown}"
        await target.open_target(tables)
        total, done = sum(counts.values()), 0
        progress(done, total)
        for table in tables:
            step, copied[table.name] = f"copying table {table.name}", 0
            async with aclosing(_batches(source, table, batch_rows)) as batches:
                async for rows in batches:
                    await target.write(table, rows)
                    copied[table.name] += len(rows)
                    done += len(rows)
                    progress(done, max(total, done))
        step = f"committing to {target.shown}"
        await target.commit()
    except (sqlite3.Error, ValueRefused, *PG_ERRORS) as exc:
        cause = target.scrub(source.scrub(f"{type(exc).__name__}: {exc}"))
        raise CopyRefused(f"{step} failed: {cause}; nothing was copied") from None
    finally:
        await target.close()
        await source.close()
    return CopyReport(source.shown, target.shown, version, copied, time.monotonic() - started)


def _check_source(source: End, version: int) -> None:
    """Refuse a source not at this build's schema version, saying what to do."""
    latest = len(MIGRATIONS)
    if version > latest:
        raise CopyRefused(f"the source {source.shown}: {SchemaTooNew(version, latest)}")
    if version == 0:
        raise CopyRefused(f"the source {source.shown} holds no Sluicegate store (no schema)")
    if version < latest:
        raise CopyRefused(
            f"the source {source.shown} is at schema version {version} of {latest}: "
            "run `sluice db migrate` on it first (with it as [daemon] database)"
        )


async def _batches(source: End, table: Table, most: int) -> AsyncIterator[list[tuple]]:
    """``table``'s rows in key order, a batch at a time (keyset paging)."""
    after, limit = None, min(FIRST_BATCH, most)
    while True:
        rows = await source.page(table, after, limit)
        if rows:
            yield rows
        if len(rows) < limit:
            return
        after = table.key_of(rows[-1])
        per_row = max(1, row_bytes(rows) // len(rows))
        limit = max(1, min(most, BATCH_BYTES // per_row))
