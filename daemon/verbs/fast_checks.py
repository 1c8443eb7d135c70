"""Fast checks of the hot verbs' arguments (``enqueue``, ``enqueue_many``,
``claim_next``, ``complete``, ``complete_many``).

cattrs plus the attrs validators cost 3-8 µs per job; these checks a fraction
of that. They only ever *accept*: arguments they cannot vouch for in full give
None, and :func:`daemon.verbs.args.structure` hands them to the converter,
which refuses them with the usual field and message.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import attrs
import orjson

from actors.limits import (
    CLAIM_MAX,
    CLAIM_QUEUES,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    INT_MAX,
    INT_MIN,
    JOB_ID_LEN,
    LEASE_MS,
    LEASE_TOKEN_LEN,
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_BINDINGS,
    MAX_COMPLETIONS,
    MAX_DURATION_MS,
    MAX_INSTANT_MS,
    MAX_TOKENS,
    MAX_WAIT_MS,
    NAME_RE,
    PRIORITY,
    UNIQUE_KEY_LEN,
    VALUE_DEPTH,
    valid_group,
)

#: A fast check: the instance for arguments it vouches for in full, else None.
Check = Callable[[Any], Any]
#: Makes a class's fast check, or None when it cannot (see :func:`register_fast`).
Factory = Callable[[type], Check | None]

#: The hot verbs' fast checks by argument class (:func:`register_fast`).
FAST: dict[type, Check] = {}


def _maker(cls: type) -> Callable[..., Any]:
    """``make(**fields)``: an instance of the slotted attrs class ``cls``, every
    field set straight through its slot, as the checks vouch for the values.

    No ``__init__`` (its validators are what the checks replace), and no
    ``object.__setattr__``, which looks each name up again: a generated
    function calls each slot's setter, about 0.25 µs less per enqueued job
    (attrs compiles its ``__init__`` the same way). A field left out, or one
    the class does not have, is a TypeError at the first call.
    """
    names = [field.name for field in attrs.fields(cls)]
    body = "".join(f"    set_{name}(made, {name})\n" for name in names)
    source = f"def make(*, {', '.join(names)}):\n    made = new(cls)\n{body}    return made\n"
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    for name in names:
        scope[f"set_{name}"] = cls.__dict__[name].__set__  # the slot's member descriptor
    exec(compile(source, f"<fast make {cls.__qualname__}>", "exec"), scope)
    return scope["make"]  # type: ignore[no-any-return]


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


#: A value nested deeper than :data:`~actors.limits.VALUE_DEPTH` levels needs more than twice
#: as many characters.
_SURELY_SHALLOW = 2 * VALUE_DEPTH


def _json(value: Any) -> bool:
    """A value every answer can carry (what :func:`json_value` accepts), surely."""
    if value is None or type(value) in (str, int, bool, float):
        return type(value) is not int or INT_MIN <= value <= INT_MAX
    try:
        return len(orjson.dumps(value)) < _SURELY_SHALLOW
    except TypeError:
        return False


#: The fields each factory's check was written for (:func:`register_fast`).
_WRITTEN_FOR: dict[Factory, tuple[str, ...]] = {}


def _written_for(*fields: str) -> Callable[[Factory], Factory]:
    def mark(factory: Factory) -> Factory:
        _WRITTEN_FOR[factory] = fields
        return factory

    return mark


def register_fast(cls: type, factory: Factory) -> None:
    """Make ``factory(cls)`` the fast check of ``cls`` for :func:`structure`.

    Only if ``cls`` has exactly the fields the check was written for, in order;
    otherwise (or if the factory declines) the converter alone checks ``cls``.
    """
    if tuple(f.name for f in attrs.fields(cls)) != _WRITTEN_FOR[factory]:
        return
    check = factory(cls)
    if check is not None:
        FAST[cls] = check


_ENQUEUE = ("queue", "type", "payload", "priority", "delay_ms", "ready_at", "max_attempts",
            "lease_ms", "unique_key", "debounce_ms", "budgets", "group")  # fmt: skip
_ENQUEUE_KEYS = frozenset(_ENQUEUE)


_BINDING = ("key", "cost", "create_with")
_BINDING_KEYS = frozenset(_BINDING[:2])


def _binding_check(cls: type) -> Callable[[Any], list[Any] | None] | None:
    """The check of an enqueue's ``budgets`` (``[{key, cost?}, ...]``, as
    ``cls.budgets``' item class), or None if that class is not the one it was
    written for. ``create_with`` (a budget made with the job) is left to the
    converter: it is rare, and its checks are many."""
    hint = typing.get_type_hints(cls)["budgets"]  # list[BindingArgs] | None
    (item_cls,) = typing.get_args(typing.get_args(hint)[0])
    if tuple(f.name for f in attrs.fields(item_cls)) != _BINDING:
        return None
    make_binding = _maker(item_cls)

    def check(value: Any) -> list[Any] | None:
        if type(value) is not list or not 0 < len(value) <= MAX_BINDINGS:
            return None
        made, seen = [], set()
        for item in value:
            if type(item) is not dict or not item.keys() <= _BINDING_KEYS:
                return None
            key, cost = item.get("key"), item.get("cost", 1)
            if not (_name(key) and _int(cost, 1, MAX_TOKENS)) or key in seen:
                return None
            seen.add(key)
            made.append(make_binding(key=key, cost=cost, create_with=None))
        return made

    return check


@_written_for(*_ENQUEUE)
def fast_enqueue(cls: type) -> Check:
    """The check of one job of ``enqueue``/``enqueue_many``, made as ``cls``."""
    check_bindings = _binding_check(cls)
    make = _maker(cls)

    def check(args: Any) -> Any:
        if type(args) is not dict or not args.keys() <= _ENQUEUE_KEYS:
            return None
        get = args.get
        queue, type_ = get("queue"), get("type")
        # A name passed before is in _NAMES: tested inline, as no call is cheaper.
        if not (
            ((type(queue) is str and queue in _NAMES) or _name(queue))
            and ((type(type_) is str and type_ in _NAMES) or _name(type_))
        ):
            return None
        payload = get("payload", {})
        priority = get("priority", DEFAULT_PRIORITY)
        delay_ms, ready_at = get("delay_ms"), get("ready_at")
        max_attempts = get("max_attempts", DEFAULT_MAX_ATTEMPTS)
        lease_ms, unique_key = get("lease_ms"), get("unique_key")
        debounce_ms, budgets = get("debounce_ms"), get("budgets")
        group = get("group")
        # An absent field is its default, known good: no call checks it (most
        # enqueues give a queue, a type and a payload only).
        if not (
            (priority is DEFAULT_PRIORITY or _int(priority, *PRIORITY))
            and (max_attempts is DEFAULT_MAX_ATTEMPTS or _int(max_attempts, *MAX_ATTEMPTS))
            and (delay_ms is None or _int(delay_ms, 0, MAX_DURATION_MS))
            and (ready_at is None or _int(ready_at, 0, MAX_INSTANT_MS))
            and (delay_ms is None or ready_at is None)
            and (lease_ms is None or _int(lease_ms, *LEASE_MS))
            and (unique_key is None or _text(unique_key, UNIQUE_KEY_LEN))
            and (
                debounce_ms is None
                or (unique_key is not None and _int(debounce_ms, 0, MAX_DURATION_MS))
            )
            and _json(payload)
            and (group is None or valid_group(group))
        ):
            return None
        if budgets is not None:
            if check_bindings is None:
                return None
            budgets = check_bindings(budgets)
            if budgets is None:
                return None
        return make(
            queue=queue, type=type_, payload=payload, priority=priority, delay_ms=delay_ms,
            ready_at=ready_at, max_attempts=max_attempts, lease_ms=lease_ms,
            unique_key=unique_key, debounce_ms=debounce_ms, budgets=budgets, group=group,
        )  # fmt: skip

    return check


def _batch(cls: type, most: int) -> Check | None:
    """``{jobs: [...]}`` (1 to ``most`` items) as ``cls``, if its item class's
    fast check passes every item; None if that class has no fast check."""
    (item_cls,) = typing.get_args(typing.get_type_hints(cls)["jobs"])
    item = FAST.get(item_cls)
    if item is None:
        return None
    make = _maker(cls)

    def check(args: Any) -> Any:
        if type(args) is not dict or len(args) != 1:
            return None
        jobs = args.get("jobs")
        if type(jobs) is not list or not 1 <= len(jobs) <= most:
            return None
        made_jobs = []
        for job in jobs:
            made_job = item(job)
            if made_job is None:
                return None
            made_jobs.append(made_job)
        return make(jobs=made_jobs)

    return check


@_written_for("jobs")
def fast_enqueue_many(cls: type) -> Check | None:
    """The check of a whole ``enqueue_many``: every job passes :func:`fast_enqueue`'s."""
    return _batch(cls, MAX_BATCH)


