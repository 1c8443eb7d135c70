"""What ``sluice store copy`` copies: every table of the schema, read in key order.

The tables are not listed by hand: :func:`schema_tables` applies the migration
list (:data:`daemon.store.schema.MIGRATIONS`) to an empty in-memory SQLite
database and reads back each table's columns and primary key. A table a new
migration adds is copied with no change here. The migration bookkeeping is not
a table of the schema (``PRAGMA user_version`` on SQLite; on PostgreSQL the
version table, which the target gets by being migrated), and tables a
migration fills for the database itself (:data:`NOT_COPIED`) are skipped.

Both dialects hold the same tables, columns and keys (tests/unit/test_pg_schema.py
holds them equal), so one description serves either end. Rows are read in
batches in primary-key order, each batch starting after the last key of the one
before (keyset paging: every page is an index range scan, however far in), by
:func:`page_query`; its placeholders are the dialect's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import cache
from typing import Any

import attrs

from daemon.store.schema import migrate
from daemon.store.sqlite_lib import sqlite_utils

Row = tuple[Any, ...]
#: Tables of the database itself, never copied: the cluster's admission epoch
#: (daemon.store.epoch) counts its transactions (the target's own row starts
#: afresh), and ``members`` lists the daemons running on it now.
NOT_COPIED = frozenset({"cluster_epoch", "members"})


class CopyRefused(Exception):
    """A store copy that did not happen, and why, in one line: nothing was
    written to the target (at most its schema was created)."""


class ValueRefused(Exception):
    """A value the target's column cannot hold (SQLite keeps text in an INTEGER
    column; PostgreSQL's bigint will not take it): the copy is rolled back."""


@attrs.frozen
class Table:
    """One table of the schema: its columns, in order, and its primary key."""

    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]

    def key_of(self, row: Row) -> Row:
        """The primary key of ``row`` (a row of :attr:`columns`)."""
        return tuple(row[self.columns.index(column)] for column in self.key)


@cache
def schema_tables() -> tuple[Table, ...]:
    """Every table this build's migrations create, in the order they create them."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(sqlite_utils.Database(conn))
        names = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            )
        ]
        tables = []
        for name in (n for n in names if n not in NOT_COPIED):
            info = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
            key = tuple(r[1] for r in sorted(info, key=lambda r: r[5]) if r[5])
            if not key:  # keyset paging needs one; every table has had one so far
                raise RuntimeError(f"table {name} has no primary key: it cannot be copied")
            tables.append(Table(name, tuple(r[1] for r in info), key))
        return tuple(tables)
    finally:
        conn.close()


def quoted(name: str) -> str:
    """An identifier quoted for either dialect (``key``, ``before``, ``type``...)."""
    return '"' + name.replace('"', '""') + '"'


def page_query(table: Table, *, after: bool, placeholder: Callable[[int], str]) -> str:
    """The next batch of ``table`` in key order: its rows after a key (``after``)
    or from the start, at most as many as the last parameter says.

    ``placeholder(i)`` is the dialect's i-th parameter (1-based): ``?`` or ``$i``.
    The key parameters come first, then the limit.
    """
    columns = ", ".join(quoted(c) for c in table.columns)
    order = ", ".join(quoted(c) for c in table.key)
    where = ""
    if after:
        marks = ", ".join(placeholder(i + 1) for i in range(len(table.key)))
        where = f" WHERE ({order}) > ({marks})"
    limit = placeholder(len(table.key) + 1 if after else 1)
    return f"SELECT {columns} FROM {quoted(table.name)}{where} ORDER BY {order} LIMIT {limit}"


def row_bytes(rows: list[Row]) -> int:
    """About how many bytes ``rows`` take: their text and blobs, 8 a number."""
    return sum(len(v) if isinstance(v, str | bytes) else 8 for row in rows for v in row)
