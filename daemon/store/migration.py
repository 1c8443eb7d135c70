"""One schema migration in both dialects, and what ``sluice db status`` reports.

:data:`daemon.store.schema.MIGRATIONS` is one list of :class:`Migration`
serving SQLite and PostgreSQL alike: each entry is applied by
:func:`daemon.store.schema.migrate` (SQLite) or
:func:`daemon.store.pg_schema.migrate_postgres` (PostgreSQL), which keep the
version each in their own way, and each reports a :class:`SchemaStatus` of the
same shape, so the CLI prints either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import attrs

if TYPE_CHECKING:
    import sqlite_utils


def _statements(_instance: object, _attribute: object, value: tuple[str, ...]) -> None:
    if not value or not all(isinstance(s, str) and s.strip() for s in value):
        raise ValueError("a migration's postgres form is a non-empty tuple of SQL statements")


@attrs.frozen
class Migration:
    """Schema version ``version``, named ``name``, in both dialects.

    ``sqlite`` changes a sqlite-utils database; ``postgres`` is the SQL that
    makes the same tables, columns and indexes on PostgreSQL, one statement
    per string (run in order, in the migration's transaction). Calling a
    migration applies its SQLite form, so the list keeps the contract it had
    when it held bare functions: a list of steps callable on a database.
    """

    version: int = attrs.field(validator=attrs.validators.ge(1))
    name: str = attrs.field(validator=attrs.validators.min_len(1))
    sqlite: Callable[[sqlite_utils.Database], None]
    postgres: tuple[str, ...] = attrs.field(validator=_statements)

    def __call__(self, db: sqlite_utils.Database) -> None:
        """Apply the SQLite form to ``db`` (inside the migrator's transaction)."""
        self.sqlite(db)


@attrs.frozen
class Step:
    """One migration as status reports it: applied (when, if the dialect
    records it) or pending (``applied_at`` None)."""

    version: int
    name: str
    applied_at: datetime | None = None


@attrs.frozen
class SchemaStatus:
    """A database's schema against this build's migrations.

    ``applied`` lists what the database records: on SQLite the known
    migrations up to its version, without times (``PRAGMA user_version`` is a
    bare number); on PostgreSQL every row of its version table, times and the
    names a newer build wrote included. ``pending`` is what
    :func:`~daemon.store.schema.migrate` would apply next.
    """

    dialect: Literal["sqlite", "postgresql"]
    current: int
    latest: int
    applied: tuple[Step, ...]
    pending: tuple[Step, ...]

    @property
    def up_to_date(self) -> bool:
        """The database is at this build's latest version."""
        return self.current == self.latest

    @property
    def too_new(self) -> bool:
        """A newer build migrated the database: this one refuses to open it."""
        return self.current > self.latest


class SchemaTooNew(RuntimeError):
    """The database's schema is newer than this build knows: never migrated down."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"database schema version {found} is newer than this sluicegate ({known}); "
            "upgrade sluicegate"
        )
        self.found = found
        self.known = known


def refuse_newer(found: int, known: int) -> None:
    """Raise :class:`SchemaTooNew` when version ``found`` is past ``known``."""
    if found > known:
        raise SchemaTooNew(found, known)


def pending_steps(migrations: Sequence[Migration], current: int) -> tuple[Step, ...]:
    """The migrations past version ``current``, as status lists them."""
    return tuple(Step(m.version, m.name) for m in migrations[current:])
