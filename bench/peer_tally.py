"""The tally every process of ``bench/peers.py`` shares: which jobs ran, and when.

Every system's job body is the same :func:`record` call, so each pays the same
bookkeeping per job (under a microsecond) and no system's result store is used.
The worker processes find the file through ``$PEERS_TALLY``.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

#: The queue (dramatiq, Sluicegate) or huey instance name of the benchmark's jobs.
QUEUE = "peers"
_HEADER = 8  # the job count, one unsigned 64-bit integer


class Tally:
    """Per-job run counts and times in one shared file (``mmap``, ``MAP_SHARED``).

    Layout: the job count; one byte per job, how many times it ran (saturating
    at 255); one double per job, ``time.perf_counter()`` when it first ran; one
    double per job, when its enqueue was sent. ``perf_counter`` is
    ``CLOCK_MONOTONIC`` on Linux, so the times compare across processes. Each
    job's slots are written by whichever process runs or sends it; a job run
    twice at the same instant may be counted once (a lower bound on duplicates).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), 0)
        (self.jobs,) = struct.unpack_from("Q", self._map, 0)
        self._ran_at = _HEADER + (self.jobs + 7) // 8 * 8
        self._sent_at = self._ran_at + 8 * self.jobs

    @classmethod
    def create(cls, path: Path, jobs: int) -> Tally:
        """A zeroed tally for ``jobs`` jobs."""
        size = _HEADER + (jobs + 7) // 8 * 8 + 16 * jobs
        with open(path, "wb") as f:
            f.truncate(size)
            f.write(struct.pack("Q", jobs))
        return cls(path)

    def ran(self, n: int) -> None:
        """Job ``n`` ran (called by its job body)."""
        at = time.perf_counter()
        count = self._map[_HEADER + n]
        self._map[_HEADER + n] = min(count + 1, 255)
        if not count:
            struct.pack_into("d", self._map, self._ran_at + 8 * n, at)

    def sent(self, first: int, count: int = 1) -> None:
        """Jobs ``first`` to ``first + count - 1`` are being sent now."""
        struct.pack_into(f"{count}d", self._map, self._sent_at + 8 * first,
                         *(time.perf_counter(),) * count)  # fmt: skip

    def counts(self) -> bytes:
        """How many times each job ran."""
        return self._map[_HEADER : _HEADER + self.jobs]

    def done(self) -> int:
        """Jobs that ran at least once."""
        return self.jobs - self.counts().count(0)

    def times(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """When each job was sent, and when it first ran (0.0: never)."""
        sent = struct.unpack_from(f"{self.jobs}d", self._map, self._sent_at)
        ran = struct.unpack_from(f"{self.jobs}d", self._map, self._ran_at)
        return sent, ran

    def close(self) -> None:
        """Unmap the file."""
        self._map.close()


_tally: Tally | None = None


def record(n: int) -> None:
    """The job body of every system: count job ``n`` in ``$PEERS_TALLY``.

    The file is opened on first use, so in whichever process runs jobs (huey
    forks its workers after importing this module).
    """
    global _tally
    if _tally is None:
        _tally = Tally(Path(os.environ["PEERS_TALLY"]))
    _tally.ran(n)
