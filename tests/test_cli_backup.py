"""``sluice backup PATH`` and ``sluice restore PATH`` (issue 17, part 6).

The bad inputs of both verbs run in process (``main``); the acceptance runs a
real ``sluice serve`` under a producer and a worker, takes backups with the
CLI (in the test's process: another process than the daemon's) while it
serves, then stops it, restores each one and checks that every job
acknowledged before that backup began is in it.
``SLUICEGATE_BACKUP_JOBS`` changes the run's job count (default 20,000).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from daemon.cli.main import main
from daemon.store.schema import MIGRATIONS
from tests.support import DaemonProcess, RawClient

#: Jobs of the acceptance run (the issue's 20,000 by default).
JOBS = int(os.environ.get("SLUICEGATE_BACKUP_JOBS", "20000"))
BACKUPS = 10
BATCH = 50
#: The producer's pace: the run lasts about this long (a backup takes about 0.1 s).
RUN_SECONDS = 10.0


def _config(tmp_path: Path, database: str = "") -> str:
    path = tmp_path / "sluicegate.toml"
    line = f'database = "{database}"\n' if database else ""
    path.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\nhttp = ""\n{line}')
    return str(path)


def _migrated(tmp_path: Path) -> str:
    config = _config(tmp_path)
    assert main(["--config", config, "db", "migrate"]) == 0
    return config


def _jobs(path: Path) -> set[str]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {row[0] for row in db.execute("SELECT id FROM jobs")}


def _insert_job(database: Path, *job_ids: str) -> None:
    """Rows of pending jobs (the NOT NULL columns without a default set to 0)."""
    with closing(sqlite3.connect(database)) as db, db:
        cols = [r[1] for r in db.execute("PRAGMA table_info(jobs)") if r[3] and r[4] is None]
        for job_id in job_ids:
            values = {c: 0 for c in cols}
            values.update(id=job_id, namespace="default", queue="q", type="t", state="pending")
            names = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            db.execute(f"INSERT INTO jobs ({names}) VALUES ({marks})", tuple(values.values()))


# --- backup: bad inputs -----------------------------------------------------------


def test_backup_refuses_an_existing_path_unless_forced(tmp_path, capsys):
    config = _migrated(tmp_path)
    target = tmp_path / "b.db"
    target.write_text("precious")
    assert main(["--config", config, "backup", str(target)]) == 1
    assert "exists" in capsys.readouterr().err and target.read_text() == "precious"
    assert main(["--config", config, "--json", "backup", str(target), "--force"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["integrity"], report["schema_version"]) == ("ok", len(MIGRATIONS))
    assert _jobs(target) == set()


def test_backup_without_a_database_or_into_a_missing_directory_is_refused(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["--config", config, "backup", str(tmp_path / "b.db")]) == 1
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "state" / "sluicegate.db").exists()  # nothing created
    config = _migrated(tmp_path)
    assert main(["--config", config, "backup", str(tmp_path / "no" / "b.db")]) == 1
    assert "no directory" in capsys.readouterr().err


def test_backup_of_a_file_that_is_not_a_store_is_refused(tmp_path, capsys):
    config = _config(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "sluicegate.db").write_bytes(b"not a database at all" * 100)
    assert main(["--config", config, "backup", str(tmp_path / "b.db")]) == 1
    assert "not a database" in capsys.readouterr().err
    assert not (tmp_path / "b.db").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".b.db")] == []


def test_backup_onto_the_live_database_and_bad_step_pages_are_refused(tmp_path, capsys):
    config = _migrated(tmp_path)
    live = tmp_path / "state" / "sluicegate.db"
    assert main(["--config", config, "backup", str(live), "--force"]) == 1
    assert "live database itself" in capsys.readouterr().err
    assert main(["--config", config, "backup", str(tmp_path / "b.db"), "--step-pages", "0"]) == 1
    assert "--step-pages" in capsys.readouterr().err


def test_backup_and_restore_refuse_a_postgresql_store(tmp_path, capsys):
    config = _config(tmp_path, "postgresql://u:secret@db.internal:5432/sg")
    for verb in ("backup", "restore"):
        assert main(["--config", config, verb, str(tmp_path / "b.db")]) == 1
        err = capsys.readouterr().err
        assert "pg_dump" in err and "PostgreSQL" in err and "secret" not in err


def test_backup_in_small_steps_reports_progress_and_copies_every_row(tmp_path):
    from daemon.store.backup import backup_store

    _migrated(tmp_path)
    live = tmp_path / "state" / "sluicegate.db"
    _insert_job(live, *(f"job-{i:04d}" for i in range(200)))
    seen: list[tuple[int, int]] = []
    report = backup_store(
        live, tmp_path / "b.db", pages=2, progress=lambda d, t: seen.append((d, t))
    )
    assert len(seen) > 3 and seen[-1][0] == seen[-1][1] == report.pages
    assert report.jobs == 200 and _jobs(tmp_path / "b.db") == _jobs(live)


# --- restore: bad inputs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file"),
        (b"hello, not sqlite" * 64, "not a SQLite database"),
        ("empty-sqlite", "not a Sluicegate store"),
        ("too-new", "newer than this sluicegate"),
        ("directory", "not a regular file"),
    ],
)
def test_restore_refuses_a_bad_backup_and_changes_nothing(tmp_path, capsys, content, said):
    config = _migrated(tmp_path)
    live = tmp_path / "state" / "sluicegate.db"
    _insert_job(live, "kept")
    backup = tmp_path / "b.db"
    if isinstance(content, bytes):
        backup.write_bytes(content)
    elif content == "empty-sqlite":
        with closing(sqlite3.connect(backup)) as db:
            db.execute("CREATE TABLE other (x)")
    elif content == "too-new":
        assert main(["--config", config, "backup", str(backup)]) == 0
        with closing(sqlite3.connect(backup)) as db:
            db.execute("PRAGMA user_version = 99")
    elif content == "directory":
        backup.mkdir()
    capsys.readouterr()
    assert main(["--config", config, "restore", str(backup)]) == 1
    assert said in capsys.readouterr().err
    assert _jobs(live) == {"kept"}
    left = sorted(p.name for p in live.parent.iterdir())
    assert not [n for n in left if n.startswith(".") or "replaced" in n], left


def test_restore_refuses_a_backup_that_fails_integrity_check(tmp_path, capsys):
    config = _migrated(tmp_path)
    live = tmp_path / "state" / "sluicegate.db"
    _insert_job(live, *(f"job-{i:04d}" for i in range(300)))
    backup = tmp_path / "b.db"
    assert main(["--config", config, "backup", str(backup)]) == 0
    data = bytearray(backup.read_bytes())
    page = 4096
    data[page * 3 + 8 : page * 3 + 200] = b"\xff" * 192  # a b-tree page's cells, torn
    backup.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["--config", config, "restore", str(backup)]) == 1
    err = capsys.readouterr().err
    assert "fails integrity_check" in err or "is damaged" in err, err
    assert len(_jobs(live)) == 300


def test_restore_replaces_the_store_keeps_the_old_one_and_drops_its_wal(tmp_path, capsys):
    config = _migrated(tmp_path)
    live = tmp_path / "state" / "sluicegate.db"
    _insert_job(live, "before")
    backup = tmp_path / "b.db"
    assert main(["--config", config, "backup", str(backup)]) == 0
    # The live store moves on, and a crash leaves that commit in a -wal beside it.
    holder = sqlite3.connect(live, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("PRAGMA wal_autocheckpoint = 0")
    _insert_job(live, "after")
    crashed = {p: p.read_bytes() for p in (live, Path(f"{live}-wal"))}
    holder.close()  # checkpoints and deletes the -wal: put back the crash's files
    for path, data in crashed.items():
        path.write_bytes(data)
    capsys.readouterr()
    assert main(["--config", config, "--json", "restore", str(backup)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["removed"] == [] or all("-shm" in p for p in report["removed"])
    assert not Path(f"{live}-wal").exists() and not Path(f"{live}-shm").exists()
    assert _jobs(live) == {"before"}
    assert _jobs(Path(report["kept"])) == {"before", "after"}  # folded in before it was kept
    assert (report["jobs"], report["schema_version"]) == (1, len(MIGRATIONS))
    assert main(["--config", config, "restore", str(backup), "--discard"]) == 0
    assert "kept as" not in capsys.readouterr().out
    assert len(list(live.parent.glob("sluicegate.db.replaced-*Z"))) == 1


def test_restore_into_an_empty_state_directory(tmp_path, capsys):
    source = tmp_path / "a"
    source.mkdir()
    config = _migrated(source)
    _insert_job(source / "state" / "sluicegate.db", "x")
    backup = tmp_path / "b.db"
    assert main(["--config", config, "backup", str(backup)]) == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert main(["--config", _config(fresh), "restore", str(backup)]) == 0
    assert "kept as" not in capsys.readouterr().out
    assert _jobs(fresh / "state" / "sluicegate.db") == {"x"}


@pytest.mark.e2e
@pytest.mark.sqlite_only
def test_restore_refuses_while_a_daemon_holds_the_store_sqlite(make_daemon, capsys):
    daemon = make_daemon(http=False)
    with RawClient(daemon.socket) as c:
        job = c.ok("enqueue", queue="q", type="t")["job"]["id"]
    backup = daemon.workdir / "b.db"
    config = str(daemon.config_path)
    assert main(["--config", config, "backup", str(backup)]) == 0
    capsys.readouterr()
    assert main(["--config", config, "restore", str(backup)]) == 1
    err = capsys.readouterr().err
    assert f"pid {daemon.proc.pid}" in err and "stop it" in err
    daemon.stop()
    assert main(["--config", config, "restore", str(backup)]) == 0
    daemon.start()
    with RawClient(daemon.socket) as c:
        assert c.ok("get", job_id=job)["job"]["status"] == "pending"


# --- the acceptance: backups of a serving daemon ----------------------------------


class _Load:
    """A producer acknowledging ``JOBS`` jobs in batches (ack instants kept) and a
    worker completing them, against one daemon."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.acked: list[tuple[float, str]] = []
        self.completed = 0
        self.done = threading.Event()
        self.errors: list[BaseException] = []

    def produce(self) -> None:
        try:
            with RawClient(self.daemon.socket) as c:
                began = time.monotonic()
                for start in range(0, JOBS, BATCH):
                    lag = began + RUN_SECONDS * start / JOBS - time.monotonic()
                    if lag > 0:
                        time.sleep(lag)
                    jobs = [{"queue": "bk", "type": "t", "payload": {"n": start + i}}
                            for i in range(min(BATCH, JOBS - start))]  # fmt: skip
                    results = c.ok("enqueue_many", jobs=jobs)["results"]
                    now = time.monotonic()
                    self.acked.extend((now, r["job"]["id"]) for r in results)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self.done.set()

    def work(self) -> None:
        try:
            with RawClient(self.daemon.socket) as c:
                while not (self.done.is_set() and self.completed >= len(self.acked)):
                    got = c.ok("claim_next", queues=["bk"], max=50, wait_ms=100)["jobs"]
                    for item in got:
                        job = item["job"]
                        c.ok("complete", job_id=job["id"], lease=job["lease"])
                        self.completed += 1
        except BaseException as exc:
            self.errors.append(exc)


