"""A job's budget bindings as stored, parsed once.

The ``budgets`` column holds ``[{"key": ..., "cost": ...}, ...]`` as JSON (the
stored format both stores share). The parsed ``(key, cost)`` pairs are kept
by text, so the jobs of one kind, which share one text, parse it once, not
again at every debit, park and release.
"""

from __future__ import annotations

import orjson

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
