"""CPU per job of each verb of the batched path, with no event loop in the way.

One process builds a :class:`~daemon.core.Core` as ``sluice serve`` does (the
daemon's garbage-collector settings too: frozen start-up heap, first generation
of 10,000) and calls ``enqueue_many``, ``claim_next`` and ``complete_many`` of
``--batch`` jobs in turn, synchronously: each call is checked and planned
(:func:`daemon.dispatch.prepare`), its write committed in a transaction of its
own (``run_now``), its answer built and encoded. So each verb's figure is its
own work, not a share of a group commit, and two trees compare closely: A/B
rounds here differ by 1-2%, where the socket phases differ by 10%.

    .venv/bin/python bench/verb_costs.py [--rounds 300] [--source TREE] ...

``--source TREE`` runs ``daemon/`` and ``actors/`` from another tree (e.g. a
``git archive`` of an earlier commit); several ``--source`` run interleaved,
``--repeat`` times each. Prints µs per job of each verb and in total; asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = {
    "batched": ("enqueue_many", "claim_next", "complete_many"),
    "single": ("enqueue", "claim_next", "complete"),
}

# The child: run from the tree on sys.path[0], print one JSON line.
_CHILD = r"""
import gc, json, sys, tempfile, time
from pathlib import Path
import orjson, trio
from actors.clock import Clock
from daemon.config import Config
from daemon.core import Core
from daemon.dispatch import answer, prepare
try:
    from daemon.store.opening import open_database
except ImportError:  # trees before the store package
    from daemon.store.database import open_database

ROUNDS, BATCH, SINGLE = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "single"

async def main():
    with tempfile.TemporaryDirectory(prefix="sluice-verbs-") as directory:
        db = open_database(Path(directory) / "v.db", "normal", autocheckpoint=False)
        core = Core(Config(), db, Clock())
        async with trio.open_nursery() as root:
            await root.start(core.run)
            gc.collect()
            gc.freeze()  # as daemon.main._settle_heap does
            gc.set_threshold(10_000, 10, 10)
            session = core.auth.new_session()
            spent = dict.fromkeys(VERBS, 0.0)
            clock = time.process_time

            def call(op, args):
                started = clock()
                plan = prepare(core, session, op, args)
                result = core.writer.run_now(plan.write) if plan.write is not None else None
                reply = answer(plan, result)
                orjson.dumps(reply)
                spent[op] += clock() - started
                return reply

            n = finished = 0
            for _ in range(ROUNDS):
                if SINGLE:  # one job at a time: enqueue, claim one, complete
                    call("enqueue", {"queue": "q", "type": "b", "payload": {"n": n}})
                    n += 1
                    job = call("claim_next", {"queues": ["q"], "max": 1})["jobs"][0]["job"]
                    call("complete", {"job_id": job["id"], "lease": job["lease"]})
                    finished += 1
                    continue
                jobs = [{"queue": "q", "type": "b", "payload": {"n": n + i}} for i in range(BATCH)]
                call("enqueue_many", {"jobs": jobs})
                n += BATCH
                claim = call("claim_next", {"queues": ["q"], "max": BATCH})
                done = [{"job_id": j["job"]["id"], "lease": j["job"]["lease"]}
                        for j in claim["jobs"]]
                call("complete_many", {"jobs": done})
                finished += len(done)
            figures = {op: s / n * 1e6 for op, s in spent.items()}
            print(json.dumps({**figures, "jobs": n, "finished": finished}))
            root.cancel_scope.cancel()
        db.conn.close()

VERBS = ("enqueue", "claim_next", "complete") if SINGLE else (
    "enqueue_many", "claim_next", "complete_many")
trio.run(main)
"""


def run_tree(tree: Path, rounds: int, batch: int, phase: str) -> dict[str, float]:
    """One run of the verbs from ``tree``: µs per job of each verb."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(rounds), str(batch), phase],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    if figures.pop("finished") != figures.pop("jobs"):
        raise SystemExit(f"{tree}: not every job was claimed and completed")
    return figures  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    """Run each tree ``--repeat`` times, interleaved; print runs and medians."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=300, help="enqueue/claim/complete rounds")
    p.add_argument("--batch", type=int, default=100, help="jobs per call (batched)")
    p.add_argument("--phase", choices=tuple(PHASES), default="batched")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--source", action="append", default=[], help="a tree (repeatable)")
    args = p.parse_args(argv)
    trees = [Path(s).resolve() for s in args.source] or [ROOT]
    print(f"python {sys.version.split()[0]}; {' '.join(sys.argv)}")
    runs: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    verbs = PHASES[args.phase]
    for round_ in range(args.repeat):
        order = trees if round_ % 2 == 0 else trees[::-1]
        for tree in order:
            figures = run_tree(tree, args.rounds, args.batch, args.phase)
            runs[tree].append(figures)
            shown = "  ".join(f"{op} {figures[op]:5.2f}" for op in verbs)
            total = sum(figures.values())
            print(f"{tree.name:>12} run {round_ + 1}: {shown}  total {total:5.2f} µs/job")
    for tree in trees:
        medians = {op: statistics.median(r[op] for r in runs[tree]) for op in verbs}
        shown = "  ".join(f"{op} {medians[op]:5.2f}" for op in verbs)
        total = statistics.median(sum(r.values()) for r in runs[tree])
        print(f"{tree.name:>12} median: {shown}  total {total:5.2f} µs/job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
