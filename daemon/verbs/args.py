"""Verb arguments: the one place they are checked.

:func:`structure` turns a verb's arguments into its attrs class, or refuses
them as one ``invalid_argument`` naming the first bad field. It first tries the
class's fast check from :data:`FAST`, then the strict cattrs converter
(:mod:`daemon.strict`: ``forbid_extra_keys``, no coercion) with the attrs
validators below (:func:`name`, :func:`between`, :func:`text`,
:func:`json_value`) on the fields.

The fast checks (:mod:`daemon.verbs.fast_checks`) are hand-written for the hot verbs (``enqueue``,
``enqueue_many``, ``claim_next``, ``complete``, ``complete_many``): cattrs plus
the validators cost 3-8 µs per job, these a fraction of that. They only ever
*accept*: arguments they cannot vouch for in full (a wrong type, a value out of
range, an unknown field, anything unusual) give None and go to the converter,
which refuses them with the usual field and message. So both paths answer
alike, and the converter stays the one place that words errors.

A verb module registers its classes' checks right after defining them
(:func:`~daemon.verbs.fast_checks.register_fast` with
:func:`~daemon.verbs.fast_checks.fast_enqueue` and the like), so this module
imports no verb. A check is registered only if its class still has exactly the
fields it was written for; a class that gained or lost a field falls back to
the converter until its check is updated.

Every bound, on both paths, is :mod:`actors.limits`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import orjson

from actors.errors import Refused, invalid
from actors.limits import (
    ANSWER_ENVELOPE,
    GROUP_RULE,
    NAME_RE,
    NAME_RULE,
    VALUE_DEPTH,
    valid_group,
)
from daemon.strict import strict_converter
from daemon.validation import describe
from daemon.verbs.fast_checks import FAST

T = TypeVar("T")

converter = strict_converter()


def structure(args: dict[str, Any], cls: type[T]) -> T:
    """Structure ``args`` into ``cls`` or raise ``invalid_argument`` naming the field."""
    fast = FAST.get(cls)  # the hot verbs' fast check
    if fast is not None:
        made = fast(args)
        if made is not None:
            return made  # type: ignore[no-any-return]
    try:
        return converter.structure(args, cls)
    except Refused:
        raise
    except Exception as exc:
        _name_refused_fields(exc)
        problems = describe(exc)
        field, message = problems[0] if problems else ("", str(exc))
        named = not field or message.startswith(field.rsplit(".", 1)[-1])
        raise invalid(field, message if named else f"{field}: {message}") from None


def _name_refused_fields(exc: BaseException) -> None:
    # A validator's refusal raised inside a nested structure (``jobs[2]``) or by
    # ``__init__`` carries its field only in ``details``; expose it where
    # describe() looks, so the path reads ``jobs[2].priority``, not ``jobs[2]``.
    if isinstance(exc, Refused) and isinstance(exc.details.get("field"), str):
        exc.field = exc.details["field"]  # type: ignore[attr-defined]
    for sub in getattr(exc, "exceptions", ()):
        _name_refused_fields(sub)


# -- validators for attrs fields ---------------------------------------------------------
# They raise the refusal itself, so the field is named even when attrs runs them
# in __init__. daemon.openapi reads them back into schemas.


def name(_inst: Any, attr: attrs.Attribute, value: str | None) -> None:
    """A namespace, queue, type or budget key: 1-128 bytes of ``[A-Za-z0-9._:-]``."""
    if value is not None and not NAME_RE.match(value):
        raise invalid(attr.name, f"{attr.name} must be {NAME_RULE}")


def group(_inst: Any, attr: attrs.Attribute, value: str | None) -> None:
    """A job's fairness group (None allowed: the default group)."""
    if value is not None and not valid_group(value):
        raise invalid(attr.name, f"{attr.name} must be {GROUP_RULE}")


def between(lo: int, hi: int | None = None) -> Callable[[Any, attrs.Attribute, Any], None]:
    """An integer within ``lo..hi`` (None allowed: absent)."""

    def check(_inst: Any, attr: attrs.Attribute, value: int | None) -> None:
        if value is None:
            return
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise invalid(attr.name, f"{attr.name} must be {bound}, got {value}")

    return check


def text(max_len: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    """A non-empty string of at most ``max_len`` characters (None allowed)."""

    def check(_inst: Any, attr: attrs.Attribute, value: str | None) -> None:
        if value is not None and not 0 < len(value) <= max_len:
            raise invalid(attr.name, f"{attr.name} must be 1-{max_len} characters")

    return check


def json_value(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    """A free-form value (payload, result) that every answer can carry back.

    Parsing accepts deeper nesting than encoding does, and msgpack bodies can
    hold bytes or extension types: refused here, never stored to fail later.
    """
    wrapped = value
    for _ in range(ANSWER_ENVELOPE):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        if "recursion" in str(exc).lower():
            message = f"{attr.name} is nested too deeply: at most {VALUE_DEPTH} levels"
        else:
            message = f"{attr.name} holds a value JSON cannot carry: {exc}"
        raise invalid(attr.name, message) from None
