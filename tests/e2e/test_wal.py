"""Issue 13, item 5: the WAL does not grow without bound. SQLite only: the
write-ahead log is SQLite's file (PostgreSQL manages its own WAL).

The issue's acceptance is 20 s of sustained enqueues with an outside reader
holding a read transaction for 10 s, then 10 s idle, after which the ``-wal``
file is under the configured threshold. Scaled down here to keep the suite
short: ``wal_max_bytes`` is 4 MiB instead of 64 MiB, enqueues last 6 s, the
reader (a separate sqlite3 connection: ``BEGIN; SELECT ...``) holds from the
first second for 3 s, and the idle phase is a wait of at most 20 s for the WAL
to drop under the threshold.

Not flaky by construction: the reader holds until the WAL is seen over the
threshold (so the long-reader path really runs, however slow the machine), and
every later condition is awaited with a generous timeout, never a sleep. The
assertion messages carry the sizes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import DaemonProcess, RawClient, metric, sqlite_only, wait_until

# SQLite only: its write-ahead log file.
pytestmark = [pytest.mark.e2e, sqlite_only]

WAL_MAX = 4 * 1_048_576
ENQUEUE_S = 6.0
READER_FROM_S = 1.0
READER_FOR_S = 3.0


class _Later:
    """A ``wait_until`` description written when it fails, with the sizes then."""

    def __init__(self, text: Callable[[], str]) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _produce(daemon: DaemonProcess, stop: threading.Event, errors: list[object]) -> None:
    jobs = [{"queue": "q", "type": "t", "payload": {"pad": "p" * 400, "i": i}} for i in range(100)]
    try:
        with RawClient(daemon.socket) as c:
            while not stop.is_set():
                frame = c.call("enqueue_many", jobs=jobs)
                if not frame["ok"]:
                    errors.append(frame)
                    return
    except Exception as exc:  # reported by the test, not lost in the thread
        errors.append(exc)


def test_sqlite_only_the_wal_shrinks_under_its_threshold_after_a_long_reader_and_idle(make_daemon):
    daemon = make_daemon(f"wal_max_bytes = {WAL_MAX}\n")
    db = daemon.state / "sluicegate.db"
    wal = Path(f"{db}-wal")
    stop = threading.Event()
    errors: list[object] = []
    producers = [threading.Thread(target=_produce, args=(daemon, stop, errors)) for _ in range(2)]
    start = time.monotonic()
    for producer in producers:
        producer.start()
    biggest = 0
    degraded: list[dict] = []
    gauge: list[float] = []
    try:
        time.sleep(READER_FROM_S)  # pace the scenario: enqueues run meanwhile
        reader = sqlite3.connect(db, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM jobs").fetchone()  # holds a snapshot
            held_until = time.monotonic() + READER_FOR_S
            with daemon.http() as http:

                def reported_over() -> bool:
                    nonlocal biggest
                    assert not errors, errors[:3]
                    biggest = max(biggest, _size(wal))
                    body = http.get("/healthz").json()
                    if body["status"] == "degraded" and any("WAL" in p for p in body["problems"]):
                        degraded.append(body)
                        value = metric(daemon.metrics(), "sluicegate_wal_bytes")
                        if value is not None:
                            gauge.append(value)
                    return bool(degraded) and time.monotonic() >= held_until

                wait_until(reported_over, timeout=15, interval=0.1,
                           what=_Later(lambda: f"/healthz degraded naming the WAL (largest "
                                       f"-wal {biggest} bytes, threshold {WAL_MAX})"))  # fmt: skip
        finally:
            reader.execute("COMMIT")
            reader.close()
        remaining = ENQUEUE_S - (time.monotonic() - start)
        if remaining > 0:
            time.sleep(remaining)  # the rest of the sustained enqueues, reader gone
    finally:
        stop.set()
        for producer in producers:
            producer.join(30)
    assert not errors, errors[:3]
    assert biggest > WAL_MAX, f"the reader never pushed the WAL over {WAL_MAX}: {biggest}"
    assert gauge and max(gauge) > WAL_MAX, f"sluicegate_wal_bytes {gauge} <= {WAL_MAX}"

    # Idle: the WAL drops under the threshold (truncated), and /healthz is ok again.
    wait_until(lambda: _size(wal) < WAL_MAX, timeout=20, interval=0.1,
               what=_Later(lambda: f"the -wal under {WAL_MAX} bytes once idle: it is "
                           f"{_size(wal)} (largest seen {biggest}) beside a "
                           f"{_size(db)}-byte database"))  # fmt: skip
    final, database = _size(wal), _size(db)
    assert final < WAL_MAX, (
        f"-wal {final} bytes (largest seen {biggest}) beside a {database}-byte database; "
        f"threshold {WAL_MAX}"
    )
    with daemon.http() as http:
        wait_until(lambda: http.get("/healthz").json()["status"] == "ok", timeout=10,
                   interval=0.1, what="/healthz ok once the WAL is small again")  # fmt: skip
        assert metric(daemon.metrics(), "sluicegate_wal_bytes") < WAL_MAX