@pytest.mark.e2e
@pytest.mark.sqlite_only
def test_backups_during_a_run_each_restore_every_job_acknowledged_before_sqlite(
    make_daemon, capsys
):
    daemon = make_daemon(http=False)
    load = _Load(daemon)
    threads = [threading.Thread(target=load.produce), threading.Thread(target=load.work)]
    for t in threads:
        t.start()
    backups: list[tuple[Path, float]] = []
    spans: list[tuple[float, float]] = []
    config = str(daemon.config_path)
    try:
        while len(backups) < BACKUPS:
            # Spread the backups over the run: the next one at the next tenth of the jobs.
            due = JOBS * (len(backups) + 0.5) / BACKUPS
            while len(load.acked) < due and not load.done.is_set():
                time.sleep(0.005)
            path = daemon.workdir / f"backup-{len(backups)}.db"
            began = time.monotonic()
            # The CLI in this process: another process than the daemon's, and small
            # steps, so that the daemon commits while the copy runs.
            args = ["--config", config, "--json", "backup", str(path), "--step-pages", "64"]
            assert main(args) == 0
            assert json.loads(capsys.readouterr().out)["integrity"] == "ok"
            backups.append((path, began))
            spans.append((began, time.monotonic()))
    finally:
        for t in threads:
            t.join(120)
    assert not load.errors, load.errors
    assert len(load.acked) == JOBS and load.completed == JOBS
    # Online: the daemon acknowledged enqueues while backups ran. Not every one:
    # on a loaded machine a backup can begin and end between two acks.
    acks = [at for at, _ in load.acked]
    overlapped = sum(any(a <= at <= b for at in acks) for a, b in spans)
    assert overlapped >= BACKUPS // 2, f"only {overlapped} backups ran while jobs were acked"
    daemon.stop()

    enqueued = {job_id for _, job_id in load.acked}
    figures = []  # shown with -s: acked before each backup, jobs in it, its size
    for path, began in backups:
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert main(["--config", config, "restore", str(path), "--discard"]) == 0
        present = _jobs(daemon.state / "sluicegate.db")
        before = {job_id for at, job_id in load.acked if at < began}
        assert before <= present, f"{len(before - present)} acknowledged jobs missing in {path}"
        assert present <= enqueued
        figures.append(f"{len(before)}/{len(present)}/{path.stat().st_size // 1024}K")
    print(f"\n{JOBS} jobs, {overlapped} of {BACKUPS} backups overlapping acks; "
          f"per backup acked-before/present/size: {' '.join(figures)}")  # fmt: skip
    # The daemon starts on the last restored store and serves its jobs.
    daemon.start()
    with RawClient(daemon.socket) as c:
        counts = next(q for q in c.ok("status")["queues"] if q["queue"] == "bk")
        assert sum(counts[s] for s in ("pending", "running", "completed")) == len(present)


def test_backup_draws_progress_only_where_allowed(tmp_path, capsys, monkeypatch):
    config = _migrated(tmp_path)
    assert main(["--config", config, "backup", str(tmp_path / "a.db")]) == 0
    assert capsys.readouterr().err == ""  # not a terminal: no bar
    import daemon.cli.backup as cli_backup

    monkeypatch.setattr(cli_backup, "progress_allowed", lambda json: not json)
    assert main(["--config", config, "backup", str(tmp_path / "b.db"), "--step-pages", "4"]) == 0
    captured = capsys.readouterr()
    assert "backing up" in captured.err and "pages/s" in captured.err
    assert captured.out.startswith("backed up ")
