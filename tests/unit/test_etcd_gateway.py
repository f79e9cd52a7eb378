"""The sans-IO gateway codec: request bodies and the replies etcd 3.4's gateway sends."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.datastore import etcd_gateway as gw
from trio_typha.datastore.etcd_errors import EtcdGatewayError, EtcdProtocolError


def b64(s: bytes) -> str:
    return base64.b64encode(s).decode()


HEADER = {"cluster_id": "324952591200643719", "member_id": "3319814642761637952",
          "revision": "4", "raft_term": "2"}


@given(st.binary(min_size=1, max_size=8), st.binary(max_size=8))
def test_prefix_end_bounds_exactly_the_prefixed_keys(prefix: bytes, suffix: bytes) -> None:
    end = gw.prefix_end(prefix)
    key = prefix + suffix
    if end == b"\x00":  # all-0xff prefix: etcd reads this as "to the end of the keyspace"
        assert key >= prefix
    else:
        assert prefix <= key < end


@given(st.binary(min_size=1, max_size=8), st.binary(min_size=1, max_size=8))
def test_prefix_end_excludes_other_keys(prefix: bytes, other: bytes) -> None:
    end = gw.prefix_end(prefix)
    if not other.startswith(prefix) and end != b"\x00":
        assert not (prefix <= other < end)


def test_prefix_end_examples() -> None:
    assert gw.prefix_end(b"/calico/x/") == b"/calico/x0"
    assert gw.prefix_end(b"a\xff") == b"b"
    assert gw.prefix_end(b"\xff\xff") == b"\x00"


def test_range_request_encodes_bytes_as_base64_and_int64_as_strings() -> None:
    body = gw.range_request(b"/a/", b"/a0", revision=7, limit=500)
    assert body == {"key": b64(b"/a/"), "range_end": b64(b"/a0"), "revision": "7",
                    "limit": "500"}
    assert gw.range_request(b"k", b"l") == {"key": b64(b"k"), "range_end": b64(b"l")}


def test_next_page_key_is_the_smallest_key_after() -> None:
    assert gw.next_page_key(b"/a/x") == b"/a/x\x00"
    assert b"/a/x" < gw.next_page_key(b"/a/x") < b"/a/x\x01"


def test_watch_request_shape() -> None:
    body = gw.watch_request(b"/a/", b"/a0", 12)
    assert body == {"create_request": {"key": b64(b"/a/"), "range_end": b64(b"/a0"),
                                       "start_revision": "12", "progress_notify": True}}
    assert "progress_notify" not in gw.watch_request(b"k", b"l", 1,
                                                     progress_notify=False)["create_request"]


def test_decode_range_reply() -> None:
    payload = {"header": HEADER, "kvs": [
        {"key": b64(b"/k1"), "create_revision": "2", "mod_revision": "3", "version": "2",
         "value": b64(b'{"a":1}')},
        {"key": b64(b"/k2"), "create_revision": "4", "mod_revision": "4", "version": "1"},
    ], "more": True, "count": "5"}
    page = gw.decode_range(payload)
    assert page.header == gw.Header("324952591200643719", 4)
    assert page.more is True
    assert page.kvs == (gw.KeyValue(b"/k1", b'{"a":1}', 3, 2), gw.KeyValue(b"/k2", b"", 4, 4))


def test_decode_empty_range_reply_omits_zero_fields() -> None:
    page = gw.decode_range({"header": HEADER})
    assert page.kvs == () and page.more is False and page.header.revision == 4


def test_decode_watch_messages() -> None:
    created = gw.decode_watch_message(json.dumps({"result": {"header": HEADER,
                                                              "created": True}}))
    assert created.created and not created.events and not created.progress_notify

    put = gw.decode_watch_message(json.dumps({"result": {"header": HEADER, "events": [
        {"kv": {"key": b64(b"/k"), "create_revision": "2", "mod_revision": "3",
                "version": "2", "value": b64(b"v")},
         "prev_kv": {"key": b64(b"/k"), "mod_revision": "2", "value": b64(b"u")}},
        {"type": "DELETE", "kv": {"key": b64(b"/j"), "mod_revision": "3"}},
    ]}}).encode())
    assert put.events == (gw.WatchEvent(False, gw.KeyValue(b"/k", b"v", 3, 2)),
                          gw.WatchEvent(True, gw.KeyValue(b"/j", b"", 3, 0)))
    assert not put.progress_notify

    progress = gw.decode_watch_message(json.dumps({"result": {"header": HEADER}}))
    assert progress.progress_notify and progress.header.revision == 4

    canceled = gw.decode_watch_message(json.dumps({"result": {
        "header": {"cluster_id": "1", "raft_term": "2"}, "canceled": True,
        "compact_revision": "3"}}))
    assert canceled.canceled and canceled.compact_revision == 3
    assert canceled.header.revision == 0


def test_unary_error_reply_raises_with_grpc_code() -> None:
    payload = {"error": "etcdserver: mvcc: required revision has been compacted",
               "message": "etcdserver: mvcc: required revision has been compacted", "code": 11}
    with pytest.raises(EtcdGatewayError) as info:
        gw.decode_range(payload)
    assert info.value.code == 11 and info.value.compacted

    future = {"error": "x", "message": "etcdserver: mvcc: required revision is a future revision",
              "code": 11}
    with pytest.raises(EtcdGatewayError) as info:
        gw.decode_range(future)
    assert not info.value.compacted


def test_stream_error_line_raises() -> None:
    line = json.dumps({"error": {"grpc_code": 14, "http_code": 503,
                                 "message": "transport is closing", "http_status": "Unavailable"}})
    with pytest.raises(EtcdGatewayError, match="transport is closing") as info:
        gw.decode_watch_message(line)
    assert info.value.code == 14


@pytest.mark.parametrize("line", [
    "not json",
    "[1, 2]",
    json.dumps({"nothing": 1}),
    json.dumps({"result": {"header": HEADER, "events": [{"kv": {"key": "%%%"}}]}}),
    json.dumps({"result": {"header": HEADER, "events": [{"type": "EXPIRE", "kv": {}}]}}),
    json.dumps({"result": {"header": {"revision": "seven"}}}),
    json.dumps({"result": {"header": HEADER, "created": "yes"}}),
    json.dumps({"result": {"header": HEADER, "events": {"kv": {}}}}),
])
def test_malformed_watch_lines_are_protocol_errors(line: str) -> None:
    with pytest.raises(EtcdProtocolError):
        gw.decode_watch_message(line)


@given(st.binary(max_size=64), st.binary(max_size=64), st.integers(1, 2**63 - 1))
def test_put_request_and_range_reply_round_trip(key: bytes, value: bytes, rev: int) -> None:
    # What we send in a put comes back verbatim in a range reply using the same encoding.
    body = gw.put_request(key, value)
    reply = {"header": {"revision": str(rev)}, "kvs": [
        {"key": body["key"], "value": body["value"], "mod_revision": str(rev)}]}
    assert gw.decode_range(json.loads(json.dumps(reply))).kvs[0] == gw.KeyValue(key, value, rev)
