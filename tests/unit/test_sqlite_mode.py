"""SQLite's multi-thread mode for the daemon (daemon/store/sqlite_mode.py).

Process-wide and one-way, so each case runs in a fresh interpreter. Whether
the mode took is read from SQLite itself: with memory statistics off (set with
the mode) ``sqlite3_status64(SQLITE_STATUS_MEMORY_USED)`` stays 0 however much
a connection allocates; with them on (SQLite's default) it grows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import DaemonProcess

pytestmark = pytest.mark.e2e  # every test here starts a process

PROBE = """
import ctypes, json, sqlite3, sys, threading, _sqlite3
from daemon.store.sqlite_mode import use_multithread_mode
switched = use_multithread_mode() if sys.argv[1] == "switch" else None
path = sys.argv[2]
conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
conn.executemany("INSERT INTO t (v) VALUES (?)", [("x" * 100,)] * 1000)
# A second connection used from a worker thread, one call at a time, as the
# checkpointer's is; the first keeps writing on this thread meanwhile.
other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
seen = []
worker = threading.Thread(target=lambda: seen.append(
    other.execute("SELECT count(*) FROM t").fetchone()[0]))
worker.start()
conn.executemany("INSERT INTO t (v) VALUES (?)", [("y",)] * 100)
worker.join()
seen.append(other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[0])
lib = ctypes.CDLL(_sqlite3.__file__)
used, peak = ctypes.c_int64(), ctypes.c_int64()
lib.sqlite3_status64(0, ctypes.byref(used), ctypes.byref(peak), 0)  # SQLITE_STATUS_MEMORY_USED
print(json.dumps({"switched": switched, "memory_counted": used.value > 0,
                  "rows": conn.execute("SELECT count(*) FROM t").fetchone()[0],
                  "seen": seen}))
"""


def _probe(tmp_path: Path, mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(tmp_path / f"{mode}.db")],
        capture_output=True, text=True, check=True, timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    return json.loads(done.stdout)


def test_the_switch_takes_and_connections_still_work_across_threads(tmp_path: Path) -> None:
    switched = _probe(tmp_path, "switch")
    assert switched["switched"] is True
    assert switched["memory_counted"] is False  # the statistics' global mutex is gone with them
    assert switched["rows"] == 1100
    # The reader thread ran while the first connection went on inserting (each row
    # its own transaction: isolation_level=None), so it may see any count between.
    assert 1000 <= switched["seen"][0] <= 1100
    assert switched["seen"][1] == 0  # its PASSIVE checkpoint was not busy


def test_without_the_switch_sqlite_counts_its_memory(tmp_path: Path) -> None:
    # What the first test's ``memory_counted is False`` is measured against.
    plain = _probe(tmp_path, "plain")
    assert plain["switched"] is None
    assert plain["memory_counted"] is True
    assert plain["rows"] == 1100


def test_sluice_serve_runs_sqlite_in_multithread_mode(tmp_path: Path) -> None:
    proc = DaemonProcess(tmp_path, http=False)
    proc.start()
    try:
        with proc.client() as client:
            job = client.ok("enqueue", queue="q", type="t", payload={"n": 1})["job"]
            ((claimed, _admission),) = [
                (c["job"], c["admission"]) for c in client.ok("claim_next", queues=["q"])["jobs"]
            ]
            assert claimed["id"] == job["id"]
            done = client.ok("complete", job_id=job["id"], lease=claimed["lease"])["job"]
            assert done["status"] == "completed"
    finally:
        proc.stop()
    assert " sqlite=multi-thread" in proc.log_text()
