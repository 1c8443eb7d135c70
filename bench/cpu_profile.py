"""Run a module under cProfile timed by the main thread's CPU clock.

``python -m cProfile`` times with the wall clock, so a process that is
preempted (a busy machine, or a peer woken by its own ``write``) is charged
for the time it waited. Timed by ``time.thread_time`` a function is charged
only for the CPU it used, system calls included, which is what the daemon's
"µs per job" counts. ``bench/harness.py`` uses it with ``BENCH_CPROFILE_CPU=1``:

    python bench/cpu_profile.py OUT.prof -m daemon.cli.main serve --config FILE
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    """Profile ``-m MODULE ARGS...`` into the file named first; dump on any exit."""
    out, flag, module, *rest = sys.argv[1:]
    if flag != "-m":
        raise SystemExit("usage: cpu_profile.py OUT.prof -m MODULE [ARGS...]")
    sys.argv = [module, *rest]
    profile = cProfile.Profile(time.thread_time)
    try:
        profile.runcall(runpy.run_module, module, run_name="__main__", alter_sys=True)
    finally:
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
