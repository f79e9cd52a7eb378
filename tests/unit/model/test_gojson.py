"""gojson: json-iterator v1.1.12 (stdlib-compatible config) output, byte for byte.

The expected strings are what json-iterator v1.1.12 wrote for the same Go values (checked
with Go 1.25.11); the property tests check that every encoding parses back to the value.
"""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model.gojson import (
    ANY,
    BOOL,
    FLOAT,
    INT,
    STRING,
    Field,
    GoJSONError,
    Map,
    Ptr,
    Slice,
    Struct,
    dumps,
    go_float,
    go_string,
)
from trio_typha.model.goschema import ROOTS
from trio_typha.model.gotypes import DURATION, INT_OR_STRING, LABELS, PORT, PROTOCOL, TIME

ALL_ASCII = "".join(map(chr, range(128)))


def test_string_escaping_matches_json_iterator() -> None:
    assert go_string(ALL_ASCII) == (
        '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\u0008\\t\\n\\u000b'
        '\\u000c\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017'
        '\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f !\\"#$%\\u0026\'()*+,-./'
        '0123456789:;\\u003c=\\u003e?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\\\]^_`'
        'abcdefghijklmnopqrstuvwxyz{|}~\x7f"')
    assert go_string("\u2028\u2029é€😀") == '"\\u2028\\u2029é€😀"'
    assert go_string("<&>'") == '"\\u003c\\u0026\\u003e\'"'


def test_invalid_utf8_bytes_become_replacement_characters() -> None:
    # Each byte that does not start a valid sequence is replaced on its own (Go's rule,
    # not Python's "maximal subpart" one).
    assert go_string(b"a\xffb\xc3(c\xed\xa0\x80d") == '"a\\ufffdb\\ufffd(c\\ufffd\\ufffd\\ufffdd"'
    assert go_string(b"\xe2\x82x") == '"\\ufffd\\ufffdx"'
    assert go_string("lone \ud800") == '"lone \\ufffd"'


def test_encoding_json_escapes_inside_marshalers() -> None:
    # Values written by encoding/json inside a MarshalJSON keep \b and \f short.
    assert go_string("\b\f<", std=True) == '"\\b\\f\\u003c"'
    assert dumps(LABELS, {"k": "\b"}) == b'{"k":"\\b"}'


def test_floats() -> None:
    cases = {0: "0", 1: "1", -1: "-1", 0.1: "0.1", 1e-6: "0.000001", 9.99e-7: "9.99e-07",
             1e-7: "1e-07", 1e20: "100000000000000000000", 1e21: "1e+21",
             123456789.125: "123456789.125", 1.5e300: "1.5e+300", 5e-324: "5e-324",
             1.7976931348623157e308: "1.7976931348623157e+308", 100: "100",
             1234.5678: "1234.5678", -0.000001: "-0.000001",
             12345678901234567890.0: "12345678901234567000"}
    for value, text in cases.items():
        assert go_float(value) == text


def test_non_finite_floats_are_refused() -> None:
    for bad in (math.inf, -math.inf, math.nan):
        try:
            go_float(bad)
        except GoJSONError:
            continue
        raise AssertionError(f"{bad} was encoded")


INNER = Struct("Inner", [Field("a", STRING, True)])
OUTER = Struct("S", [
    Field("str", STRING), Field("opt", STRING, True), Field("b", BOOL, True),
    Field("n", INT, True), Field("f", Ptr(FLOAT), True), Field("l", Slice(STRING)),
    Field("lo", Slice(STRING), True), Field("m", Map(STRING)), Field("mo", Map(STRING), True),
    Field("in", INNER, True), Field("inz", INNER), Field("p", Ptr(INNER), True),
    Field("pn", Ptr(INNER)),
])


def test_struct_rules_match_json_iterator() -> None:
    # omitempty never drops a struct, a pointer to zero is kept, nil slices/maps are null,
    # map keys sort by their raw bytes ("a<" before "aZ" although "\\u003c" > "Z").
    value = {"f": 0.0, "m": {"b": "1", "a<": "2", "aZ": "3", "é": "4", "A": "5"}}
    assert dumps(OUTER, value) == (
        b'{"str":"","f":0,"l":null,"m":{"A":"5","a\\u003c":"2","aZ":"3","b":"1",'
        b'"\xc3\xa9":"4"},"in":{},"inz":{},"pn":null}')


