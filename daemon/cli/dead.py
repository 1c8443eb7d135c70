"""``sluice dead list|replay``: the dead letters, and sending them back to work.

``dead replay --all`` replays in batches of up to 1000 (``dead_replay {all:
true, queue?, limit: 1000}``) for as long as the daemon answers
``"remaining": true``, with a progress bar on stderr once there is more than
one batch. A replayed job whose unique key a live job now holds stays dead
(it comes back as that job's duplicate); a batch made only of those stops the
loop, since repeating it would replay nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.context import Context, UsageError
from daemon.cli.jobs import int_range
from daemon.cli.output import Progress, emit_json, local_time, shorten, table
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
        result = replay_all(client, args.queue) if args.all else client.dead_replay(args.job_ids)
    if ctx.json:
        emit_json(result)
        return 0
    results = result["results"]
    replayed = sum(not r["duplicate"] for r in results)
    if not args.all:
        asked = list(dict.fromkeys(args.job_ids))
        for job_id, r in zip(asked, results, strict=False):
            if r["duplicate"]:
                print(f"{job_id}: stays dead: live job {r['job']['id']} holds its unique key")
            else:
                print(f"replayed {job_id} on {r['job']['queue']}")
    kept = len(results) - replayed
    note = f" ({kept} stayed dead: a live job holds their unique key)" if kept else ""
    print(f"replayed {replayed} job{'s' if replayed != 1 else ''}{note}")
    return 0


def replay_all(client: Client, queue: str | None) -> dict[str, Any]:
    """Replay every dead letter (of ``queue``) in batches; one combined result."""
    results: list[dict[str, Any]] = []
    progress: Progress | None = None
    replayed = 0
    cursor: str | None = None
    while True:
        answer = client.dead_replay(all=True, queue=queue, limit=BATCH, after=cursor)
        batch = answer["results"]
        results.extend(batch)
        replayed += sum(not r["duplicate"] for r in batch)
        cursor = answer.get("next")
        more = bool(answer.get("remaining")) and cursor is not None
        if progress is None and more:
            progress = Progress("replaying", replayed + _dead_count(client, queue))
        if progress is not None:
            progress.update(replayed)
        if not more:
            break
    if progress is not None:
        progress.close()
    return {"results": results, "remaining": bool(answer.get("remaining"))}


def _dead_count(client: Client, queue: str | None) -> int:
    """Dead letters still waiting (for the progress bar's total)."""
    rows = client.status().get("queues") or []
    return sum(r.get("dead", 0) for r in rows if queue is None or r["queue"] == queue)
