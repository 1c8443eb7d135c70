"""All SQL of Sluicegate lives in this package.

:mod:`daemon.store.schema` creates and migrates the tables,
:mod:`daemon.store.database` opens SQLite and runs group commits, and
:mod:`daemon.store.jobs` holds the named job statements.
"""
