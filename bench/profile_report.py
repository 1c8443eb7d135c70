"""Summarise daemon profiles written by ``throughput.py --profile-dir``.

* ``*.prof`` (``--cprofile``): the top functions by tottime and by cumtime (pstats).
* ``*.txt`` (``--py-spy``, collapsed stacks): samples by area of the daemon
  (SQL, Trio scheduling, structuring, ...), then the top functions by self
  samples (the leaf frame) and by inclusive samples (anywhere on the stack,
  counted once per stack), lines merged per function.

    .venv/bin/python bench/profile_report.py /tmp/prof/batched-normal.txt [--top 40]
"""

from __future__ import annotations

import argparse
import pstats
import re
import sys
from collections import Counter
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


def collapsed(path: Path, top: int) -> str:
    """Self and inclusive sample counts from py-spy's collapsed (raw) output."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_key(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
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
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
