"""``sluice dead list|replay``: the dead letters, and sending them back to work.

``dead replay --all`` replays in batches of up to 1000 (``dead_replay {all:
true, queue?, limit: 1000, after?}``, each batch after the previous one's
``next``) for as long as the daemon answers ``"remaining": true``. On a
terminal it draws a progress bar on stderr (count, rate, ETA), its total the
dead letters ``status`` counts; none under ``--json`` or when stdout or
stderr is not a terminal. A replayed job whose unique key a live job now holds
stays dead (it comes back as that job's duplicate); the cursor moves past it,
so it is not tried again.
"""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from daemon.cli.context import Context, UsageError
from daemon.cli.jobs import int_range
from daemon.cli.output import Progress, emit_json, local_time, progress_allowed, shorten, table
from daemon.sdk.sync_client import Client

BATCH = 1000


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``dead list`` and ``dead replay``."""
    dead = sub.add_parser("dead", parents=[common], help="list or replay dead letters")
    verbs = dead.add_subparsers(dest="dead_command", required=True, metavar="list|replay")
    ls = verbs.add_parser("list", parents=[common], help="dead letters in id order")
    ls.add_argument("--queue", metavar="Q")
    ls.add_argument("--limit", type=int_range(1, 1000), default=100, metavar="N")
    ls.add_argument("--after", metavar="CURSOR", help="the next page (from a previous list)")
    ls.set_defaults(run=run_list)
    replay = verbs.add_parser(
        "replay",
        parents=[common],
        help="send dead letters back to pending",
        usage="sluice dead replay (ID... | --all [--queue Q]) [options]",
    )
    replay.add_argument("job_ids", nargs="*", metavar="ID")
    replay.add_argument("--all", action="store_true", help="every dead letter (in batches)")
    replay.add_argument("--queue", metavar="Q", help="with --all: only this queue's")
    replay.set_defaults(run=run_replay)


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    """One page of dead letters."""
    with ctx.client() as client:
        result = client.dead_list(args.queue, args.limit, args.after)
    if ctx.json:
        emit_json(result)
        return 0
    jobs = result.get("jobs") or []
    if not jobs:
        print("no dead letters")
        return 0
    rows = [
        [
            j["id"],
            j["queue"],
            j["type"],
            j["attempts"],
            local_time((j.get("dead") or {}).get("at")),
            (j.get("dead") or {}).get("reason", ""),
            shorten(j.get("error")),
        ]
        for j in jobs
    ]
    print(table(["ID", "QUEUE", "TYPE", "ATTEMPTS", "DIED", "REASON", "ERROR"], rows))
    if result.get("next"):
        print(f"(more: --after {result['next']})")
    return 0


def run_replay(ctx: Context, args: argparse.Namespace) -> int:
    """Replay the named dead letters, or all of them."""
    if args.all == bool(args.job_ids):
        raise UsageError("dead replay: give job ids or --all, not both")
    if args.queue and not args.all:
        raise UsageError("dead replay: --queue goes with --all")
    with ctx.client() as client:
        if args.all:
            done = replay_all(
                client, args.queue, keep=ctx.json, progress=progress_allowed(ctx.json)
            )
            result = {"results": done.results, "remaining": done.remaining}
        else:
            result = client.dead_replay(args.job_ids)
            batch = result["results"]
            replayed = sum(not r["duplicate"] for r in batch)
            done = ReplayAll(batch, False, replayed, len(batch) - replayed)
    if ctx.json:
        emit_json(result)
        return 0
    if not args.all:
        asked = list(dict.fromkeys(args.job_ids))
        for job_id, r in zip(asked, done.results, strict=False):
            if r["duplicate"]:
                print(f"{job_id}: stays dead: live job {r['job']['id']} holds its unique key")
            else:
                print(f"replayed {job_id} on {r['job']['queue']}")
    kept = done.kept
    note = f" ({kept} stayed dead: a live job holds their unique key)" if kept else ""
    print(f"replayed {done.replayed} job{'s' if done.replayed != 1 else ''}{note}")
    return 0


@attrs.frozen
class ReplayAll:
    """What ``dead replay --all`` did: the verb's results (when kept), and counts."""

    results: list[dict[str, Any]]
    remaining: bool
    replayed: int
    kept: int


def replay_all(
    client: Client, queue: str | None, *, keep: bool = True, progress: bool = False
) -> ReplayAll:
    """Replay every dead letter (of ``queue``) in batches of :data:`BATCH`.

    ``keep``: return every batch's results (for ``--json``); else only the
    counts, so that 100,000 replays do not hold 100,000 jobs in memory.
    ``progress``: draw a bar on stderr, its total the dead letters that
    ``status`` counts before the first batch.
    """
    results: list[dict[str, Any]] = []
    replayed = kept = 0
    cursor: str | None = None
    total = _dead_count(client, queue) if progress else None
    with Progress("replaying", total, unit="jobs", enabled=progress) as bar:
        while True:
            answer = client.dead_replay(all=True, queue=queue, limit=BATCH, after=cursor)
            batch = answer["results"]
            if keep:
                results.extend(batch)
            done = sum(not r["duplicate"] for r in batch)
            replayed += done
            kept += len(batch) - done
            cursor = answer.get("next")
            more = bool(answer.get("remaining")) and cursor is not None
            # Dead letters added meanwhile raise the total; the bar ends full.
            bar.update(replayed + kept, None if more else replayed + kept)
            if not more:
                break
    return ReplayAll(results, bool(answer.get("remaining")), replayed, kept)


def _dead_count(client: Client, queue: str | None) -> int:
    """Dead letters waiting now (the progress bar's total)."""
    rows = client.status().get("queues") or []
    return sum(r.get("dead", 0) for r in rows if queue is None or r["queue"] == queue)
