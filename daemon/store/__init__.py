"""All SQL of Sluicegate lives in this package, behind a typed interface.

:mod:`daemon.store.interface` names every operation the daemon asks of a
store (the protocols :class:`~daemon.store.interface.JobStore`, ...,
:class:`~daemon.store.interface.Store`) and why its seams suit SQLite and
PostgreSQL alike; jobs cross it as :class:`~daemon.store.rows.JobRow`.
:mod:`daemon.store.sqlite` is the SQLite implementation, made of the named
statements of :mod:`daemon.store.jobs`, :mod:`~daemon.store.queues`, ...;
:mod:`daemon.store.schema` holds the migrations, one list for SQLite and
PostgreSQL, and applies them to SQLite (:mod:`daemon.store.pg_schema` to
PostgreSQL), and :mod:`daemon.store.database` opens SQLite and runs group
commits.
Only this package imports ``sqlite3`` (an import-linter contract).
"""
