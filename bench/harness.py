"""A real ``sluice serve`` for the benchmarks, and what can be read from it.

:class:`BenchDaemon` writes a config file on a fresh temp state dir, starts
``python -m daemon.cli.main serve --config <file>`` (optionally under cProfile
or watched by ``py-spy record``), and stops it with SIGTERM. It reads the
daemon's CPU time from ``/proc`` and its event-loop lag either from
``status.daemon.loop_lag`` (``core.metrics.lag_summary()``) or, when the
daemon does not expose that yet, from the ``sluicegate_loop_lag_seconds``
histogram on ``/metrics`` (which needs the HTTP listener).

``BENCH_DAEMON_PREFIX`` runs the daemon under another command, e.g.
``valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p``: instruction
counts, which unlike seconds repeat on this noisy machine. Two runs of
different sizes, differenced, give instructions per job without start-up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from wire import WireClient, WireError

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
LAG_METRIC = "sluicegate_loop_lag_seconds"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchDaemon:
    """One daemon on its own temp state dir; use as a context manager."""

    def __init__(
        self,
        synchronous: str,
        *,
        http: bool = False,
        loop_probe: str | None = "5ms",
        extra_config: str = "",
        cprofile: Path | None = None,
        py_spy: Path | None = None,
        source: Path | None = None,
        keep: bool = False,
    ) -> None:
        self.synchronous = synchronous
        # BENCH_LOOP_PROBE="" turns the probe off (callgrind: a timer every 5 ms
        # of a daemon slowed 50x would outweigh the requests counted).
        loop_probe = os.environ.get("BENCH_LOOP_PROBE", loop_probe) if loop_probe else loop_probe
        self.workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
        self.state = self.workdir / "state"
        self.socket = self.state / "sluicegate.sock"
        self.port = free_port() if http else None
        self.cprofile = cprofile
        self.py_spy = py_spy
        self.source = source
        self.keep = keep
        self.config_path = self.workdir / "sluicegate.toml"
        self.config_path.write_text(
            "[daemon]\n"
            f'state_dir = "{self.state}"\n'
            f'http = "{f"127.0.0.1:{self.port}" if self.port else ""}"\n'
            f'synchronous = "{synchronous}"\n'
            + (f'loop_probe = "{loop_probe}"\n' if loop_probe else "")
            + extra_config
        )
        self.log = self.workdir / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._spy: subprocess.Popen[bytes] | None = None

    # -- life ------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the daemon and wait until its socket answers."""
        serve = ["-m", "daemon.cli.main", "serve", "--config", str(self.config_path)]
        if self.cprofile is not None:
            if os.environ.get("BENCH_CPROFILE_CPU"):  # timed by CPU, not the wall clock
                serve = [str(Path(__file__).with_name("cpu_profile.py")), str(self.cprofile),
                         *serve]  # fmt: skip
            else:
                serve = ["-m", "cProfile", "-o", str(self.cprofile), *serve]
        env = dict(os.environ)
        if self.source is not None:
            # Import daemon/ and actors/ from another tree (a snapshot of a commit).
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.source),
                                                              env.get("PYTHONPATH")]))  # fmt: skip
        prefix = os.environ.get("BENCH_DAEMON_PREFIX", "").split()
        if prefix:
            timeout *= 10  # valgrind starts the interpreter about 50 times slower
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, *serve],
                cwd=self.workdir,
                env=env,
                stdout=logf,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}:\n{self.log_text()}")
            if self._ready():
                if self.py_spy is not None:
                    self._start_py_spy(self.py_spy)
                return
            time.sleep(0.02)
        raise TimeoutError(f"daemon did not start:\n{self.log_text()}")

    def _ready(self) -> bool:
        if not self.socket.exists():
            return False
        # The socket is bound before the store is open (a PostgreSQL database is
        # migrated then): only an answer (even a refusal) says the daemon serves,
        # except ``unavailable``, which a daemon whose database is not open yet
        # answers (daemon/transport/starting.py). HTTP serves just after the socket.
        try:
            with WireClient(self.socket, timeout=2) as client:
                frame = client.call("status")
            if not frame["ok"] and frame["error"]["code"] == "unavailable":
                return False
            if self.port is not None:
                socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
        except (OSError, WireError):
            return False
        return True

    def _start_py_spy(self, out: Path) -> None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self._spy = subprocess.Popen(
            [spy, "record", "--format", "raw", "--rate", "250", "-o", str(out),
             "--pid", str(self.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop_py_spy(self) -> None:
        """Stop ``py-spy record`` (it writes its output on SIGINT)."""
        if self._spy is not None and self._spy.poll() is None:
            self._spy.send_signal(signal.SIGINT)
            try:
                self._spy.wait(30)
            except subprocess.TimeoutExpired:
                self._spy.kill()
                self._spy.wait()
        self._spy = None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; the exit status."""
        self.stop_py_spy()
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    def __enter__(self) -> BenchDaemon:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- readings --------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        assert self.proc is not None
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """User plus system CPU time the daemon has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # After "pid (comm)": state is fields[0]; utime and stime are fields 11 and 12.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wakeups(self) -> int:
        """Voluntary context switches of all the daemon's threads so far.

        Mostly wake-ups from a sleep: a daemon that polls while idle shows them
        growing at its polling rate.
        """
        total = 0
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                text = (task / "status").read_text()
            except OSError:  # the thread ended meanwhile
                continue
            for line in text.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        return total

    def status(self) -> dict[str, Any]:
        """The ``status`` verb's answer."""
        with WireClient(self.socket) as client:
            return client.ok("status")

    def loop_lag(self, status: dict[str, Any]) -> dict[str, Any] | None:
        """The loop lag summary: from ``status`` when exposed, else from ``/metrics``."""
        daemon = status.get("daemon") or {}
        if "loop_lag" in daemon:
            lag = daemon["loop_lag"]
            return None if lag is None else {**lag, "source": "status"}
        if self.port is None:
            return None
        return lag_from_metrics(self.metrics_text())

    def metrics_text(self) -> str:
        """The daemon's ``/metrics`` page (it needs ``http=True``)."""
        if self.port is None:
            raise RuntimeError("this daemon has no HTTP listener")
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.read().decode()

    def log_text(self) -> str:
        """The daemon's log so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels`` in a
    Prometheus text page, or None when there is none."""
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        series, _, tail = head.partition("{")
        if series != name:
            continue
        found = dict(part.split("=", 1) for part in tail.rstrip("}").split(",") if "=" in part)
        if all(found.get(k) == f'"{v}"' for k, v in labels.items()):
            return float(value)
    return None


def lag_from_metrics(text: str) -> dict[str, Any] | None:
    """Bucket-based upper bounds for p50/p99 of the loop-lag histogram.

    A bucket histogram only says "at most the bucket's upper edge", so the
    figures are upper bounds (``p99_le_ms``), not exact percentiles.
    """
    buckets: list[tuple[float, float]] = []
    prefix = LAG_METRIC + "_bucket{"
    for line in text.splitlines():
        if line.startswith(prefix):
            labels, value = line[len(prefix) :].rsplit("} ", 1)
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(value)))
    if not buckets or buckets[-1][1] == 0:
        return None
    buckets.sort()
    total = buckets[-1][1]

    def upper(q: float) -> float:
        return next(le for le, count in buckets if count >= q * total) * 1000

    return {"p50_le_ms": upper(0.5), "p99_le_ms": upper(0.99), "samples": int(total),
            "source": "metrics"}  # fmt: skip


def lag_source(synchronous: str, source: Path | None = None) -> str:
    """``status`` when this daemon exposes ``status.daemon.loop_lag``, else ``metrics``.

    Starts a throwaway daemon for a moment to find out.
    """
    with BenchDaemon(synchronous, source=source) as probe:
        probe.start()
        time.sleep(0.1)  # a few probe samples
        daemon = probe.status().get("daemon") or {}
    return "status" if "loop_lag" in daemon else "metrics"
