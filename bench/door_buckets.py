"""Door buckets: in-process rate-limit decisions per second, ours against two libraries.

Issue 6 asks for bucket decisions per second against ``pyrate-limiter`` and
``limits`` in the same run, for one key and for 10,000 keys (target: faster
than both). A decision is one "may this key take 1 token now?" with its
answer, the clock read included (each contender reads its own clock once per
decision):

* ``ours``: a dict of :class:`actors.bucket.TokenBucket` per key, created full
  on first use; ``take(1, now_ms)`` with ``now_ms = time.monotonic_ns() //
  1_000_000`` read per decision.
* ``pyrate log``: pyrate-limiter's ``Limiter`` over an ``InMemoryBucket`` (its
  default sliding-window log), ``try_acquire(key, blocking=False)``.
* ``pyrate tb``: pyrate-limiter's ``Limiter`` over a ``StateBucket`` with its
  ``TokenBucket`` (GCRA) algorithm: the same algorithm as ours.
* ``limits moving``: limits' ``MovingWindowRateLimiter`` on ``MemoryStorage``,
  ``hit(item, key)``: the closest of its strategies to a token bucket (an
  exact log: never more than ``capacity`` in any window).
* ``limits fixed``: limits' ``FixedWindowRateLimiter`` on ``MemoryStorage``:
  its cheapest strategy (a counter per window).

The window strategies get ``capacity`` per ``capacity / rate`` seconds: the same
burst and the same long-run rate as the token bucket. With many keys, pyrate
needs a bucket per key: a ``BucketFactory`` that creates one on first use with
the library's own ``create`` (which schedules its leak); one key uses
``Limiter(bucket)``.

Settings: ``allow`` (capacity 1,000,000, 20/s, full: every decision allowed)
and ``deny`` (capacity 100, ``--deny-rate`` 1/s, every key drained before the
clock starts: nearly every decision denied; at 20/s and 10,000 keys the share
allowed would depend on how fast the contender is). Each run starts on fresh
state (set-up and draining untimed) and times ``--decisions`` decisions over
the keys round-robin; the table takes the best of ``--repeat`` runs.

Prints figures; asserts nothing about timing. Exit status 1 only if ours lets
more through than ``capacity + rate x elapsed`` (checked on a simulated clock
and on the timed single-key runs).

    .venv/bin/python bench/door_buckets.py [--decisions 100000] [--repeat 5] [--json FILE]

Needs the ``bench`` extra: ``.venv/bin/pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import gc
import random
import shlex
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import orjson
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter
from pyrate_limiter import (
    BucketFactory,
    InMemoryBucket,
    Limiter,
    MonotonicClock,
    Rate,
    RateItem,
    StateBucket,
)
from pyrate_limiter import TokenBucket as PyrateTokenBucket
from throughput import environment

from actors.bucket import TokenBucket

Decide = Callable[[str], bool]
# A contender: (capacity, per second, keys) -> (decide(key), drain(key), close()).
Make = Callable[[int, float, list[str]], tuple[Decide, Decide, Callable[[], None]]]

SETTINGS = {"allow": (1_000_000, 20.0), "deny": (100, 1.0)}


def make_ours(capacity: int, rate: float, keys: list[str]):
    buckets: dict[str, TokenBucket] = {}
    clock = time.monotonic_ns

    def decide(key: str) -> bool:
        now = clock() // 1_000_000
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = TokenBucket(capacity, rate, now)
        return bucket.take(1, now) == 0

    def drain(key: str) -> bool:
        now = clock() // 1_000_000
        buckets[key] = bucket = TokenBucket(capacity, rate, now)
        return bucket.take(capacity, now) == 0

    return decide, drain, lambda: None


class PerKey(BucketFactory):
    """pyrate-limiter: one bucket per item name, created on first use."""

    def __init__(self, new: Callable[[], Any]) -> None:
        self.buckets: dict[str, Any] = {}
        self.new = new
        self.clock = MonotonicClock()

    def wrap_item(self, name: str, weight: int = 1) -> RateItem:
        return RateItem(name, self.clock.now(), weight=weight)

    def get(self, item: RateItem) -> Any:
        bucket = self.buckets.get(item.name)
        if bucket is None:
            bucket = self.buckets[item.name] = self.new(self)
        return bucket


def make_pyrate(algorithm: str) -> Make:
    def make(capacity: int, rate: float, keys: list[str]):
        if algorithm == "log":  # capacity per capacity/rate seconds, kept as a log
            rates = [Rate(capacity, round(capacity * 1000 / rate))]

            def new(factory: BucketFactory) -> Any:
                return factory.create(InMemoryBucket, rates)

            single: Any = InMemoryBucket(rates)
        else:  # GCRA: sustained rate per second, burst = capacity
            rates = [Rate(round(rate), 1000, burst=capacity)]

            def new(factory: BucketFactory) -> Any:
                return factory.create(StateBucket, rates, algorithm=PyrateTokenBucket())

            single = StateBucket(rates, algorithm=PyrateTokenBucket())
        limiter = Limiter(single if len(keys) == 1 else PerKey(new))
        acquire = limiter.try_acquire

        def decide(key: str) -> bool:
            return acquire(key, 1, False)  # blocking=False: a denial returns False

        def drain(key: str) -> bool:
            return acquire(key, capacity, False)

        return decide, drain, limiter.close

    return make


def make_limits(strategy: str) -> Make:
    def make(capacity: int, rate: float, keys: list[str]):
        storage = MemoryStorage()
        limiter = (MovingWindowRateLimiter if strategy == "moving" else FixedWindowRateLimiter)(
            storage
        )
        item = RateLimitItemPerSecond(capacity, round(capacity / rate))
        hit = limiter.hit

        def decide(key: str) -> bool:
            return hit(item, key)

        def drain(key: str) -> bool:
            return hit(item, key, cost=capacity)

        def close() -> None:
            storage.timer.cancel()

        return decide, drain, close

    return make


CONTENDERS: dict[str, Make] = {
    "ours": make_ours,
    "pyrate log": make_pyrate("log"),
    "pyrate tb": make_pyrate("tb"),
    "limits moving": make_limits("moving"),
    "limits fixed": make_limits("fixed"),
}


def run_once(make: Make, setting: str, keys: list[str], decisions: int) -> tuple[float, int, float]:
    """One timed run on fresh state: (decisions/s, allowed, elapsed s)."""
    capacity, rate = SETTINGS[setting]
    decide, drain, close = make(capacity, rate, keys)
    try:
        if setting == "deny":
            for key in keys:
                if not drain(key):
                    raise SystemExit(f"PROBLEM: draining {key} was refused")
        sequence = (keys * (decisions // len(keys) + 1))[:decisions]
        gc.collect()
        allowed = 0
        start = time.perf_counter()
        for key in sequence:
            if decide(key):
                allowed += 1
        elapsed = time.perf_counter() - start
    finally:
        close()
    return decisions / elapsed, allowed, elapsed


def simulated_check(seed: int = 6) -> list[str]:
    """Ours on a virtual clock: allowed never exceeds capacity + rate x elapsed."""
    problems = []
    rng = random.Random(seed)
    for capacity, rate in ((100, 20.0), (1, 1.0), (100, 1.0), (50, 250.5)):
        t0 = 1_700_000_000_000
        bucket, now, allowed = TokenBucket(capacity, rate, t0), t0, 0
        for _ in range(200_000):
            now += rng.choice((0, 0, 0, 1, 3, 17, 250))
            allowed += bucket.take(1, now) == 0
        bound = capacity + rate * (now - t0) / 1000
        if allowed > bound:
            problems.append(f"simulated {capacity} @ {rate}/s: {allowed} allowed > {bound:.1f}")
        print(f"# check: {capacity} @ {rate}/s over {(now - t0) / 1000:.1f} simulated s: "
              f"{allowed:,} allowed <= {bound:,.1f}")  # fmt: skip
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decisions", type=int, default=100_000, help="decisions per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per cell; best is taken")
    parser.add_argument("--keys", type=int, default=10_000, help="the many-keys case")
    parser.add_argument("--deny-rate", type=float, default=1.0, help="refill/s of 'deny'")
    parser.add_argument("--only", help="comma-separated contenders (default: all)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    SETTINGS["deny"] = (100, args.deny_rate)
    names = args.only.split(",") if args.only else list(CONTENDERS)
    print("$", shlex.join([sys.executable, *sys.argv]))
    print("#", environment())
    print(f"# pyrate-limiter {version('pyrate-limiter')}, limits {version('limits')}; "
          f"clock for ours: time.monotonic_ns() // 1_000_000 per decision")  # fmt: skip
    problems = simulated_check()
    figures: dict[str, dict[str, Any]] = {}
    for setting in SETTINGS:
        capacity, rate = SETTINGS[setting]
        for nkeys in (1, args.keys):
            keys = ["k"] if nkeys == 1 else [f"tenant-{i}" for i in range(nkeys)]
            scenario = f"{setting}, {nkeys:,} key{'s' if nkeys > 1 else ''}"
            cell = figures[scenario] = {}
            for name in names:
                runs = [run_once(CONTENDERS[name], setting, keys, args.decisions)
                        for _ in range(args.repeat)]  # fmt: skip
                best = max(runs)
                cell[name] = {"best": best[0], "runs": [r[0] for r in runs],
                              "allowed": best[1] / args.decisions}  # fmt: skip
                print(f"  {scenario:18} {name:14} best {best[0]:11,.0f}/s  runs "
                      + " ".join(f"{r[0] / 1000:,.0f}k" for r in runs)
                      + f"  allowed {best[1] / args.decisions:6.1%}", flush=True)  # fmt: skip
                if name == "ours" and nkeys == 1:
                    for _, allowed, elapsed in runs:
                        start_tokens = 0 if setting == "deny" else capacity
                        bound = start_tokens + rate * (elapsed + 0.002) + 1
                        if allowed > bound:
                            problems.append(f"{scenario}: {allowed} allowed > {bound:.1f}")
    print()
    others = [n for n in names if n != "ours"] if "ours" in names else []
    print("| scenario | " + " | ".join(names) + " | "
          + " | ".join(f"ours / {n}" for n in others) + " |")  # fmt: skip
    print("|---" * (len(names) + len(others) + 1) + "|")
    for scenario, cell in figures.items():
        rates = [f"{cell[n]['best']:,.0f}" for n in names]
        ratios = [f"{cell['ours']['best'] / cell[n]['best']:.1f}x" for n in others]
        print(f"| {scenario} | " + " | ".join(rates + ratios) + " |")
    print("\ndecisions/s, best of", args.repeat, "runs of", f"{args.decisions:,}", "decisions")
    for problem in problems:
        print("PROBLEM:", problem)
    if args.json:
        with open(args.json, "wb") as out:
            out.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
