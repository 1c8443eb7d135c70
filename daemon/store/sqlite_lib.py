"""sqlite-utils, imported without numpy.

``sqlite_utils.db`` imports numpy when it can (to map numpy scalars to column
types, which the daemon never stores). Where numpy is installed beside the
daemon, as it often is in a shared environment, that import cost the daemon
20 ms at start and, through numpy's OpenBLAS, idle worker threads that took
about 2% of its CPU under load (``perf``: ``blas_thread_server``). So the
first import here hides numpy from sqlite-utils, and only from it: numpy stays
importable by anything else in the process, and a numpy imported before this
module is used as usual.
"""

from __future__ import annotations

import sys

if "numpy" in sys.modules or "sqlite_utils" in sys.modules:
    import sqlite_utils
else:
    sys.modules["numpy"] = None  # type: ignore[assignment]  # its import raises ImportError
    try:
        import sqlite_utils
    finally:
        del sys.modules["numpy"]

__all__ = ["sqlite_utils"]
