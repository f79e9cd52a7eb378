"""k8s_listbody.split_list: a list response decoded one item at a time gives exactly what
json.loads gives, whatever the spacing and member order; a broken document fails with
MalformedResponse once the iterator reaches the break."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.datastore.k8s_errors import MalformedResponse
from trio_typha.datastore.k8s_listbody import split_list

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=12)
_items = st.lists(st.dictionaries(st.text(max_size=5), _values, max_size=4), max_size=6)


def _split(body: bytes) -> tuple[dict[str, Any], list[Any]]:
    head, items = split_list(body, "GET /x")
    return head, list(items)


def _want(body: bytes) -> tuple[dict[str, Any], list[Any]]:
    doc = json.loads(body)
    items = doc.pop("items", None) or []
    return doc, items


@settings(max_examples=300, deadline=None)
@given(_items, st.dictionaries(st.sampled_from(["continue", "resourceVersion"]),
                               st.text(max_size=8)),
       st.sampled_from(["", " ", "\n  "]), st.booleans(), st.booleans())
def test_same_as_json_loads(items: list[Any], metadata: dict[str, str], space: str,
                            metadata_first: bool, ascii_only: bool) -> None:
    members = [("kind", "PodList"), ("apiVersion", "v1"), ("metadata", metadata),
               ("items", items)]
    if not metadata_first:
        members.append(members.pop(2))  # after items: decoded whole
    sep = "," + space
    text = "{" + space + sep.join(
        f"{json.dumps(k)}{space}:{space}{json.dumps(v, ensure_ascii=ascii_only)}"
        for k, v in members) + space + "}" + space
    body = text.encode("utf-8", "surrogatepass")
    assert _split(body) == _want(body)


def test_items_are_decoded_as_they_are_reached() -> None:
    body = b'{"metadata":{"resourceVersion":"7"},"items":[{"a":1},{"b":2},{"c":3]]}'
    head, items = split_list(body, "GET /x")
    assert head == {"metadata": {"resourceVersion": "7"}}
    assert next(items) == {"a": 1} and next(items) == {"b": 2}
    with pytest.raises(MalformedResponse, match="GET /x: response is not JSON"):
        next(items)


@pytest.mark.parametrize("body", [
    b'{"metadata":{},"items":[{"a":1}],"metadata":{}}',  # a member twice
    b'{"metadata":{},"items":[{"a":1}]} x',  # trailing garbage
    b'{"metadata":{},"items":[{"a":1}]',  # cut short
    b'{"metadata":{},"items":[{"a":1},]}',
])
def test_broken_documents_fail_by_the_end(body: bytes) -> None:
    with pytest.raises(MalformedResponse):
        _split(body)


@pytest.mark.parametrize("body", [
    b'{"items":[{"a":1}],"metadata":{"continue":"t"}}',  # metadata last: whole
    '{"metadata":{},"items":[{"a":1}]}'.encode("utf-16"),
    b'\xef\xbb\xbf{"metadata":{},"items":[]}', b'{"metadata":{},"items":null}',
    b'{"metadata":{}}', b'{"metadata":{"x":1},"items":[]}',
])
def test_other_shapes_decode_as_json_loads_does(body: bytes) -> None:
    assert _split(body) == _want(body)


@pytest.mark.parametrize("body", [b'[1]', b'"x"', b'{"items":"x"}', b'\xff'])
def test_not_a_list_document(body: bytes) -> None:
    with pytest.raises(MalformedResponse):
        _split(body)
