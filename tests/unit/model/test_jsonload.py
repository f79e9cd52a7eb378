"""model.jsonload.loads is json.loads: same values (types and key order included), same
errors (but JSONTooDeep for RecursionError), on generated JSON and on the inputs where orjson alone would differ."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.model.jsonload import JSONTooDeep, loads

_scalars = (st.none() | st.booleans()
            | st.integers(min_value=-(1 << 70), max_value=1 << 70)
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text())
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=5),
    max_leaves=30)


def _shape(v: Any) -> Any:
    """A comparable form that keeps types, key order and float bits (-0.0 vs 0.0)."""
    if isinstance(v, dict):
        return ("dict", [(k, _shape(x)) for k, x in v.items()])
    if isinstance(v, list):
        return ("list", [_shape(x) for x in v])
    if isinstance(v, float):
        return ("float", v.hex() if not math.isnan(v) else "nan")
    return (type(v).__name__, v)


def _same(text: bytes | str) -> None:
    try:
        want: Any = ("ok", _shape(json.loads(text)))
    except (ValueError, RecursionError) as exc:
        # Too deep for json.loads is JSONTooDeep (a ValueError), not a RecursionError.
        want = ("error", JSONTooDeep if isinstance(exc, RecursionError) else type(exc))
    try:
        got: Any = ("ok", _shape(loads(text)))
    except (ValueError, RecursionError) as exc:
        got = ("error", type(exc))
    assert got == want


@settings(max_examples=400, deadline=None)
@given(_values, st.booleans(), st.booleans())
def test_generated_documents_decode_as_json_loads_does(value: Any, ascii_only: bool,
                                                       as_bytes: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    _same(text.encode("utf-8", errors="surrogatepass") if as_bytes else text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='{}[]",:0123456789.eE-+ \\u00dtrufalsn', max_size=40))
def test_arbitrary_text_decodes_or_fails_as_json_loads_does(text: str) -> None:
    _same(text.encode())


@pytest.mark.parametrize("text", [
    b'{"a":1,"a":2,"b":3}',  # duplicate keys: the last value, the first position
    b'{"big":123456789012345678901234567890}',  # orjson alone: a float
    b'{"low":-9223372036854775809}',
    b'{"max":18446744073709551615,"min":-9223372036854775808}',
    b'"\\ud800"',  # a lone surrogate: orjson refuses it
    b'"\xed\xa0\x80"',  # an encoded surrogate: json accepts it (surrogatepass)
    b'{"x":NaN,"y":Infinity}', b'[1e400]',
    b'\xef\xbb\xbf{"bom":true}', '{"u16":1}'.encode("utf-16"),
    b'"\xff"', b'', b'[' * 2000 + b']' * 2000, b'{"x":-0,"y":-0.0,"z":1E2}',
])
def test_inputs_orjson_alone_would_treat_differently(text: bytes) -> None:
    _same(text)


def test_bytearray_and_memoryview() -> None:
    assert loads(bytearray(b'{"a":[1]}')) == {"a": [1]}
    assert loads(memoryview(b'{"a":[1]}')) == {"a": [1]}


def test_large_texts_decode_as_json_loads_does() -> None:
    from trio_typha.model.jsonload import LARGE

    doc = {"items": [{"metadata": {"name": f"p{i}", "uid": "x" * 20}} for i in range(30000)]}
    text = json.dumps(doc).encode()
    assert len(text) > LARGE
    _same(text)
