"""Summarise daemon profiles written by ``throughput.py --profile-dir``.

* ``*.prof`` (``--cprofile``): the top functions by tottime and by cumtime (pstats).
* ``*.txt`` (``--py-spy``, collapsed stacks): samples by area of the daemon
  (SQL, Trio scheduling, structuring, ...), then the top functions by self
  samples (the leaf frame) and by inclusive samples (anywhere on the stack,
  counted once per stack), lines merged per function.

    .venv/bin/python bench/profile_report.py /tmp/prof/batched-normal.txt [--top 40]

Stacks recorded with ``py-spy record --native`` (C frames too) also get the
per-request breakdown of issue 16 (:func:`native_breakdown`): each sample is
put in one stage by its innermost Python frame and, when it is in C, by the
library it is in (SQLite's C, a system call, orjson).
"""

from __future__ import annotations

import argparse
import pstats
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

#: Areas of the daemon, matched in order against a sample's innermost frame.
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("answer building and encoding (to_wire, orjson)",
     ("to_wire", "encode_ok", "_result (daemon", "_claimed (daemon")),
    ("SQLite statements (daemon/store/jobs.py)", ("(daemon/store/jobs.py",)),
    ("BEGIN/COMMIT and the commit loop", ("GroupCommit._run", "GroupCommit._commit")),
    ("argument structuring (cattrs, attrs validators)",
     ("cattrs", "attrs generated methods daemon", "daemon/verbs/args.py", "daemon/strict.py",
      "daemon/validation.py")),
    ("job id minting", ("base64", "actors/ids.py", "random.py")),
    ("socket send", ("Connection.send", "_write_loop")),
    ("socket receive and framing",
     ("daemon/transport/framing.py", "_read_loop", "receive_some", "_nonblocking_helper",
      "sock_method_wrapper")),
    ("metrics and counts", ("prometheus_client", "daemon/metrics.py", "actors/counts.py")),
    ("Trio scheduling (tasks, events, cancel scopes, epoll)",
     ("trio/", "outcome", "contextlib", "attrs generated methods trio",
      "attrs generated methods outcome")),
)  # fmt: skip
OTHER = "other Python (dispatch, verbs, core effects, session)"


def area(frame: str) -> str:
    """The area of the daemon a frame belongs to."""
    for name, markers in AREAS:
        if any(m in frame for m in markers):
            return name
    return OTHER


_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")
_TRIM = ("/site-packages/", "/lib/python3.11/", "/work/main/")


def _short(path: str) -> str:
    for marker in _TRIM:
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _frame_key(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    return f"{match['func']} ({_short(match['file'])})"


def _samples(path: Path) -> Iterator[tuple[list[str], int]]:
    """Each stack of py-spy's raw output (frames outermost first, the process
    and thread pseudo-frames left out) with its sample count."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_frame_key(f) for f in stack.split(";")]
        yield [f for f in frames if not f.startswith(("process ", "thread "))], int(count)


def collapsed(path: Path, top: int) -> str:
    """Self and inclusive sample counts from py-spy's collapsed (raw) output."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for frames, n in _samples(path):
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        areas[area(frames[-1])] += n
        for key in set(frames):
            incl[key] += n
    out = [f"{path.name}: {total} samples", "", "by area (innermost frame):"]
    out += [f"{n:>8} {n / total:6.1%}  {k}" for k, n in areas.most_common()]
    out += ["", f"top {top} by self samples:"]
    out += [f"{n:>8} {n / total:6.1%}  {k}" for k, n in own.most_common(top)]
    out += ["", f"top {top} by inclusive samples:"]
    out += [f"{n:>8} {n / total:6.1%}  {k}" for k, n in incl.most_common(top)]
    return "\n".join(out)


#: Stages of a request, matched in order against a native sample's innermost
#: Python frame (after the C-level checks of :func:`stage`).
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("WAL checkpoint (its own thread)", ("_thread_cache.py",)),
    ("framing (split, parse, wide-int check)", ("daemon/transport/framing.py (parse", "LineFramer",
                                                 "daemon/transport/wide_ints.py")),
    ("answer building and encoding", ("to_wire", "encode_ok", "encode_error", "_claimed (",
                                      "_result (", "dispatch.py (answer", "_minimal", "small (")),
    ("argument checks", ("daemon/verbs/args.py", "cattrs", "daemon/strict.py", "validation.py")),
    ("metrics", ("prometheus_client", "daemon/metrics")),
    ("admission (door, quotas, policies, budgets, views)", ("daemon/admission/",)),
    ("commit loop (BEGIN, COMMIT, pending, settle)", ("daemon/store/database.py",
                                                      "daemon/store/transaction.py")),
    ("store Python (journal, SQL calls, rows)", ("daemon/store/",)),
    ("verbs (plan, write, answer)", ("daemon/verbs/",)),
    ("dispatch and the connection (requests in flight, idle sweeper)",
     ("daemon/dispatch.py", "daemon/transport/", "daemon/session.py")),
    ("ids, clock, counts (actors)", ("actors/",)),
    ("Trio scheduling (run loop, tasks, events)", ("trio/", "outcome/", "contextlib")),
)  # fmt: skip
_SYSCALLS = {"write": "socket write", "__libc_write": "socket write", "read": "socket read",
             "__libc_read": "socket read", "epoll_wait": "epoll", "epoll_ctl": "epoll",
             "pwrite64": "SQLite file I/O", "__libc_pwrite64": "SQLite file I/O",
             "__libc_pread64": "SQLite file I/O", "pread64": "SQLite file I/O",
             "fcntl64": "SQLite file locks", "__libc_fcntl64": "SQLite file locks",
             "fdatasync": "SQLite file I/O"}  # fmt: skip


