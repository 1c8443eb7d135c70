"""A job's budget bindings as stored, parsed once.

The ``budgets`` column holds ``[{"key": ..., "cost": ...}, ...]`` as JSON (the
stored format both stores share). The parsed ``(key, cost)`` pairs are kept
by text, so the jobs of one kind, which share one text, parse it once, not
again at every debit, park and release.

A completion that reports what the job really cost (``complete``'s ``cost``)
adds ``"settled": <actual>`` to those bindings it settles
(:func:`with_settled`); such a text is one job's, so it is parsed, not kept.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import orjson

#: Marks a stored text carrying settled costs (one job's: not worth keeping).
SETTLED_MARK = '"settled"'

Bindings = tuple[tuple[str, int], ...]
#: Stored ``budgets`` texts parsed already (bounded): the jobs of one kind share
#: one text, so each binding is parsed once, not again at every debit and park.
_PARSED: dict[str, Bindings] = {}
_PARSED_MAX = 4096


def bindings(text: str | None) -> Bindings:
    """A job's stored ``budgets`` column as ``(key, cost)`` pairs (the stored
    format stays JSON; its parsed form is kept)."""
    if text is None:
        return ()
    parsed = _PARSED.get(text)
    if parsed is None:
        parsed = tuple((b["key"], b["cost"]) for b in orjson.loads(text))
        if SETTLED_MARK in text:
            return parsed
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = parsed
    return parsed


#: Stored texts of bindings made already (bounded), the inverse of ``_PARSED``.
_TEXTS: dict[Bindings, str] = {}


def stored(pairs: Bindings) -> str:
    """The stored ``budgets`` text of ``(key, cost)`` pairs: made once per kind
    of job, not encoded again for each one enqueued."""
    text = _TEXTS.get(pairs)
    if text is None:
        text = orjson.dumps([{"key": key, "cost": cost} for key, cost in pairs]).decode()
        if len(_TEXTS) >= _PARSED_MAX:
            _TEXTS.clear()
        _TEXTS[pairs] = text
    return text


def cost_for(text: str | None, key: str) -> int:
    """What a job with stored bindings ``text`` costs budget ``key``."""
    return next((cost for k, cost in bindings(text) if k == key), 1)


def settled(text: str | None) -> dict[str, Fraction]:
    """The settled costs a stored text carries, by budget key (exact: a float
    is read as its shortest decimal, 0.1 as 1/10)."""
    if text is None or SETTLED_MARK not in text:
        return {}
    return {b["key"]: exact(b["settled"]) for b in orjson.loads(text) if "settled" in b}


def exact(value: int | float) -> Fraction:
    """A cost as an exact fraction (a float by its shortest decimal form)."""
    return Fraction(value) if type(value) is int else Fraction(repr(value))


def with_settled(text: str, actual: dict[str, Any]) -> str:
    """The stored text of bindings ``text`` with ``actual`` costs settled (by key)."""
    return orjson.dumps([
        {"key": key, "cost": cost, **({"settled": actual[key]} if key in actual else {})}
        for key, cost in bindings(text)
    ]).decode()  # fmt: skip


def costs_wire(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A stored text as the job object's ``budgets`` (``[{key, cost}]``) and
    ``costs`` (``[{key, reserved, settled}]``, ``settled`` null until settled)."""
    items = orjson.loads(text) or []
    costs = [{"key": b["key"], "reserved": b["cost"], "settled": b.get("settled")} for b in items]
    if SETTLED_MARK in text:
        items = [{"key": b["key"], "cost": b["cost"]} for b in items]
    return items, costs
