"""A throwaway PostgreSQL cluster for a test session that finds no server (issue 15).

``initdb`` and ``pg_ctl`` come from PATH or, as Debian installs them, from
``/usr/lib/postgresql/<version>/bin`` (the newest version). The cluster lives in a
temp dir of its own and listens only on a unix socket in that dir: no TCP port, so
the clusters of two xdist workers never meet. Trust auth for the superuser
``postgres``; no fsync (the files go when it stops). As root, both programs run as
the ``postgres`` user through ``runuser``, since they refuse to run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

#: Where Debian puts each installed version's server programs (not on PATH).
DEBIAN_ROOT = Path("/usr/lib/postgresql")

#: The superuser ``postgres`` trusted on the socket; no fsync of the new files.
INITDB_OPTIONS = "-D data -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions"

#: Settings appended to the cluster's postgresql.conf, after initdb's.
SETTINGS = """
listen_addresses = ''
unix_socket_directories = '{dir}'
fsync = off
full_page_writes = off
synchronous_commit = off
"""

#: Seconds initdb or pg_ctl may take, and pg_ctl's own wait for the server.
COMMAND_TIMEOUT = 60


def find_bindir(
    which: Callable[[str], str | None] = shutil.which, debian_root: Path = DEBIAN_ROOT
) -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, then Debian's newest."""
    on_path = which("initdb")
    candidates = [Path(on_path).parent] if on_path else []
    installed = [initdb.parent for initdb in debian_root.glob("*/bin/initdb")]
    candidates += sorted(installed, key=lambda bindir: _version(bindir.parent.name), reverse=True)
    return next((d for d in candidates if (d / "pg_ctl").exists()), None)


def _version(name: str) -> tuple[int, ...]:
    """``"15"`` → ``(15,)``, ``"9.6"`` → ``(9, 6)``: Debian's version directories in order."""
    return tuple(int(part) for part in name.split(".") if part.isdigit())


class ClusterFailed(Exception):
    """The cluster did not start: the message says which step and the end of its output."""


class ThrowawayCluster:
    """A private cluster: ``start()`` makes and starts it, ``stop()`` stops it and removes
    its files (also after a half-done start). Usable as a context manager.
    """

    def __init__(self, bindir: Path, settings: str = "") -> None:
        self.bindir = bindir
        #: More postgresql.conf lines, after :data:`SETTINGS` (which win otherwise).
        self.settings = settings
        #: The temp dir: the data directory, the socket and the log; None when stopped.
        self.dir: Path | None = None
        #: Whether :meth:`halt` stopped the server and :meth:`resume` has not restarted it.
        self.halted = False

    def __enter__(self) -> ThrowawayCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def admin_dsn(self) -> str:
        """The superuser's DSN, database ``postgres``, through the socket in :attr:`dir`."""
        if self.dir is None:
            raise RuntimeError("the cluster is not started")
        return f"postgresql://postgres@/postgres?host={quote(str(self.dir), safe='/')}"

    def start(self) -> str:
        """Run initdb, then ``pg_ctl start`` waiting until it accepts connections; the
        admin DSN. Raises :class:`ClusterFailed`, having removed what it made.
        """
        self.dir = Path(tempfile.mkdtemp(prefix="sluicegate-pg-"))
        try:
            if os.geteuid() == 0:
                try:
                    owner = pwd.getpwnam("postgres")
                except KeyError:
                    raise ClusterFailed("root, and no user postgres to run initdb as") from None
                os.chown(self.dir, owner.pw_uid, owner.pw_gid)
            self._run("initdb", *INITDB_OPTIONS.split())
            with open(self.dir / "data" / "postgresql.conf", "a") as conf:
                conf.write(SETTINGS.format(dir=self.dir) + self.settings)
            wait = str(COMMAND_TIMEOUT)
            self._run("pg_ctl", "-D", "data", "-l", "log", "-w", "-t", wait, "start")
        except BaseException:
            self.stop()
            raise
        return self.admin_dsn

    def halt(self, mode: str = "immediate") -> None:
        """Stop the server, keeping its files (an outage: ``resume`` ends it):
        ``immediate`` at once (a crash), ``fast`` ending the sessions first."""
        self._run("pg_ctl", "-D", "data", "-m", mode, "-w", "stop")
        self.halted = True

    def resume(self) -> None:
        """Start the server again after :meth:`halt` (crash recovery from its WAL)."""
        self._run("pg_ctl", "-D", "data", "-l", "log", "-w", "-t", str(COMMAND_TIMEOUT), "start")
        self.halted = False

    def stop(self) -> None:
        """Stop the server at once (``-m immediate``: its files go next) and remove the dir."""
        if self.dir is None:
            return
        try:
            if (self.dir / "data" / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", "data", "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _run(self, program: str, *args: str) -> None:
        """Run one of the cluster's programs in :attr:`dir`, as ``postgres`` when root."""
        assert self.dir is not None
        command = [str(self.bindir / program), *args]
        if os.geteuid() == 0:
            runuser = shutil.which("runuser") or "/usr/sbin/runuser"  # sbin: not on every PATH
            command = [runuser, "-u", "postgres", "--", *command]
        try:
            subprocess.run(
                command,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            # pg_ctl says only "could not start server": the reason is in the server's log.
            output = getattr(exc, "stderr", None) or getattr(exc, "stdout", None) or ""
            log = self.dir / "log"
            if log.exists():
                output += log.read_text(errors="replace")
            if isinstance(exc, subprocess.CalledProcessError):
                what = f"exit status {exc.returncode}"
            else:
                what = str(exc)
            tail = " | ".join(output.strip().splitlines()[-3:])
            raise ClusterFailed(f"{program}: {what}{': ' + tail if tail else ''}") from exc
