"""Verb arguments from the wire: strict structuring into attrs classes.

One strict cattrs converter for the wire format (:mod:`daemon.strict`), with
``forbid_extra_keys`` and no coercion.
Any failure becomes one ``invalid_argument`` refusal naming the first bad field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import orjson

from actors.errors import Refused, invalid
from actors.limits import NAME_RE, NAME_RULE
from daemon.strict import strict_converter
from daemon.validation import describe

T = TypeVar("T")


converter = strict_converter()

#: Hand-written structurers of the hot verbs' arguments (:mod:`daemon.verbs.fast_args`):
#: each returns the instance for arguments it checked valid in full, or None to
#: let the converter decide, and word any refusal.
FAST: dict[type, Callable[[Any], Any]] = {}


def structure(args: dict[str, Any], cls: type[T]) -> T:
    """Structure ``args`` into ``cls`` or raise ``invalid_argument`` naming the field."""
    fast = FAST.get(cls)
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


# Validators for attrs fields of verb arguments. They raise the refusal itself,
# so the field is named even when attrs runs them in __init__.


def name(_inst: Any, attr: attrs.Attribute, value: str | None) -> None:
    """A namespace, queue, type or budget key: 1-128 bytes of ``[A-Za-z0-9._:-]``."""
    if value is not None and not NAME_RE.match(value):
        raise invalid(attr.name, f"{attr.name} must be {NAME_RULE}")


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


#: Levels of nesting orjson encodes at most.
_ENCODE_DEPTH = 254
#: Levels an answer wraps a stored value in (``{"jobs": [{"job": {"payload": ...}}]}``
#: is 4), with room to spare.
_ENVELOPE = 6


def json_value(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    """A free-form value (payload, result) that every answer can carry back.

    Parsing accepts deeper nesting than encoding does, and msgpack bodies can
    hold bytes or extension types: refused here, never stored to fail later.
    """
    wrapped = value
    for _ in range(_ENVELOPE):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        if "recursion" in str(exc).lower():
            levels = _ENCODE_DEPTH - _ENVELOPE
            message = f"{attr.name} is nested too deeply: at most {levels} levels"
        else:
            message = f"{attr.name} holds a value JSON cannot carry: {exc}"
        raise invalid(attr.name, message) from None