def test_omitempty_drops_zero_values() -> None:
    value = {"opt": "", "b": False, "n": 0, "lo": [], "mo": {}, "p": None}
    assert b'"opt"' not in dumps(OUTER, value)
    full = dumps(OUTER, {"opt": "x", "b": True, "n": -3, "lo": ["a"], "mo": {"k": "v"},
                         "p": {}})
    assert full == (b'{"str":"","opt":"x","b":true,"n":-3,"l":null,"lo":["a"],"m":null,'
                    b'"mo":{"k":"v"},"in":{},"inz":{},"p":{},"pn":null}')


def test_interface_values_decode_numbers_as_float64() -> None:
    assert dumps(ANY, {"z": 1, "a": [True, None, "x", 12345678901234567890]}) == \
        b'{"a":[true,null,"x",12345678901234567000],"z":1}'


def test_wrong_shapes_are_refused() -> None:
    for t, v in ((STRING, 1), (BOOL, "true"), (INT, "1"), (INT, True), (Slice(STRING), "ab"),
                 (Map(STRING), ["a"]), (OUTER, []), (PORT, "not a port!"), (TIME, "yesterday"),
                 (DURATION, "5 minutes"), (PROTOCOL, 300), (INT_OR_STRING, 1.5)):
        try:
            dumps(t, v)
        except GoJSONError:
            continue
        raise AssertionError(f"{v!r} encoded as {t.name}")


def test_marshalers_normalise_like_go() -> None:
    assert dumps(Slice(PORT), [80, "81", "8000:8080", "9:9", "http"]) == \
        b'[80,81,"8000:8080",9,"http"]'
    assert dumps(Slice(PROTOCOL), ["TCP", "6", 17, "300"]) == b'["TCP",6,17,"300"]'
    assert dumps(DURATION, "90s") == b'"1m30s"'
    assert dumps(DURATION, "1500ns") == b'"1.5\xc2\xb5s"'
    assert dumps(TIME, "2024-05-01T12:00:00.5+02:00") == b'"2024-05-01T10:00:00Z"'
    assert dumps(TIME, None) == b"null"
    assert dumps(Slice(INT_OR_STRING), [8080, "http"]) == b'[8080,"http"]'


def test_v3_passthrough_artefacts() -> None:
    """The default-allow profile: the zero creationTimestamp is null and empty rule sides are {}."""
    profile = {"kind": "Profile", "apiVersion": "projectcalico.org/v3",
               "metadata": {"name": "projectcalico-default-allow"},
               "spec": {"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}]}}
    assert dumps(ROOTS["Profile"], profile) == (
        b'{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":'
        b'"projectcalico-default-allow","creationTimestamp":null},"spec":{"ingress":[{"action":'
        b'"Allow","source":{},"destination":{}}],"egress":[{"action":"Allow","source":{},'
        b'"destination":{}}]}}')


json_values = st.recursive(
    st.none() | st.booleans() | st.text() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@given(json_values)
def test_any_round_trips_through_json_loads(value: object) -> None:
    encoded = dumps(ANY, value)
    assert dumps(ANY, value) == encoded  # stable
    # Numbers travel as float64, like Go's interface{} values.
    assert _numbers_as_floats(json.loads(encoded)) == _numbers_as_floats(value)


def _numbers_as_floats(v: object) -> object:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, list):
        return [_numbers_as_floats(x) for x in v]
    assert isinstance(v, dict)
    return {k: _numbers_as_floats(x) for k, x in v.items()}


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_round_trip(x: float) -> None:
    assert float(go_float(x)) == x


@given(st.text())
def test_strings_round_trip(s: str) -> None:
    encoded = go_string(s)
    expected = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)
    assert json.loads(encoded) == expected
    assert "<" not in encoded and ">" not in encoded and "&" not in encoded
