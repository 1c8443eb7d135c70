"""Turning cattrs structuring errors into ``(field path, message)`` pairs.

Used by both the config file (``daemon.lease: ...``) and the wire
(``invalid_argument`` with ``field``), so a bad value is described the same way
wherever it comes from.
"""

from __future__ import annotations

import difflib

import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError


class FieldError(ValueError):
    """A validator's refusal of one field; ``field`` lets :func:`describe` name it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def at_least(minimum: int):
    """An attrs validator: an integer of at least ``minimum``, named in errors."""

    def check(_inst: object, attr: attrs.Attribute, value: int) -> None:
        if value < minimum:
            raise FieldError(attr.name, f"must be at least {minimum}, got {value}")

    return check


def describe(exc: BaseException, path: str = "") -> list[tuple[str, str]]:
    """Flatten a (possibly nested) cattrs error into ``(path, message)`` pairs."""
    if isinstance(exc, ForbiddenExtraKeysError):
        known = [a.name for a in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
        out = []
        # A msgpack map may have non-string keys (bytes, numbers): named by repr.
        for key in sorted(exc.extra_fields, key=repr):
            name = key if isinstance(key, str) else repr(key)
            hint = difflib.get_close_matches(name, known, n=1)
            more = f"; did you mean {hint[0]!r}?" if hint else ""
            out.append((join(path, name), f"unknown field {key!r}{more}"))
        return out
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        out = []
        for sub in exc.exceptions:
            out.extend(describe(sub, join(path, _note(sub))))
        return out
    if isinstance(exc, KeyError):
        name = exc.args[0] if exc.args else "?"
        full = path if path.split(".")[-1] == str(name) else join(path, str(name))
        return [(full, f"{name} is required")]
    field = getattr(exc, "field", None)
    if isinstance(field, str):
        path = join(path, field)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return [(path, message)]


def _note(exc: BaseException) -> str:
    for note in getattr(exc, "__notes__", []):
        name = getattr(note, "name", None)
        if name is not None:
            return str(name)
        index = getattr(note, "index", None)
        if index is not None:
            return f"[{index}]"
    return ""


def join(path: str, part: str) -> str:
    """``a.b`` + ``c`` -> ``a.b.c``; ``a`` + ``[2]`` -> ``a[2]``."""
    if not part:
        return path
    if not path:
        return part
    return f"{path}{part}" if part.startswith("[") else f"{path}.{part}"
