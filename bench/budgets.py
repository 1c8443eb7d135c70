"""Sluicegate budgets benchmark: prints figures, asserts nothing about timing.

Three measurements, each against a fresh ``sluice serve`` (``synchronous =
"normal"``) spoken to over its unix socket by this process:

* ``parked``: ``claim_next max=1`` + ``complete`` latency for unbudgeted jobs
  with no job parked, then, in the same daemon, with N (1,000,000) jobs parked
  behind an exhausted ``while_in_flight`` budget in the same queue. Then the
  budget is freed job by job: how soon the oldest parked job is claimed.
* ``idle``: the daemon's CPU over S (60) s idle with no budget, with 8,192
  budgets (half ``while_in_flight``, half ``time_based``, all full), and with
  the ``time_based`` half refilling after one debit each.
* ``dispatch``: how soon a parked job is claimed after its tokens become
  available: a ``time_based`` drip (the instant is exact) and a
  ``while_in_flight`` budget (from the ``complete`` acknowledged).

Exit status 1 only on a correctness failure (a lost job, an error answer, a
budget over-spent, a daemon error), never on timing.

    .venv/bin/python bench/budgets.py [--quick] [--only parked,idle,dispatch] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from harness import BenchDaemon
from throughput import environment, percentile
from wire import WireClient

MEASUREMENTS = ("parked", "idle", "dispatch")
QUEUE = "bench"
#: Lease of every measured claim: long enough never to lapse in a run, and
#: known, so a claim's daemon instant is ``lease_expires_at - LEASE_MS``.
LEASE_MS = 3_600_000
HOUR_MS = 3_600_000
perf = time.perf_counter


class Problems(list[str]):
    """Correctness failures: any of them makes the exit status 1."""

    def check(self, ok: bool, what: str) -> bool:
        if not ok:
            self.append(what)
            print(f"  PROBLEM: {what}", file=sys.stderr, flush=True)
        return ok


def note(text: str) -> None:
    """Progress, on stderr."""
    print(f"  {text}", file=sys.stderr, flush=True)


# -- what else the machine did -------------------------------------------------------


def _machine_busy() -> float:
    """CPU seconds all CPUs spent busy so far (/proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Span:
    """CPU of the daemon, of this process and of everything else over a span.

    ``others`` is the machine's busy time minus the daemon and this process,
    in % of one core: another benchmark running beside this one shows there.
    """

    def __init__(self, daemon: BenchDaemon) -> None:
        self.daemon = daemon
        self.t0 = perf()
        self.machine0 = _machine_busy()
        self.own0 = _own_cpu()
        self.daemon0 = daemon.cpu_seconds()
        self.wake0 = daemon.wakeups()
        self.load0 = os.getloadavg()[0]

    def end(self) -> dict[str, Any]:
        seconds = perf() - self.t0
        daemon = self.daemon.cpu_seconds() - self.daemon0
        own = _own_cpu() - self.own0
        machine = _machine_busy() - self.machine0
        return {
            "seconds": seconds,
            "daemon_cpu_pct": daemon / seconds * 100,
            "bench_cpu_pct": own / seconds * 100,
            "others_cpu_pct": max(0.0, machine - daemon - own) / seconds * 100,
            "daemon_wakeups_per_s": (self.daemon.wakeups() - self.wake0) / seconds,
            "load_avg_1m": [round(self.load0, 2), round(os.getloadavg()[0], 2)],
        }


def _disturbance(span: dict[str, Any]) -> str:
    return (
        f"daemon CPU {span['daemon_cpu_pct']:.0f}%, bench {span['bench_cpu_pct']:.0f}%, "
        f"others {span['others_cpu_pct']:.0f}% of a core, load "
        f"{span['load_avg_1m'][0]:.2f}->{span['load_avg_1m'][1]:.2f}"
    )


# -- daemons ---------------------------------------------------------------------------


@contextmanager
def daemon_for(
    tag: str, args: argparse.Namespace, problems: Problems, **kwargs: Any
) -> Iterator[BenchDaemon]:
    """A fresh daemon; on the way out: its SIGTERM exit status and its log's errors."""
    spy = Path(args.profile_dir) / f"budgets-{tag}.txt" if args.profile_dir else None
    with BenchDaemon("normal", py_spy=spy, keep=args.keep, **kwargs) as daemon:
        daemon.start()
        note(f"{tag}: daemon pid {daemon.pid}, state {daemon.state}")
        try:
            yield daemon
        finally:
            code = daemon.stop()
            problems.check(code == 0, f"{tag}: daemon exited {code} on SIGTERM")
            bad = [
                line
                for line in daemon.log_text().splitlines()
                if " ERROR " in line or " CRITICAL " in line or "Traceback" in line
            ]
            problems.check(
                not bad, f"{tag}: {len(bad)} error line(s) in the daemon log, first: {bad[:1]}"
            )
            warnings = [line for line in daemon.log_text().splitlines() if " WARNING " in line]
            if warnings:
                note(f"{tag}: {len(warnings)} warning(s) in the daemon log, first: {warnings[0]}")
            if args.keep:
                note(f"{tag}: kept {daemon.workdir}")


def enqueue_bulk(
    client: WireClient,
    job: dict[str, Any],
    total: int,
    problems: Problems,
    *,
    batch: int = 1000,
    window: int = 4,
    label: str = "",
    keep_ids: int = 0,
) -> dict[str, Any]:
    """``total`` copies of ``job`` by ``enqueue_many`` of ``batch``, ``window`` in flight.

    Returns the rate, how many answers said the job was deferred (parked at
    enqueue), and the ids of the first ``keep_ids`` jobs in enqueue order.
    """
    sizes: dict[int, int] = {}
    index: dict[int, int] = {}
    kept: dict[int, list[str]] = {}
    sent = done = deferred = 0
    t0 = perf()
    step = max(total // 10, batch)
    next_note = step
    while done < total:
        while sent < total and len(sizes) < window:
            n = min(batch, total - sent)
            req_id = client.request("enqueue_many", jobs=[job] * n)
            sizes[req_id] = n
            index[req_id] = sent
            sent += n
        answer = client.read()
        n = sizes.pop(answer["id"])
        first = index.pop(answer["id"])
        if not problems.check(
            bool(answer.get("ok")) and len(answer["results"]) == n,
            f"enqueue_many {label}: {answer.get('error')}",
        ):
            break
        results = answer["results"]
        deferred += sum(
            1 for r in results if (r["job"].get("admission") or {}).get("state") == "deferred"
        )
        if first < keep_ids:
            kept[first] = [r["job"]["id"] for r in results]
        done += n
        if done >= next_note and total >= 50_000:
            rate = done / (perf() - t0)
            note(f"{label}: {done:,}/{total:,} enqueued, {rate:,.0f} jobs/s")
            next_note += step
    ids = [i for first in sorted(kept) for i in kept[first]]
    seconds = perf() - t0
    return {
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done / seconds if seconds else 0.0,
        "deferred_at_enqueue": deferred,
        "ids": ids[:keep_ids],
    }


def _pcts(samples_ms: list[float]) -> dict[str, Any]:
    if not samples_ms:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "n": len(samples_ms),
        "p50_ms": percentile(samples_ms, 0.50),
        "p99_ms": percentile(samples_ms, 0.99),
        "max_ms": max(samples_ms),
    }


def _fmt(p: dict[str, Any]) -> str:
    if not p.get("n"):
        return "no samples"
    return (
        f"p50 {p['p50_ms']:.3f} ms, p99 {p['p99_ms']:.3f} ms, max {p['max_ms']:.2f} ms "
        f"(n={p['n']:,})"
    )


def _lag(daemon: BenchDaemon) -> dict[str, Any] | None:
    return (daemon.status().get("daemon") or {}).get("loop_lag")


def _queue_counts(status: dict[str, Any], queue: str) -> dict[str, int]:
    rows = [q for q in status.get("queues", []) if q.get("queue") == queue]
    return rows[0] if rows else {}


def _budget(client: WireClient, key: str) -> dict[str, Any]:
    return client.ok("budget_get", key=key)["budget"]


# -- 1. claim latency with a parked backlog -------------------------------------------------


def claim_loop(client: WireClient, n: int, problems: Problems) -> tuple[list[float], list[float]]:
    """``n`` times ``claim_next max=1`` then ``complete``, one request in flight.

    Returns the claim latencies and the claim + complete latencies, in ms.
    """
    claims: list[float] = []
    trips: list[float] = []
    for _ in range(n):
        t0 = perf()
        answer = client.call("claim_next", queues=[QUEUE], max=1, lease_ms=LEASE_MS)
        t1 = perf()
        jobs = answer.get("jobs") or []
        if not problems.check(
            bool(answer.get("ok")) and len(jobs) == 1,
            f"claim_next: {answer.get('error') or 'empty'}",
        ):
            break
        job = jobs[0]["job"]
        if not problems.check(not job["budgets"], f"claimed a budgeted job {job['id']}"):
            break
        done = client.call("complete", job_id=job["id"], lease=job["lease"])
        t2 = perf()
        if not problems.check(bool(done.get("ok")), f"complete: {done.get('error')}"):
            break
        claims.append((t1 - t0) * 1000)
        trips.append((t2 - t0) * 1000)
    return claims, trips


def measure_claims(
    client: WireClient,
    daemon: BenchDaemon,
    args: argparse.Namespace,
    problems: Problems,
    label: str,
) -> dict[str, Any]:
    """A supply of unbudgeted jobs, a warm-up, then ``repeat`` blocks of ``claims``."""
    supply = args.warmup + args.repeat * args.claims
    enqueued = enqueue_bulk(client, {"queue": QUEUE, "type": "free"}, supply, problems, label=label)
    enqueued.pop("ids")
    claim_loop(client, args.warmup, problems)
    blocks = []
    all_claims: list[float] = []
    all_trips: list[float] = []
    for i in range(args.repeat):
        span = Span(daemon)
        claims, trips = claim_loop(client, args.claims, problems)
        figures = span.end()
        block = {
            "claim": _pcts(claims),
            "claim_complete": _pcts(trips),
            **figures,
            "daemon_cpu_ms_per_job": figures["daemon_cpu_pct"]
            * figures["seconds"]
            * 10
            / max(1, len(claims)),
        }
        blocks.append(block)
        all_claims += claims
        all_trips += trips
        note(f"{label} block {i + 1}: claim {_fmt(block['claim'])}; {_disturbance(figures)}")
    best = min(blocks, key=lambda b: b["claim"]["p99_ms"] or float("inf"))
    return {
        "supply": enqueued,
        "claim": _pcts(all_claims),
        "claim_complete": _pcts(all_trips),
        "best_block": best,
        "blocks": blocks,
    }


def bench_parked(args: argparse.Namespace, problems: Problems) -> dict[str, Any]:
    """Claim latency with 0, then N, jobs parked behind an exhausted budget."""
    parked = args.backlog == "parked"
    out: dict[str, Any] = {"parked": args.parked, "backlog": args.backlog}
    with daemon_for("parked", args, problems) as daemon, WireClient(daemon.socket) as client:
        client.ok("budget_create", key="held", allocation=1, strategy={"type": "while_in_flight"})
        client.ok("enqueue", queue=QUEUE, type="holder", budgets=[{"key": "held"}])
        holder = client.ok("claim_next", queues=[QUEUE], max=1, lease_ms=LEASE_MS)["jobs"][0]
        problems.check(holder["job"]["type"] == "holder", "the holder job was not claimed first")
        out["baseline"] = measure_claims(client, daemon, args, problems, f"0 {args.backlog}")

        if parked:
            note(f"parking {args.parked:,} jobs behind budget 'held' (exhausted)")
            backlog = {"queue": QUEUE, "type": "parked", "budgets": [{"key": "held"}]}
        else:  # the control: as many rows, neither bound nor ready (due in a day)
            note(f"enqueueing {args.parked:,} unbudgeted jobs due in a day (control)")
            backlog = {"queue": QUEUE, "type": "later", "delay_ms": 86_400_000}
        span = Span(daemon)
        load = enqueue_bulk(
            client, backlog, args.parked, problems, label=args.backlog, keep_ids=args.release
        )
        first_ids = load.pop("ids")
        out["load"] = {**load, **span.end()}
        note(
            f"parked {load['jobs']:,} in {load['seconds']:.1f} s ({load['jobs_per_s']:,.0f}/s), "
            f"{load['deferred_at_enqueue']:,} deferred at enqueue"
        )
        problems.check(
            load["deferred_at_enqueue"] == (args.parked if parked else 0),
            f"{args.parked - load['deferred_at_enqueue']} bound jobs not deferred at enqueue",
        )
        time.sleep(args.settle)
        out["db_bytes"] = sum(f.stat().st_size for f in daemon.state.glob("sluicegate.db*"))
        out["with_parked"] = measure_claims(
            client, daemon, args, problems, f"{args.parked:,} {args.backlog}"
        )

        state = _budget(client, "held")["state"]
        counts = _queue_counts(daemon.status(), QUEUE)
        measured = 2 * (args.warmup + args.repeat * args.claims)
        expect_parked = args.parked if parked else 0
        problems.check(
            state["parked"] == expect_parked and state["in_flight"] == 1,
            f"budget held: {state}, expected {expect_parked} parked, 1 in flight",
        )
        where = "pending" if parked else "scheduled"
        problems.check(
            counts.get(where) == args.parked
            and counts.get("running") == 1
            and counts.get("completed") == measured,
            f"queue {QUEUE}: {counts}, expected {where}={args.parked}, running=1, "
            f"completed={measured}",
        )

        # Free the budget job by job: each complete releases the oldest parked job.
        if args.release and parked:
            with WireClient(daemon.socket) as waiter:
                lat, dlat = wif_cycles(
                    waiter,
                    client,
                    QUEUE,
                    args.release,
                    holder["job"],
                    first_ids,
                    problems,
                    "release",
                )
            out["release"] = {"client": _pcts(lat), "daemon": _pcts(dlat)}
            note(f"release behind {args.parked - args.release:,} parked: {_fmt(_pcts(lat))}")
        out["loop_lag"] = _lag(daemon)
    b, w = out["baseline"], out["with_parked"]
    out["ratio"] = {
        "claim_p50": _ratio(w["claim"]["p50_ms"], b["claim"]["p50_ms"]),
        "claim_p99": _ratio(w["claim"]["p99_ms"], b["claim"]["p99_ms"]),
        "claim_complete_p50": _ratio(w["claim_complete"]["p50_ms"], b["claim_complete"]["p50_ms"]),
        "claim_complete_p99": _ratio(w["claim_complete"]["p99_ms"], b["claim_complete"]["p99_ms"]),
        "best_block_claim_p99": _ratio(
            w["best_block"]["claim"]["p99_ms"], b["best_block"]["claim"]["p99_ms"]
        ),
    }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


# -- 2. idle budgets ---------------------------------------------------------------------


def _idle(daemon: BenchDaemon, seconds: float, slices: int = 6) -> dict[str, Any]:
    """Sleep ``seconds``, reading the daemon's CPU in ``slices``."""
    span = Span(daemon)
    per_slice = []
    step = seconds / slices
    for _ in range(slices):
        cpu0, t0 = daemon.cpu_seconds(), perf()
        time.sleep(step)
        per_slice.append((daemon.cpu_seconds() - cpu0) / (perf() - t0) * 100)
    return {**span.end(), "slice_cpu_pct": per_slice}


def create_budgets(client: WireClient, n: int, problems: Problems) -> list[str]:
    """``n`` budgets, pipelined: even ones ``while_in_flight``, odd ones ``time_based``.

    Returns the keys of the ``time_based`` ones.
    """
    timed: list[str] = []
    for start in range(0, n, 512):
        calls = []
        for i in range(start, min(n, start + 512)):
            if i % 2:
                timed.append(f"b{i:05d}")
                calls.append(
                    (
                        "budget_create",
                        {
                            "key": f"b{i:05d}",
                            "allocation": 100,
                            "strategy": {"type": "time_based", "duration_ms": HOUR_MS},
                        },
                    )
                )
            else:
                calls.append(
                    (
                        "budget_create",
                        {
                            "key": f"b{i:05d}",
                            "allocation": 10,
                            "strategy": {"type": "while_in_flight"},
                        },
                    )
                )
        for _ in client.request_many(calls):
            answer = client.read()
            problems.check(bool(answer.get("ok")), f"budget_create: {answer.get('error')}")
    listed = len(client.ok("budget_list")["budgets"])
    problems.check(listed == n, f"budget_list has {listed} budgets, created {n}")
    return timed


def drain_once(client: WireClient, keys: list[str], problems: Problems) -> None:
    """Run one job bound to each of ``keys``: their pools are then below the cap."""
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        answer = client.ok(
            "enqueue_many",
            jobs=[{"queue": "drain", "type": "drain", "budgets": [{"key": k}]} for k in chunk],
        )
        problems.check(len(answer["results"]) == len(chunk), "enqueue_many drain: short")
    left = len(keys)
    while left:
        answer = client.ok("claim_next", queues=["drain"], max=1000, lease_ms=LEASE_MS)
        jobs = [j["job"] for j in answer["jobs"]]
        if not problems.check(bool(jobs), f"drain: {left} bound jobs not claimable"):
            return
        for _ in client.request_many(
            ("complete", {"job_id": j["id"], "lease": j["lease"]}) for j in jobs
        ):
            done = client.read()
            problems.check(bool(done.get("ok")), f"complete: {done.get('error')}")
        left -= len(jobs)


def bench_idle(args: argparse.Namespace, problems: Problems) -> dict[str, Any]:
    """Idle CPU with 0 budgets, with ``budgets`` full ones, then with half refilling."""
    out: dict[str, Any] = {"seconds": args.idle_seconds, "budgets": args.budgets}
    # No loop probe: its 5 ms timer would be most of an idle daemon's CPU.
    with daemon_for("idle-0", args, problems, loop_probe=None) as daemon:
        time.sleep(args.settle)
        out["none"] = _idle(daemon, args.idle_seconds)
        note(f"idle, 0 budgets: {_idle_line(out['none'])}")
    with daemon_for("idle-n", args, problems, loop_probe=None) as daemon:
        with WireClient(daemon.socket) as client:
            t0 = perf()
            timed = create_budgets(client, args.budgets, problems)
            out["create_seconds"] = perf() - t0
        time.sleep(args.settle)
        out["full"] = _idle(daemon, args.idle_seconds)
        note(f"idle, {args.budgets:,} budgets, full: {_idle_line(out['full'])}")
        with WireClient(daemon.socket) as client:
            drain_once(client, timed, problems)
            refilling = sum(
                1
                for b in client.ok("budget_list")["budgets"]
                if b["state"]["next_refill_at"] is not None
            )
            problems.check(
                refilling == len(timed), f"{refilling} budgets refilling, expected {len(timed)}"
            )
        time.sleep(args.settle)
        out["refilling"] = _idle(daemon, args.idle_seconds)
        out["refilling_budgets"] = len(timed)
        note(
            f"idle, {args.budgets:,} budgets, {len(timed):,} refilling: "
            f"{_idle_line(out['refilling'])}"
        )
    return out


def _idle_line(r: dict[str, Any]) -> str:
    slices = " ".join(f"{x:.2f}" for x in r["slice_cpu_pct"])
    return (
        f"daemon {r['daemon_cpu_pct']:.3f}% of a core ({slices} per slice), "
        f"{r['daemon_wakeups_per_s']:.1f} wake-ups/s; others {r['others_cpu_pct']:.0f}%, "
        f"load {r['load_avg_1m'][0]:.2f}->{r['load_avg_1m'][1]:.2f}"
    )


# -- 3. dispatch latency --------------------------------------------------------------------


def calibrate(client: WireClient, n: int, problems: Problems) -> tuple[float, float]:
    """Bounds on the daemon's wall clock minus this process's ``perf_counter`` (ms).

    The daemon's ``now_ms`` is a wall instant taken at start plus Trio's
    monotonic time since (CLOCK_MONOTONIC, like ``perf_counter``, plus a fixed
    offset), so the two differ by a constant: each quick claim brackets it,
    as the claim's instant (``lease_expires_at - lease_ms``) lies between
    sending and answering.
    """
    enqueue_bulk(client, {"queue": "calibrate", "type": "cal"}, n, problems, label="calibrate")
    lo, hi = -float("inf"), float("inf")
    for _ in range(n):
        t0 = perf() * 1000
        answer = client.call("claim_next", queues=["calibrate"], max=1, lease_ms=LEASE_MS)
        t1 = perf() * 1000
        if not problems.check(bool(answer.get("jobs")), f"calibrate: {answer.get('error')}"):
            break
        job = answer["jobs"][0]["job"]
        now = job["lease_expires_at"] - LEASE_MS
        lo, hi = max(lo, now - t1), min(hi, now + 1 - t0)
        client.ok("complete", job_id=job["id"], lease=job["lease"])
    problems.check(lo <= hi, f"clock calibration inconsistent: {lo} > {hi}")
    return lo, hi


def drip(
    client: WireClient, n: int, duration_ms: int, offset: float, problems: Problems
) -> tuple[list[float], list[float]]:
    """Jobs behind a ``time_based`` budget of 1 token per ``duration_ms``, burst 1.

    A primer job empties the pool; then n jobs are parked at enqueue. The
    client keeps a ``claim_next wait_ms`` waiting (pipelined behind the
    previous job's ``complete``). With burst 1 a debit always leaves the pool
    empty, so job k's token is available exactly ``duration_ms`` after job
    k-1's claim instant. Returns (answer received - available) as seen by this
    process (on the daemon's clock, via the calibrated offset) and (claim
    instant - available) inside the daemon, in ms.
    """
    key = "drip"
    client.ok(
        "budget_create",
        key=key,
        allocation=1,
        strategy={"type": "time_based", "duration_ms": duration_ms, "burst": 1},
    )
    bound = {"queue": "drip", "type": "drip", "budgets": [{"key": key}]}
    client.ok("enqueue", **bound)
    answer = client.ok("claim_next", queues=["drip"], max=1, lease_ms=LEASE_MS)
    prev = answer["jobs"][0]["job"]
    load = enqueue_bulk(client, bound, n, problems, label="drip")
    problems.check(
        load["deferred_at_enqueue"] == n,
        f"drip: {n - load['deferred_at_enqueue']} jobs not parked at enqueue",
    )
    seen: list[float] = []
    inside: list[float] = []
    prev_at = prev["lease_expires_at"] - LEASE_MS
    for _ in range(n):
        ids = client.request_many(
            [
                ("complete", {"job_id": prev["id"], "lease": prev["lease"]}),
                (
                    "claim_next",
                    {"queues": ["drip"], "max": 1, "wait_ms": 10_000, "lease_ms": LEASE_MS},
                ),
            ]
        )
        frames = {}
        received = 0.0
        while len(frames) < 2:
            frame = client.read()
            if frame["id"] == ids[1]:
                received = perf() * 1000
            frames[frame["id"]] = frame
        done, answer = frames[ids[0]], frames[ids[1]]
        problems.check(bool(done.get("ok")), f"drip complete: {done.get('error')}")
        if not problems.check(
            bool(answer.get("jobs")), f"drip claim_next: {answer.get('error') or answer}"
        ):
            break
        job = answer["jobs"][0]["job"]
        at = job["lease_expires_at"] - LEASE_MS
        available = prev_at + duration_ms
        problems.check(
            at >= available,
            f"drip: job claimed at {at}, its token came at {available}: ahead of the drip",
        )
        left = answer["jobs"][0]["admission"]["budgets"][0]["available"]
        problems.check(left >= 0, f"drip: {left} tokens left after a claim")
        seen.append(received + offset - available)
        inside.append(float(at - available))
        prev, prev_at = job, at
    client.ok("complete", job_id=prev["id"], lease=prev["lease"])
    state = _budget(client, key)["state"]
    problems.check(state["parked"] == 0, f"drip: {state['parked']} jobs still parked")
    return seen, inside


def wif_cycles(
    waiter: WireClient,
    worker: WireClient,
    queue: str,
    n: int,
    held: dict[str, Any],
    expected: list[str] | None,
    problems: Problems,
    label: str,
) -> tuple[list[float], list[float]]:
    """``n`` times: a ``claim_next wait_ms`` waits on ``waiter``; ``worker`` completes
    the job holding a ``while_in_flight`` budget of 1; the waiter gets the next.

    Returns (claim answer received - complete acknowledged) in ms, and inside
    the daemon (claim instant - the completed job's ``finished_at``). Checks
    that the jobs come oldest first (``expected``: their ids in order).
    """
    client_ms: list[float] = []
    daemon_ms: list[float] = []
    job = held
    for i in range(n):
        claim_id = waiter.request(
            "claim_next", queues=[queue], max=1, wait_ms=30_000, lease_ms=LEASE_MS
        )
        time.sleep(0.001)  # the claim reaches the daemon and waits
        done = worker.call("complete", job_id=job["id"], lease=job["lease"])
        acked = perf()
        answer = waiter.read()
        claimed = perf()
        if not problems.check(bool(done.get("ok")), f"{label} complete: {done.get('error')}"):
            break
        if not problems.check(
            answer.get("id") == claim_id and bool(answer.get("jobs")),
            f"{label} claim_next: {answer.get('error') or answer}",
        ):
            break
        job = answer["jobs"][0]["job"]
        if expected is not None and i < len(expected):
            problems.check(
                job["id"] == expected[i],
                f"{label}: claimed {job['id']}, the oldest parked was {expected[i]}",
            )
        left = answer["jobs"][0]["admission"]["budgets"][0]["available"]
        problems.check(left == 0, f"{label}: {left} tokens left after a claim (allocation 1)")
        client_ms.append((claimed - acked) * 1000)
        daemon_ms.append(float(job["lease_expires_at"] - LEASE_MS - done["job"]["finished_at"]))
    worker.ok("complete", job_id=job["id"], lease=job["lease"])
    return client_ms, daemon_ms


def bench_dispatch(args: argparse.Namespace, problems: Problems) -> dict[str, Any]:
    """Parked job claimed after its tokens come: time_based drip, while_in_flight."""
    out: dict[str, Any] = {"jobs": args.dispatches, "duration_ms": args.drip_ms}
    with daemon_for("dispatch", args, problems) as daemon, WireClient(daemon.socket) as client:
        lo, hi = calibrate(client, args.calibrate, problems)
        offset = (lo + hi) / 2
        out["clock_offset_uncertainty_ms"] = (hi - lo) / 2
        note(f"clock offset known within +-{(hi - lo) / 2:.3f} ms")
        span = Span(daemon)
        seen, inside = drip(client, args.dispatches, args.drip_ms, offset, problems)
        out["time_based"] = {"client": _pcts(seen), "daemon": _pcts(inside), **span.end()}
        note(f"time_based: {_fmt(out['time_based']['client'])}; {_disturbance(out['time_based'])}")

        client.ok("budget_create", key="slot", allocation=1, strategy={"type": "while_in_flight"})
        bound = {"queue": "slot", "type": "slot", "budgets": [{"key": "slot"}]}
        client.ok("enqueue", **bound)
        held = client.ok("claim_next", queues=["slot"], max=1, lease_ms=LEASE_MS)["jobs"][0]["job"]
        load = enqueue_bulk(
            client, bound, args.dispatches, problems, label="slot", keep_ids=args.dispatches
        )
        span = Span(daemon)
        with WireClient(daemon.socket) as waiter:
            lat, dlat = wif_cycles(
                waiter,
                client,
                "slot",
                args.dispatches,
                held,
                load["ids"],
                problems,
                "while_in_flight",
            )
        out["while_in_flight"] = {"client": _pcts(lat), "daemon": _pcts(dlat), **span.end()}
        note(
            f"while_in_flight: {_fmt(out['while_in_flight']['client'])}; "
            f"{_disturbance(out['while_in_flight'])}"
        )
        state = _budget(client, "slot")["state"]
        problems.check(
            state["parked"] == 0 and state["in_flight"] == 0,
            f"slot: {state} after all jobs completed",
        )
        out["loop_lag"] = _lag(daemon)
    return out


# -- output ------------------------------------------------------------------------------


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("holds" if ok else "MISSES")


def summary(results: dict[str, Any]) -> str:
    lines: list[str] = []
    if p := results.get("parked"):
        b, w, r = p["baseline"], p["with_parked"], p["ratio"]
        kind = p.get("backlog", "parked")
        many = f"{p['parked']:,} {kind}:"
        what = ("jobs parked behind an exhausted budget" if kind == "parked"
                else "unbudgeted jobs scheduled a day ahead (control)")  # fmt: skip
        lines += [
            f"1. claim latency, {p['parked']:,} {what} vs none "
            "(claim_next max=1, one request in flight)",
            f"   {'0 ' + kind + ':':<21}claim {_fmt(b['claim'])}",
            f"   {'':<21}claim+complete {_fmt(b['claim_complete'])}",
            f"   {many:<21}claim {_fmt(w['claim'])}",
            f"   {'':<21}claim+complete {_fmt(w['claim_complete'])}",
            f"   ratio {kind}/none: claim p50 {r['claim_p50']:.2f}x, p99 {r['claim_p99']:.2f}x; "
            f"claim+complete p50 {r['claim_complete_p50']:.2f}x, "
            f"p99 {r['claim_complete_p99']:.2f}x; best blocks' claim p99 "
            f"{r['best_block_claim_p99']:.2f}x",
            f"   target within 1.5x (claim p99): {_verdict(r['claim_p99'] <= 1.5)}",
            f"   daemon CPU per claim+complete: "
            f"{b['best_block']['daemon_cpu_ms_per_job']:.3f} ms vs "
            f"{w['best_block']['daemon_cpu_ms_per_job']:.3f} ms (best blocks)",
            f"   enqueueing the {p['load']['jobs']:,}: {p['load']['seconds']:.1f} s "
            f"({p['load']['jobs_per_s']:,.0f} jobs/s, enqueue_many of 1000); unbudgeted "
            f"supply {b['supply']['jobs_per_s']:,.0f} then {w['supply']['jobs_per_s']:,.0f} "
            f"jobs/s; database {p['db_bytes'] / 1e6:,.0f} MB",
        ]
        if "release" in p:
            lines.append(
                f"   while_in_flight release behind the parked backlog "
                f"(complete ack -> next claim answer): {_fmt(p['release']['client'])}"
            )
        if p.get("loop_lag"):
            lag = p["loop_lag"]
            lines.append(
                f"   loop lag over the whole run: p99 {lag['p99_ms']:.2f} ms, "
                f"max {lag['max_ms']:.1f} ms"
            )
    if i := results.get("idle"):
        budgets, refilling = f"{i['budgets']:,}", f"{i['refilling_budgets']:,}"
        lines += [
            f"2. idle daemon CPU over {i['seconds']:g} s (no loop probe)",
            f"   {'0 budgets:':<34}{_idle_line(i['none'])}",
            f"   {f'{budgets} budgets, full:':<34}{_idle_line(i['full'])}",
            f"   {f'{budgets} budgets, {refilling} refilling:':<34}{_idle_line(i['refilling'])}",
            f"   target under 1% of a core: "
            f"{_verdict(max(i['full']['daemon_cpu_pct'], i['refilling']['daemon_cpu_pct']) < 1)}",
        ]
    if d := results.get("dispatch"):
        tb, wf = d["time_based"], d["while_in_flight"]
        lines += [
            f"3. parked job dispatch ({d['jobs']:,} jobs each)",
            f"   time_based 1 per {d['duration_ms']} ms, burst 1, token available -> claim "
            f"answer received: {_fmt(tb['client'])}",
            f"      inside the daemon (claim instant - available, whole ms): {_fmt(tb['daemon'])}",
            f"      (clock offset +-{d['clock_offset_uncertainty_ms']:.3f} ms)",
            f"   target p99 under 20 ms: {_verdict(tb['client']['p99_ms'] < 20)}",
            f"   while_in_flight 1, complete acknowledged -> next claim answer: "
            f"{_fmt(wf['client'])}",
            "      inside the daemon (claim instant - finished_at, whole ms): "
            f"{_fmt(wf['daemon'])}",
            f"   target p99 under 20 ms: {_verdict(wf['client']['p99_ms'] < 20)}",
        ]
        if d.get("loop_lag"):
            lag = d["loop_lag"]
            lines.append(f"   loop lag: p99 {lag['p99_ms']:.2f} ms, max {lag['max_ms']:.1f} ms")
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run of ~30 s")
    p.add_argument("--only", default=",".join(MEASUREMENTS), help="parked,idle,dispatch")
    p.add_argument("--parked", type=int, help="jobs parked behind the budget (1000000)")
    p.add_argument(
        "--backlog",
        choices=("parked", "scheduled"),
        default="parked",
        help="parked: bound to the exhausted budget; scheduled: the control, unbudgeted "
        "jobs due in a day (same rows, no budget)",
    )
    p.add_argument("--claims", type=int, help="measured claims per block (3000)")
    p.add_argument("--repeat", type=int, help="measured blocks before and after parking (3)")
    p.add_argument("--warmup", type=int, help="unmeasured claims before the blocks (500)")
    p.add_argument("--release", type=int, help="parked jobs released one by one after (200)")
    p.add_argument("--idle-seconds", type=float, help="idle span per configuration (60)")
    p.add_argument("--budgets", type=int, default=8192, help="idle budgets (8192)")
    p.add_argument("--dispatches", type=int, help="parked jobs dispatched per variant (1000)")
    p.add_argument("--drip-ms", type=int, default=50, help="time_based: 1 token per N ms (50)")
    p.add_argument("--calibrate", type=int, default=300, help="claims to bracket the clock")
    p.add_argument("--settle", type=float, help="seconds of quiet before a measurement (3)")
    p.add_argument("--profile-dir", help="py-spy record (raw) each daemon into this dir")
    p.add_argument("--keep", action="store_true", help="keep the daemons' temp dirs and logs")
    p.add_argument("--json", help="also write the results as JSON to this file")
    args = p.parse_args(argv)
    quick = args.quick
    defaults = {
        "parked": (20_000, 1_000_000),
        "claims": (500, 3000),
        "repeat": (2, 3),
        "warmup": (200, 500),
        "release": (50, 200),
        "idle_seconds": (5.0, 60.0),
        "dispatches": (100, 1000),
        "settle": (1.0, 3.0),
    }
    for name, (small, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    args.only = [m for m in args.only.split(",") if m]
    if unknown := set(args.only) - set(MEASUREMENTS):
        p.error(f"unknown measurement {sorted(unknown)[0]!r}; they are {', '.join(MEASUREMENTS)}")
    args.release = min(args.release, args.parked)
    if args.profile_dir:
        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
    return args


RUNNERS: dict[str, Callable[[argparse.Namespace, Problems], dict[str, Any]]] = {
    "parked": bench_parked,
    "idle": bench_idle,
    "dispatch": bench_dispatch,
}


def main(argv: list[str] | None = None) -> int:
    """Run the measurements; print the figures; 1 on a correctness failure."""
    args = parse_args(argv)
    command = shlex.join(sys.orig_argv)
    env = environment()
    print(f"command: {command}\n{env}\nsynchronous = normal", flush=True)
    problems = Problems()
    results: dict[str, Any] = {}
    for name in args.only:
        t0 = perf()
        results[name] = RUNNERS[name](args, problems)
        note(f"{name}: {perf() - t0:.0f} s")
    print()
    print(summary(results))
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for problem in problems:
        print(f"FAILED: {problem}")
    if args.json:
        doc = {
            "command": command,
            "environment": env,
            "results": results,
            "problems": list(problems),
        }
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
