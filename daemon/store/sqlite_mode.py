"""SQLite's process-wide settings for the daemon: no mutex per call.

SQLite as built by distributions runs in *serialized* mode: every API call
locks its connection's mutex, and every allocation takes a global one to keep
memory statistics. Python's ``sqlite3`` reads a row with a few API calls per
column, so a claim of 100 jobs of 23 columns locked and unlocked a mutex some
7,000 times; ``perf`` put ``pthread_mutex_lock``/``unlock`` at 6.4% of the
daemon's CPU in the batched phase of ``bench/throughput.py``, 3.3% after
this (docs/performance.md).

The daemon never uses one connection from two threads at once: the store's
connection lives on the event loop's thread, and the checkpointer's own
connection goes to one worker thread at a time (``trio.to_thread``, awaited).
That is what SQLite's *multi-thread* mode asks (``SQLITE_CONFIG_MULTITHREAD``:
no connection or statement mutex; the VFS, allocator and page-cache mutexes
stay, so two connections on two threads remain safe). Memory statistics
(``SQLITE_CONFIG_MEMSTATUS``) are turned off too; the daemon reads none.

Both must be set while SQLite is uninitialized, and Python's ``_sqlite3``
initializes it at import, so :func:`use_multithread_mode` shuts SQLite down
and starts it again: only safe before the process has opened any connection,
which is why only the daemon's entry (``sluice serve``) calls it, first
thing. Anything that fails leaves SQLite as it was (serialized), which is
slower, never wrong.
"""

from __future__ import annotations

import _sqlite3
import ctypes
import logging

log = logging.getLogger("sluicegate.store")

SQLITE_OK = 0
SQLITE_CONFIG_MULTITHREAD = 2
SQLITE_CONFIG_MEMSTATUS = 9


def use_multithread_mode() -> bool:
    """Put SQLite in multi-thread mode without memory statistics; whether it
    now is. Call before any connection of the process is opened."""
    try:
        # Through the module's own handle: the SQLite it is linked with, be it
        # the system's shared library or one built into the module.
        lib = ctypes.CDLL(_sqlite3.__file__)
        shutdown, initialize = lib.sqlite3_shutdown, lib.sqlite3_initialize
        config = lib.sqlite3_config
    except (OSError, AttributeError) as exc:  # no file, or its symbols are not exported
        log.info("SQLite stays in serialized mode: %s", exc)
        return False
    if shutdown() != SQLITE_OK:
        log.info("SQLite stays in serialized mode: it could not be shut down")
        initialize()
        return False
    multithread = config(SQLITE_CONFIG_MULTITHREAD) == SQLITE_OK
    if multithread:
        config(SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0))
    initialize()
    return multithread
