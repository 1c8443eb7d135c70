"""Valid requests for every verb: the seed corpus of both fuzz targets.

``python -m tests.fuzz.seeds`` (re)writes them as ``seed-<verb>-<n>`` files in
``tests/fuzz/corpus/framing/`` (JSON lines, behind the two header bytes
:mod:`tests.fuzz.fuzz_framing` reads) and ``tests/fuzz/corpus/args/`` (one JSON
frame, and the same request as msgpack). ``test_replay.py`` checks that every verb
of the table has a seed here, that each is accepted, and that the files are current.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack
import orjson

from tests.fuzz.paths import CORPUS, DICTIONARY

JOB = "06h2ewjd892ypw58rc4wexdtfw"
LEASE = "l3a5e7t0k3n"
WINDOW = {"period": "day", "tz": "America/Los_Angeles", "start": "00:00"}
WEEK = {"period": "week", "tz": "Europe/Berlin", "start": "09:30", "weekday": "mon"}
DRIP = {"type": "time_based", "duration_ms": 3_600_000, "burst": 6}
ONE_JOB = {"queue": "images", "type": "resize", "payload": {"path": "/tmp/cat.png"}}
BIG_JOB = {
    "queue": "images",
    "type": "resize",
    "payload": {"n": [1, 2.5, None, True, "x"]},
    "priority": 7,
    "delay_ms": 500,
    "max_attempts": 3,
    "lease_ms": 30_000,
    "unique_key": "cat",
    "debounce_ms": 1000,
    "budgets": [{"key": "img", "cost": 2}],
}

#: Verb -> valid argument sets (each a seed).
SEEDS: dict[str, list[dict[str, Any]]] = {
    "hello": [{"token": "s3cr3t", "client": "fuzz"}, {}],
    "enqueue": [
        ONE_JOB,
        BIG_JOB,
        {**ONE_JOB, "ready_at": 1_764_547_200_000, "answer": "minimal", "namespace": "ns"},
        {
            **ONE_JOB,
            "budgets": [
                {"key": "new", "cost": 1, "create_with": {"allocation": 10, "strategy": DRIP}}
            ],
        },
    ],
    "enqueue_many": [{"jobs": [ONE_JOB, BIG_JOB, {**ONE_JOB, "group": "acme"}]}],
    "claim_next": [
        {"queues": ["images"]},
        {"queues": ["a", "b"], "max": 5, "wait_ms": 1000, "lease_ms": 60_000},
    ],
    "claim": [{"job_id": JOB, "lease_ms": 60_000}],
    "heartbeat": [{"job_id": JOB, "lease": LEASE, "lease_ms": 30_000, "answer": "full"}],
    "complete": [
        {"job_id": JOB, "lease": LEASE, "result": {"ok": [1]}},
        {"job_id": JOB, "lease": LEASE, "cost": {"img": 4}},
    ],
    "complete_many": [{"jobs": [{"job_id": JOB, "lease": LEASE}]}],
    "fail": [{"job_id": JOB, "lease": LEASE, "error": "boom", "retry_in_ms": 100, "dead": False}],
    "release": [{"job_id": JOB, "lease": LEASE, "delay_ms": 100}],
    "get": [{"job_id": JOB}],
    "explain": [{"job_id": JOB}],
    "list": [{"queue": "images", "status": "pending", "limit": 10, "after": JOB}],
    "status": [{}],
    "subscribe": [{"queues": ["images"]}],
    "dead_list": [{"queue": "images", "limit": 10, "after": JOB}],
    "dead_replay": [{"job_ids": [JOB]}, {"all": True, "queue": "images", "limit": 10}],
    "queue_configure": [{"queue": "images", "completed_ttl_ms": 3_600_000, "dead_ttl_ms": 60_000}],
    "queue_list": [{}],
    "budget_list": [{}],
    "budget_get": [{"key": "img"}],
    "budget_create": [
        {"key": "img", "allocation": 10, "strategy": DRIP},
        {"key": "img", "allocation": 10, "strategy": DRIP, "enforce": False},
    ],
    "budget_put": [
        {"key": "img", "allocation": 5, "strategy": {"type": "while_in_flight"}},
        {
            "key": "llm",
            "allocation": 10,
            "strategy": {"type": "while_in_flight", "reserve": {"gold": 4}},
        },
    ],
    "budget_patch": [
        {"key": "img", "allocation": 3},
        {"key": "img", "strategy": {"burst": 2}},
        {"key": "img", "enforce": False},
    ],
    "budget_delete": [{"key": "img"}],
    "budget_pause": [
        {"key": "img", "retry_after_s": 30, "reason": "upstream 429"},
        {"key": "img", "until_ms": 1_700_000_060_000},
    ],
    "budget_resume": [{"key": "img"}],
    "policy_get": [{"queue": "images"}],
    "policy_list": [{}],
    "policy_set": [
        {"queue": "images", "max_in_flight": 4},
        {"queue": "images", "max_claims_per_window": 100, "window": WINDOW},
        {"queue": "images", "max_claims_per_window": 5, "window": WEEK},
        {
            "queue": "images",
            "max_in_flight": 10,
            "windows": [
                {"max_claims": 10, "period": "second", "tz": "UTC"},
                {"max_claims": 100_000, "period": "day", "tz": "America/New_York"},
            ],
            "fairness": "round_robin",
            "weights": {"gold": 3},
            "max_in_flight_per_group": 5,
            "min_in_flight": {"gold": 2},
        },
        {"queue": "images", "max_in_flight": 4, "enforce": False},
    ],
    "policy_clear": [{"queue": "images"}],
    "admission_status": [{"queue": "images"}, {}],
    "periodic_list": [{}],
    "quota_get": [{}],
    "quota_set": [
        {
            "quota": {
                "max_pending": 10_000,
                "on_excess": "reject",
                "enqueue_rate": "500/s",
                "max_running": 50,
            }
        },
        {"quota": {"max_pending": 10, "enforce": False}},
    ],
    "quota_clear": [{}],
    "what_if": [
        {"change": {"op": "quota_set", "quota": {"max_pending": 30, "on_excess": "drop"}}},
        {
            "change": {
                "op": "policy_set",
                "queue": "images",
                "max_claims_per_window": 50,
                "window": WINDOW,
            }
        },
        {
            "change": {"op": "budget_put", "key": "img", "allocation": 6, "strategy": DRIP},
            "namespace": "ns",
        },
        {"change": {"op": "budget_patch", "key": "img", "allocation": 12}},
        {"change": {"op": "queue_configure", "queue": "images", "dead_ttl_ms": 60_000}},
    ],
    "audit_list": [
        {"target_kind": "budget", "target": "img", "limit": 5, "after": 3, "newest_first": True}
    ],
}


def frame(op: str, args: dict[str, Any], req_id: int | str = 1) -> bytes:
    """One socket request line."""
    return orjson.dumps({"id": req_id, "op": op, **args}) + b"\n"


def packed(op: str, args: dict[str, Any]) -> bytes:
    """The same request as a msgpack map."""
    return msgpack.packb({"op": op, **args})


def corpus() -> dict[str, dict[str, bytes]]:
    """Target -> file name -> contents, for every seed."""
    framing: dict[str, bytes] = {}
    args: dict[str, bytes] = {}
    every = b""
    for op, examples in SEEDS.items():
        for n, example in enumerate(examples):
            line = frame(op, example, req_id=n if n % 2 else f"r{n}")
            framing[f"seed-{op}-{n}"] = b"\xff\x00" + line
            every += line
            args[f"seed-{op}-{n}"] = line
            args[f"seed-{op}-{n}-msgpack"] = packed(op, example)
    framing["seed-all-pipelined"] = b"\xff\x07" + every
    framing["seed-all-small-limit"] = b"\x7f\x03" + every
    framing["seed-wide-int"] = (
        b"\xff\x00"
        + b'{"id":2,"op":"enqueue","payload":{"n":[1,'
        + (b"123456789012345678901234567890]}}\n")
    )
    framing["seed-bad-frames"] = b"\xff\x01" + b'[1]\n{"id":true}\n{nope\n\n  \n'
    return {"framing": framing, "args": args}


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


#: Tokens the mutator splices in besides the seeds' own bytes.
TOKENS = [
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "null",
    "true",
    "false",
    "-0",
    "1e308",
    "1.5",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    '"\\u0000"',
    '"\\ud800"',
    '"full"',
    '"minimal"',
    '"hour"',
    '"week"',
    '"month"',
    '"UTC"',
    '"Europe/London"',
    '"24:00"',
    '"sun"',
    '"time_based"',
    '"while_in_flight"',
    '"drop"',
    '"1/s"',
    '"0/m"',
]


def dictionary() -> str:
    """A libFuzzer dictionary: every verb name and argument field, and JSON tokens."""
    words = {f'"{op}"' for op in SEEDS} | {f'"{k}"' for ex in SEEDS.values() for k in _keys(ex)}
    words |= set(TOKENS)
    escape = str.maketrans({"\\": "\\\\", '"': '\\"'})
    return "".join(f'"{w.translate(escape)}"\n' for w in sorted(words))


def write() -> int:
    """(Re)write the seed files and the dictionary; returns how many seeds."""
    DICTIONARY.write_text(dictionary())
    count = 0
    for target, files in corpus().items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("seed-*"):
            stale.unlink()
        for name, data in files.items():
            (folder / name).write_bytes(data)
            count += 1
    return count


def digest(data: bytes) -> str:
    """libFuzzer's corpus file name for ``data``."""
    return hashlib.sha1(data).hexdigest()


if __name__ == "__main__":
    print(f"wrote {write()} seed files under {CORPUS}")
