"""Strict cattrs converters: the one place that says what a JSON or TOML value may be.

No coercion: ``"5"`` is not an int, ``true`` is not ``1``, ``1.5`` is not ``1``,
a string or a table is not an array. The wire and the config file share these
rules, so a bad value is refused the same way wherever it comes from.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import cattrs
from cattrs.cols import is_sequence, list_structure_factory


def json_type(value: Any) -> str:
    """How a JSON/TOML value's type is named in error messages."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "an object", type(None): "null"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def _exact(kind: type, label: str) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _t: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {label}, got {json_type(value)}")
        return value

    return hook


def _array(type_: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    # cattrs alone would take any iterable: "abc" as ["a", "b", "c"], {"k": 1} as ["k"].
    inner = list_structure_factory(type_, conv)
    as_tuple = typing.get_origin(type_) is tuple

    def hook(value: Any, t: Any) -> Any:
        if type(value) is not list:
            raise TypeError(f"expected an array, got {json_type(value)}")
        items = inner(value, t)
        return tuple(items) if as_tuple else items

    return hook


def _int_or_str(value: Any, _t: Any) -> int | str:
    if type(value) in (int, str):
        return value
    raise TypeError(f"expected an integer or a string, got {json_type(value)}")


def strict_converter() -> cattrs.Converter:
    """A converter with ``forbid_extra_keys``, detailed errors and no coercion."""
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(str, _exact(str, "a string"))
    conv.register_structure_hook(bool, _exact(bool, "a boolean"))
    conv.register_structure_hook(int, _exact(int, "an integer"))
    conv.register_structure_hook(Any, lambda v, _t: v)
    conv.register_structure_hook(int | str, _int_or_str)
    conv.register_structure_hook_factory(is_sequence, _array)
    return conv
