"""Fuzz target: the arguments of every verb, as the transports hand them over.

Input: one request, either a JSON frame as the socket reads it (``{"id": 1, "op":
"enqueue", ...}``, through :func:`daemon.transport.framing.parse`) or a msgpack
map as an HTTP body may be (first byte a msgpack map marker). For a known ``op``,
the steps of :func:`daemon.dispatch.prepare` that need no daemon run on the
arguments: ``namespace`` and ``answer`` are taken out, then
:func:`daemon.verbs.args.structure` makes the verb's argument class from
:data:`daemon.verbs.table.VERBS`, then the documents a planner decodes before
any write (a policy, a quota document, a budget's strategy). Checked:

- nothing raises but :class:`actors.errors.Refused` (structuring refuses only
  as ``invalid_argument`` naming a field);
- a hot verb's fast check (:data:`daemon.verbs.fast_checks.FAST`) never accepts what
  the strict converter refuses, and both make the same object.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import msgpack

from actors.errors import Refused
from actors.policy import parse_policy
from actors.quota import parse_quota
from daemon.dispatch import _minimal_asked
from daemon.transport.framing import Request, parse
from daemon.verbs import VERBS
from daemon.verbs.args import converter, structure
from daemon.verbs.budgets import parse_strategy
from daemon.verbs.fast_checks import FAST
from daemon.verbs.what_if import PREVIEWS
from tests.fuzz.targets import check, refusal_only


def request(data: bytes) -> tuple[Any, dict[str, Any]] | None:
    """``(op, args)`` of one input, or None if it is no request."""
    if data[:1] and (0x80 <= data[0] <= 0x8F or data[0] in (0xDE, 0xDF)):
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except Exception:
            return None  # the HTTP body reader answers bad_frame
        if not isinstance(doc, dict):
            return None
        doc.pop("id", None)
        return doc.pop("op", None), doc
    event = parse(data.split(b"\n", 1)[0])
    if not isinstance(event, Request) or event.refused is not None:
        return None
    return event.op, event.args


def one_input(data: bytes) -> None:
    """Check one request's arguments (raises on a bug)."""
    got = request(data)
    if got is None:
        return
    op, args = got
    verb = VERBS.get(op) if isinstance(op, str) else None
    if verb is None:
        return
    if "namespace" in args:
        args.pop("namespace")
    if isinstance(refusal_only(lambda: _minimal_asked(verb.name, args)), Refused):
        return
    original = copy.deepcopy(args)
    made = refusal_only(lambda: structure(args, verb.args))
    if isinstance(made, Refused):
        check(made.code == "invalid_argument", f"structure refused {made.code!r}")
        check(isinstance(made.details.get("field"), str), "a refusal naming no field")
        return
    check(isinstance(made, verb.args), f"structure made a {type(made).__name__}")
    fast = FAST.get(verb.args)
    if fast is not None and fast(copy.deepcopy(original)) is not None:
        strict = refusal_only(lambda: converter.structure(copy.deepcopy(original), verb.args))
        check(not isinstance(strict, Refused), f"the fast check accepted what {strict!r} refuses")
        check(strict == made, "the fast check and the converter made different objects")
    decode_documents(verb.name, made)


def decode_documents(name: str, made: Any) -> None:
    """The documents the verb's planner decodes before writing, through the same code."""
    if name == "policy_set":
        refusal_only(lambda: parse_policy(made.fields()))
    elif name == "quota_set":
        refusal_only(lambda: parse_quota(made.quota))
    elif name in ("budget_create", "budget_put"):
        refusal_only(made.spec)
    elif name == "budget_patch" and isinstance(made.strategy, dict):
        refusal_only(lambda: parse_strategy(made.strategy))
    elif name == "what_if" and isinstance(made.change, dict):
        _change(made.change)


def _change(change: dict[str, Any]) -> None:
    """A ``what_if`` change: its verb's arguments, structured and decoded the same way."""
    op = change.get("op")
    if not isinstance(op, str) or op not in PREVIEWS:  # the verb refuses it (change.op)
        return
    args = {k: v for k, v in change.items() if k not in ("op", "namespace")}
    made = refusal_only(lambda: structure(args, VERBS[op].args))
    if not isinstance(made, Refused):
        decode_documents(op, made)


if __name__ == "__main__":
    from tests.fuzz.run import main

    sys.exit(main(["args", *sys.argv[1:]]))