def stage(frames: list[str]) -> str:
    """The stage of one native sample (frames outermost first)."""
    leaf = frames[-1]
    python = [f for f in frames if ".py" in f or "<frozen" in f]
    inner = python[-1] if python else leaf
    if any("_thread_cache.py" in f for f in python):
        # A thread of Trio's cache: waiting for work (py-spy sees a futex wait
        # as running) unless it is running the checkpoint.
        return IDLE if "WorkerThread._work" in inner else STAGES[0][0]
    for f in reversed(frames):
        if ".py" in f:
            break
        name = f.split(" (")[0]
        if name in _SYSCALLS:
            return f"system call: {_SYSCALLS[name]}"
        if "libsqlite3" in f or "_sqlite3" in f:
            if "daemon/store/database.py" in inner:
                return "SQLite C: BEGIN/COMMIT"
            return "SQLite C: statements"
        if "orjson" in f:
            return STAGES[2][0] if "encode" in inner else STAGES[1][0]
    for name, markers in STAGES[1:]:
        if any(m in inner for m in markers):
            return name
    return "other (stdlib, interpreter start-up)"


IDLE = "idle worker thread"


def native_breakdown(path: Path) -> str:
    """Samples per stage of a ``py-spy --native`` raw profile, as shares."""
    stages: Counter[str] = Counter()
    total = 0
    for frames, n in _samples(path):
        name = stage(frames) if frames else IDLE
        if name != IDLE:
            stages[name] += n
            total += n
    out = [f"{path.name}: {total} native samples (idle threads left out), by stage:"]
    out += [f"{n:>8} {n / total:6.1%}  {k}" for k, n in stages.most_common()]
    return "\n".join(out)


#: Built-in functions of cProfile's table, by the stage they do the work of.
_BUILTINS = (("'write'", "system call: socket write"), ("posix.write", "system call: socket write"),
             ("posix.read", "system call: socket read"), ("epoll", "system call: epoll"),
             ("sqlite3", "SQLite C: statements"), ("orjson.dumps", STAGES[2][0]),
             ("orjson.loads", STAGES[1][0]))  # fmt: skip


def cprofile_breakdown(path: Path, jobs: int | None = None) -> str:
    """Own time per stage of a cProfile table: a function's own time goes to
    the stage of its file; a built-in's is split over its callers' stages (or
    goes to its kind: a system call, SQLite, orjson). Start-up (imports) is
    left out."""
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    stages: Counter[str] = Counter()
    for (file, _line, func), (_cc, _nc, own, _cum, callers) in stats.items():
        if file != "~":
            stages[stage([f"{func} ({_short(file)})"])] += own
            continue
        kind = next((st for marker, st in _BUILTINS if marker in func), None)
        spent = sum(c[2] for c in callers.values()) or 1.0
        for (cfile, _cl, cfunc), c in callers.items():
            caller = stage([f"{cfunc} ({_short(cfile)})"])
            name = kind or caller
            if name == "SQLite C: statements" and caller == STAGES[6][0]:
                name = "SQLite C: BEGIN/COMMIT"  # the commit loop's own statements
            stages[name] += own * c[2] / spent
    for left_out in (IDLE, "other (stdlib, interpreter start-up)"):
        stages.pop(left_out, None)
    total = sum(stages.values())
    per = f", µs per job over {jobs} jobs" if jobs else ""
    out = [f"{path.name}: {total:.2f} s of own time after start-up, by stage{per}:"]
    for k, v in stages.most_common():
        cost = f"  {v / jobs * 1e6:8.1f}" if jobs else ""
        out.append(f"{v:8.2f} {v / total:6.1%}{cost}  {k}")
    return "\n".join(out)


def cprofile(path: Path, top: int) -> None:
    """pstats' top functions by tottime, then by cumtime, on stdout."""
    stats = pstats.Stats(str(path), stream=sys.stdout)
    stats.strip_dirs()
    print(f"{path.name}: top {top} by tottime")
    stats.sort_stats("tottime").print_stats(top)
    print(f"{path.name}: top {top} by cumtime")
    stats.sort_stats("cumtime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    """Print a summary of each profile named on the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profiles", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    for path in args.profiles:
        if path.suffix == ".prof":
            cprofile(path, args.top)
        else:
            print(collapsed(path, args.top))
            if "(libpython" in path.read_text()[:200_000]:
                print()
                print(native_breakdown(path))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
