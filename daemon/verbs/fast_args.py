"""Hand-written argument checks for the hot verbs: ``enqueue``, ``enqueue_many``,
``claim_next``, ``complete`` and ``complete_many``.

Structuring with cattrs plus attrs validators costs 3-8 µs per job; these
checks cost a fraction of that. They only ever *accept*: arguments they cannot
vouch for in full (a wrong type, a value out of range, an unknown field,
anything unusual) return None, and :func:`daemon.wire.structure` hands them to
the converter, which refuses them with the usual field and message. So both
paths answer alike, and the converter stays the one place that words errors.

The limits are :mod:`actors.limits`'s, the ones the attrs validators read.

Each check is registered only if its class still has exactly the fields it was
written for; a class that gained or lost a field falls back to the converter
until its check is updated.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from actors.limits import (
    CLAIM_MAX,
    CLAIM_QUEUES,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    JOB_ID_LEN,
    LEASE_MS,
    LEASE_TOKEN_LEN,
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_COMPLETIONS,
    MAX_DURATION_MS,
    MAX_INSTANT_MS,
    MAX_WAIT_MS,
    NAME_RE,
    PRIORITY,
    UNIQUE_KEY_LEN,
)
from daemon.verbs.producing import EnqueueArgs, EnqueueManyArgs
from daemon.verbs.working import ClaimNextArgs, CompleteArgs, CompleteManyArgs
from daemon.wire import FAST

_new = object.__new__
_set = object.__setattr__

#: Names seen valid (bounded): a set lookup instead of a regex match per job.
_NAMES: set[str] = set()
_NAMES_MAX = 4096


def _name(value: Any) -> bool:
    if type(value) is not str:
        return False
    if value in _NAMES:
        return True
    if not NAME_RE.match(value):
        return False
    if len(_NAMES) < _NAMES_MAX:
        _NAMES.add(value)
    return True


def _int(value: Any, lo: int, hi: int | None = None) -> bool:
    return type(value) is int and value >= lo and (hi is None or value <= hi)


def _opt_int(value: Any, lo: int, hi: int | None = None) -> bool:
    return value is None or _int(value, lo, hi)


def _text(value: Any, max_len: int) -> bool:
    return type(value) is str and 0 < len(value) <= max_len


#: orjson encodes 254 levels; the answer envelope takes 6 (daemon.wire.json_value).
#: A value nested deeper than 248 levels needs more than 2 * 248 characters.
_SURELY_SHALLOW = 2 * 248


def _json(value: Any) -> bool:
    """A value every answer can carry (what ``json_value`` accepts), surely."""
    if value is None or type(value) in (str, int, bool, float):
        return type(value) is not int or -(2**63) <= value < 2**64
    try:
        return len(orjson.dumps(value)) < _SURELY_SHALLOW
    except TypeError:
        return False


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(cls))


_ENQUEUE = ("queue", "type", "payload", "priority", "delay_ms", "ready_at", "max_attempts",
            "lease_ms", "unique_key", "debounce_ms", "budgets")  # fmt: skip
_ENQUEUE_KEYS = frozenset(_ENQUEUE)


def enqueue_args(args: Any) -> EnqueueArgs | None:
    """One job of ``enqueue``/``enqueue_many``, if surely valid."""
    if type(args) is not dict or not args.keys() <= _ENQUEUE_KEYS:
        return None
    get = args.get
    queue, type_ = get("queue"), get("type")
    if not (_name(queue) and _name(type_)):
        return None
    payload = get("payload", {})
    priority = get("priority", DEFAULT_PRIORITY)
    delay_ms, ready_at = get("delay_ms"), get("ready_at")
    max_attempts = get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    lease_ms, unique_key = get("lease_ms"), get("unique_key")
    debounce_ms, budgets = get("debounce_ms"), get("budgets")
    if not (
        _int(priority, *PRIORITY)
        and _int(max_attempts, *MAX_ATTEMPTS)
        and _opt_int(delay_ms, 0, MAX_DURATION_MS)
        and _opt_int(ready_at, 0, MAX_INSTANT_MS)
        and (delay_ms is None or ready_at is None)
        and _opt_int(lease_ms, *LEASE_MS)
        and (unique_key is None or _text(unique_key, UNIQUE_KEY_LEN))
        and (
            debounce_ms is None
            or (unique_key is not None and _int(debounce_ms, 0, MAX_DURATION_MS))
        )
        and budgets is None
        and _json(payload)
    ):
        return None
    made = _new(EnqueueArgs)
    _set(made, "queue", queue)
    _set(made, "type", type_)
    _set(made, "payload", payload)
    _set(made, "priority", priority)
    _set(made, "delay_ms", delay_ms)
    _set(made, "ready_at", ready_at)
    _set(made, "max_attempts", max_attempts)
    _set(made, "lease_ms", lease_ms)
    _set(made, "unique_key", unique_key)
    _set(made, "debounce_ms", debounce_ms)
    _set(made, "budgets", None)
    return made


def _batch(args: Any, check: Any, most: int, cls: type) -> Any:
    """``{jobs: [...]}`` as ``cls``, if every item passes ``check`` (1 to ``most``)."""
    if type(args) is not dict or len(args) != 1:
        return None
    jobs = args.get("jobs")
    if type(jobs) is not list or not 1 <= len(jobs) <= most:
        return None
    made_jobs = []
    for job in jobs:
        made_job = check(job)
        if made_job is None:
            return None
        made_jobs.append(made_job)
    made = _new(cls)
    _set(made, "jobs", made_jobs)
    return made


def enqueue_many_args(args: Any) -> EnqueueManyArgs | None:
    """A whole ``enqueue_many``, if every job of it is surely valid."""
    return _batch(args, enqueue_args, MAX_BATCH, EnqueueManyArgs)  # type: ignore[no-any-return]


_CLAIM_KEYS = frozenset(("queues", "max", "wait_ms", "lease_ms"))
_QUEUES_LO, _QUEUES_HI = CLAIM_QUEUES


def claim_next_args(args: Any) -> ClaimNextArgs | None:
    """``claim_next``'s arguments, if surely valid."""
    if type(args) is not dict or not args.keys() <= _CLAIM_KEYS:
        return None
    queues = args.get("queues")
    if type(queues) is not list or not _QUEUES_LO <= len(queues) <= _QUEUES_HI:
        return None
    for queue in queues:
        if not _name(queue):
            return None
    limit = args.get("max", 1)
    wait_ms = args.get("wait_ms", 0)
    lease_ms = args.get("lease_ms")
    if not (
        _int(limit, *CLAIM_MAX) and _int(wait_ms, 0, MAX_WAIT_MS) and _opt_int(lease_ms, *LEASE_MS)
    ):
        return None
    made = _new(ClaimNextArgs)
    _set(made, "queues", list(queues))
    _set(made, "max", limit)
    _set(made, "wait_ms", wait_ms)
    _set(made, "lease_ms", lease_ms)
    return made


