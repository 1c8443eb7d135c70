"""daemon/transport/wide_ints.py: integers beyond 64 bits are named, never read as floats."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.transport.wide_ints import INT_MAX, INT_MIN, WideInt, find_wide_int


@pytest.mark.parametrize(
    ("text", "path", "literal"),
    [
        (b'{"payload":{"n":12345678901234567890123}}', "payload.n", "12345678901234567890123"),
        (b'{"n":18446744073709551616}', "n", "18446744073709551616"),
        (b'{"n":-9223372036854775809}', "n", "-9223372036854775809"),
        (
            b'{"jobs":[{"payload":{}},{"payload":{"ids":[1, 99999999999999999999]}}]}',
            "jobs[1].payload.ids[1]",
            "99999999999999999999",
        ),
        (
            b'{"a": "12345678901234567890123", "b": [[0], {"c": 12345678901234567890123}]}',
            "b[1].c",
            "12345678901234567890123",
        ),
        (b'{"k\\"\\u00e9": 12345678901234567890123}', 'k"\u00e9', "12345678901234567890123"),
        (b"[12345678901234567890123]", "[0]", "12345678901234567890123"),
    ],
)
def test_a_wide_integer_is_found_with_its_path(text, path, literal):
    assert find_wide_int(text) == WideInt(path, literal)


@pytest.mark.parametrize(
    "text",
    [
        b'{"max": 18446744073709551615, "min": -9223372036854775808}',  # the edges fit
        b'{"s": "12345678901234567890123", "t": "\\"12345678901234567890123"}',  # strings
        b'{"f": 1.2345678901234567890123, "e": 12345678901234567890123e0, "E": 1E30}',  # floats
        b'{"n": 123456789012345678}',  # 18 digits: never even walked
    ],
)
def test_what_fits_or_is_not_an_integer_passes(text):
    assert find_wide_int(text) is None


def test_deep_nesting_is_walked_without_recursion():
    depth = 1000
    text = b'{"a":' * depth + b"12345678901234567890123" + b"}" * depth
    orjson.loads(text)  # orjson reads it (as a float); so must we, to name it
    found = find_wide_int(text)
    assert found is not None and found.path == ".".join(["a"] * depth)


def test_the_refusal_names_the_field_and_the_range():
    refused = WideInt("payload.n", "12345678901234567890123").refused()
    assert refused.code == "invalid_argument"
    assert refused.details == {"field": "payload.n"}
    assert "12345678901234567890123" in refused.message
    assert str(INT_MIN) in refused.message and str(INT_MAX) in refused.message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(json_values)
def test_found_exactly_when_some_integer_does_not_fit(value):
    text = json.dumps(value).encode()

    def ints(v):
        if isinstance(v, bool):
            return
        if isinstance(v, int):
            yield v
        elif isinstance(v, list):
            for item in v:
                yield from ints(item)
        elif isinstance(v, dict):
            for item in v.values():
                yield from ints(item)

    wide = any(not INT_MIN <= n <= INT_MAX for n in ints(value))
    assert (find_wide_int(text) is not None) == wide