_CLAIM_NEXT = ("queues", "max", "wait_ms", "lease_ms")
_CLAIM_NEXT_KEYS = frozenset(_CLAIM_NEXT)
_QUEUES_LO, _QUEUES_HI = CLAIM_QUEUES


@_written_for(*_CLAIM_NEXT)
def fast_claim_next(cls: type) -> Check:
    """The check of ``claim_next``'s arguments, made as ``cls``."""
    make = _maker(cls)

    def check(args: Any) -> Any:
        if type(args) is not dict or not args.keys() <= _CLAIM_NEXT_KEYS:
            return None
        queues = args.get("queues")
        if type(queues) is not list or not _QUEUES_LO <= len(queues) <= _QUEUES_HI:
            return None
        for queue in queues:
            if not ((type(queue) is str and queue in _NAMES) or _name(queue)):
                return None
        limit = args.get("max", 1)
        wait_ms = args.get("wait_ms", 0)
        lease_ms = args.get("lease_ms")
        if not (
            _int(limit, *CLAIM_MAX)
            and _int(wait_ms, 0, MAX_WAIT_MS)
            and (lease_ms is None or _int(lease_ms, *LEASE_MS))
        ):
            return None
        return make(queues=list(queues), max=limit, wait_ms=wait_ms, lease_ms=lease_ms)

    return check


_COMPLETE = ("job_id", "lease", "result", "cost")
_COMPLETE_KEYS = frozenset(_COMPLETE)


@_written_for(*_COMPLETE)
def fast_complete(cls: type) -> Check:
    """The check of one completion of ``complete``/``complete_many``, made as ``cls``.

    A completion that settles costs (``cost``, rare) is left to the converter.
    """
    make = _maker(cls)

    def check(args: Any) -> Any:
        if type(args) is not dict or not args.keys() <= _COMPLETE_KEYS:
            return None
        job_id, lease, result = args.get("job_id"), args.get("lease"), args.get("result")
        if not (
            type(job_id) is str and 0 < len(job_id) <= JOB_ID_LEN  # _text, inline: per job
            and type(lease) is str and 0 < len(lease) <= LEASE_TOKEN_LEN
            and (result is None or _json(result))
        ):  # fmt: skip
            return None
        if args.get("cost") is not None:
            return None
        return make(job_id=job_id, lease=lease, result=result, cost=None)

    return check


@_written_for("jobs")
def fast_complete_many(cls: type) -> Check | None:
    """The check of a whole ``complete_many``: every completion passes :func:`fast_complete`'s."""
    return _batch(cls, MAX_COMPLETIONS)