_COMPLETE_KEYS = frozenset(("job_id", "lease", "result"))


def complete_args(args: Any) -> CompleteArgs | None:
    """``complete``'s arguments, if surely valid."""
    if type(args) is not dict or not args.keys() <= _COMPLETE_KEYS:
        return None
    job_id, lease, result = args.get("job_id"), args.get("lease"), args.get("result")
    if not (_text(job_id, JOB_ID_LEN) and _text(lease, LEASE_TOKEN_LEN) and _json(result)):
        return None
    made = _new(CompleteArgs)
    _set(made, "job_id", job_id)
    _set(made, "lease", lease)
    _set(made, "result", result)
    return made


def complete_many_args(args: Any) -> CompleteManyArgs | None:
    """A whole ``complete_many``, if every completion of it is surely valid."""
    return _batch(args, complete_args, MAX_COMPLETIONS, CompleteManyArgs)  # type: ignore[no-any-return]


def _register() -> None:
    for cls, names, check in (
        (EnqueueArgs, _ENQUEUE, enqueue_args),
        (EnqueueManyArgs, ("jobs",), enqueue_many_args),
        (ClaimNextArgs, ("queues", "max", "wait_ms", "lease_ms"), claim_next_args),
        (CompleteArgs, ("job_id", "lease", "result"), complete_args),
        (CompleteManyArgs, ("jobs",), complete_many_args),
    ):
        if _fields(cls) == names:
            FAST[cls] = check


_register()
