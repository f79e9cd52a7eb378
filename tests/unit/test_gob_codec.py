"""gob codec against known byte sequences of Go's encoding/gob (docs/typha-protocol.md §2)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.gob.codec import (
    BOOL,
    INT,
    INTERFACE,
    NEED_DATA,
    STRING,
    UINT,
    Decoder,
    Encoder,
    Field,
    GobError,
    Named,
    Registry,
    Slice,
    Struct,
    TypeIds,
    encode_int,
    encode_uint,
)
from trio_typha.protocols.gob.gotime import GoTime
from trio_typha.protocols.gob.messages import (
    ENVELOPE,
    MSG_CLIENT_HELLO,
    REGISTERED_PREFIX,
    REGISTRY,
    Envelope,
    MsgACK,
    MsgClientHello,
    MsgDecoderRestart,
    MsgKVs,
    MsgPing,
    MsgPong,
    MsgServerHello,
    MsgSyncStatus,
)


def h(*parts: str) -> bytes:
    """Bytes written as hex groups, or as a "quoted" literal."""
    out = b""
    for part in parts:
        if part.startswith('"'):
            out += part.strip('"').encode()
        else:
            out += bytes.fromhex(part)
    return out


def decode_all(data: bytes, *, root=ENVELOPE, registry=REGISTRY) -> list:
    dec = Decoder(registry, root)
    dec.feed(data)
    values = []
    while (v := dec.next_value()) is not NEED_DATA:
        values.append(v)
    assert dec.buffered == 0
    return values


ENVELOPE_DEF = h("21 7f 03 01 01 08", '"Envelope"', "01 ff 80 00 01 01 01 07", '"Message"',
                 "01 10 00 00 00")


@pytest.mark.parametrize(("value", "wire"), [
    (0, "00"), (127, "7f"), (128, "ff 80"), (256, "fe 01 00"),
    (1 << 63, "f8 80 00 00 00 00 00 00 00"), ((1 << 64) - 1, "f8 ff ff ff ff ff ff ff ff"),
])
def test_uint_examples(value: int, wire: str) -> None:
    assert encode_uint(value) == bytes.fromhex(wire)


@pytest.mark.parametrize(("value", "wire"), [
    (0, "00"), (-1, "01"), (1, "02"), (6, "0c"), (-64, "7f"), (64, "ff 80"), (-65, "ff 81"),
    (65, "ff 82"),
])
def test_int_examples(value: int, wire: str) -> None:
    assert encode_int(value) == bytes.fromhex(wire)


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_int_singleton_round_trip(value: int) -> None:
    data = Encoder(REGISTRY).encode(value, INT)
    assert decode_all(data, root=None) == [value]


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_uint_singleton_round_trip(value: int) -> None:
    data = Encoder(REGISTRY).encode(value, UINT)
    # length, type id 3 (as a gob int: 06), singleton delta 0, the value
    assert data == encode_uint(2 + len(encode_uint(value))) + h("06 00") + encode_uint(value)
    assert decode_all(data, root=None) == [value]


class _Obj(dict):
    """A struct value for ad-hoc test types: attributes are the dict's keys."""

    __getattr__ = dict.__getitem__


def test_interface_holding_string_examples() -> None:
    item = Struct("S", [Field("R", "r", Slice("[]interface {}", INTERFACE))], _Obj)
    body = Encoder(REGISTRY).encode(_Obj(r=["1234", ""]), item)
    assert body.endswith(h("01 02 06", '"string"', "0c 06 00 04", '"1234"',
                           "06", '"string"', "0c 02 00 00", "00"))


def test_struct_encoding_omits_zero_fields_and_uses_deltas() -> None:
    t = Struct("T", [Field("A", "a", INT), Field("B", "b", STRING), Field("C", "c", BOOL)],
               _Obj)
    enc = Encoder(Registry())
    # value message: type id 64 (ff 80), delta 3 to field C, true, end of struct
    assert enc.encode(_Obj(a=0, b="", c=True), t).endswith(h("ff 80 03 01 00"))
    decoded = decode_all(Encoder(Registry()).encode(_Obj(a=5, b="", c=False), t), root=t,
                         registry=Registry())
    assert decoded == [{"a": 5}]


# --- whole messages (the canned vector is the one of typha/pkg/syncproto/sync_proto_test.go)

CANNED = ("Iv+BAwEBCEVudmVsb3BlAf+CAAEBAQdNZXNzYWdlARAAAAD/jP+CATtnaXRodWIuY29tL3Byb2plY3RjYWxp"
          "Y28vdHlwaGEvcGtnL3N5bmNwcm90by5Nc2dDbGllbnRIZWxsb/+DAwEBDk1zZ0NsaWVudEhlbGxvAf+EAAE"
          "EAQhIb3N0bmFtZQEMAAEESW5mbwEMAAEHVmVyc2lvbgEMAAEKU3luY2VyVHlwZQEMAAAAKv+EJgEIaG9zdG5"
          "hbWUBBGluZm8BB3ZlcnNpb24BCnN5bmNlcnR5cGUAAA==")


def test_canned_vector_decodes() -> None:
    data = base64.b64decode(CANNED)
    assert len(data) == 220
    [envelope] = decode_all(data)
    assert envelope.message == MsgClientHello(hostname="hostname", info="info",
                                              version="version", syncer_type="syncertype")


def test_canned_vector_reencodes_with_old_go_ids() -> None:
    # Older Go numbered user types from 65, and the hello of that time had four fields.
    old_hello = Struct("MsgClientHello", MSG_CLIENT_HELLO.fields[:4], MsgClientHello)
    registry = Registry()
    registry.register(REGISTERED_PREFIX + "MsgClientHello", old_hello, MsgClientHello)
    enc = Encoder(registry, TypeIds(first=65))
    data = enc.encode(Envelope(MsgClientHello("hostname", "info", "version", "syncertype")),
                      ENVELOPE)
    assert data == base64.b64decode(CANNED)


HELLO_NAME = REGISTERED_PREFIX + "MsgClientHello"
MODERN_HELLO = (
    ENVELOPE_DEF
    + h("ff f9 ff 80 01 3b", f'"{HELLO_NAME}"', "ff 81 03 01 01 0e", '"MsgClientHello"',
        "01 ff 82 00 01 08",
        "01 08", '"Hostname"', "01 0c 00 01 04", '"Info"', "01 0c 00 01 07", '"Version"',
        "01 0c 00 01 0a", '"SyncerType"', "01 0c 00 01 16", '"SupportsDecoderRestart"',
        "01 02 00 01 1e", '"SupportedCompressionAlgorithms"', "01 ff 84 00 01 18",
        '"SupportsModernPolicyKeys"', "01 02 00 01 0c", '"ClientConnID"', "01 06 00 00 00")
    + h("2e ff 83 02 01 01 20", '"[]syncproto.CompressionAlgorithm"', "01 ff 84 00 01 0c 00 00")
    + h("28 ff 82 24 01 02 6e 31 01 01 69 01 02 76 33 01 05 66 65 6c 69 78 01 01",
        "01 01 06 73 6e 61 70 70 79 01 01 01 fe 01 02 00 00"))
HELLO = MsgClientHello("n1", "i", "v3", "felix", True, ("snappy",), True, 258)


def test_modern_client_hello_from_fresh_process() -> None:
    assert Encoder(REGISTRY).encode(Envelope(HELLO), ENVELOPE) == MODERN_HELLO
    assert decode_all(MODERN_HELLO) == [Envelope(HELLO)]


def test_following_acks_split_then_compact() -> None:
    enc = Encoder(REGISTRY)
    enc.encode(Envelope(HELLO), ENVELOPE)
    ack_name = REGISTERED_PREFIX + "MsgACK"
    first = h("49 ff 80 01 33", f'"{ack_name}"', "ff 85 03 01 01 06", '"MsgACK"',
              "01 ff 86 00 00 00", "05 ff 86 01 00 00")
    assert enc.encode(Envelope(MsgACK()), ENVELOPE) == first
    assert enc.encode(Envelope(MsgACK()), ENVELOPE) == h("3c ff 80 01 33", f'"{ack_name}"',
                                                         "ff 86 01 00 00")


def _server_examples() -> tuple[bytes, TypeIds]:
    sh_name, dr_name = REGISTERED_PREFIX + "MsgServerHello", REGISTERED_PREFIX + "MsgDecoderRestart"
    expected = (
        ENVELOPE_DEF
        + h("ff a7 ff 80 01 3b", f'"{sh_name}"', "ff 81 03 01 01 0e", '"MsgServerHello"',
            "01 ff 82 00 01 04 01 07", '"Version"', "01 0c 00 01 0a", '"SyncerType"',
            "01 0c 00 01 1b", '"SupportsNodeResourceUpdates"', "01 02 00 01 0c",
            '"ServerConnID"', "01 06 00 00 00")
        + h("21 ff 82 1d 01 07", '"v3.32.1"', "01 05", '"felix"',
            "01 01 01 f8 12 34 56 78 00 00 00 01 00 00")
        + h("ff 86 ff 80 01 3e", f'"{dr_name}"', "ff 83 03 01 01 11", '"MsgDecoderRestart"',
            "01 ff 84 00 01 02 01 07", '"Message"', "01 0c 00 01 14", '"CompressionAlgorithm"',
            "01 0c 00 00 00")
        + h("3e ff 84 3a 01 2f", '"enable compression: snappy;send binary snapshot"', "01 06",
            '"snappy"', "00 00"))
    ids = TypeIds()
    enc = Encoder(REGISTRY, ids)
    got = (enc.encode(Envelope(MsgServerHello("v3.32.1", "felix", True, 0x1234567800000001)),
                      ENVELOPE)
           + enc.encode(Envelope(MsgDecoderRestart(
               "enable compression: snappy;send binary snapshot", "snappy")), ENVELOPE))
    assert got == expected
    return got, ids


def test_server_hello_and_restart_example() -> None:
    data, _ = _server_examples()
    assert [e.message for e in decode_all(data)] == [
        MsgServerHello("v3.32.1", "felix", True, 0x1234567800000001),
        MsgDecoderRestart("enable compression: snappy;send binary snapshot", "snappy")]


def test_kvs_status_and_ping_examples_on_a_fresh_stream() -> None:
    _, ids = _server_examples()  # Envelope 64, MsgServerHello 65, MsgDecoderRestart 66
    enc = Encoder(REGISTRY, ids)
    kvs_name = REGISTERED_PREFIX + "MsgKVs"
    add = SerializedUpdate("/calico/v1/config/foobar", b"baz", "1234")
    expected_add = (
        ENVELOPE_DEF
        + h("54 ff 80 01 33", f'"{kvs_name}"', "ff 85 03 01 01 06", '"MsgKVs"',
            "01 ff 86 00 01 01 01 03", '"KVs"', "01 ff 8a 00 00 00")
        + h("2b ff 89 02 01 01 1c", '"[]syncproto.SerializedUpdate"', "01 ff 8a 00 01 ff 88 00 00")
        + h("6a ff 87 03 01 01 10", '"SerializedUpdate"', "01 ff 88 00 01 06 01 03", '"Key"',
            "01 0c 00 01 05", '"Value"', "01 0a 00 01 08", '"Revision"', "01 10 00 01 11",
            '"V3ResourceVersion"', "01 0c 00 01 03", '"TTL"', "01 04 00 01 0a",
            '"UpdateType"', "01 06 00 00 00")
        + h("39 ff 86 35 01 01 01 18", '"/calico/v1/config/foobar"', "01 03", '"baz"',
            "01 06", '"string"', "0c 06 00 04", '"1234"', "03 01 00 00 00"))
    assert enc.encode(Envelope(MsgKVs((add,))), ENVELOPE) == expected_add
    delete = SerializedUpdate("/calico/v1/config/foobar", None, "1235",
                              update_type=UpdateType.DELETED)
    expected_delete = h("6b ff 80 01 33", f'"{kvs_name}"', "ff 86 30 01 01 01 18",
                        '"/calico/v1/config/foobar"', "02 06", '"string"', "0c 06 00 04",
                        '"1235"', "03 03 00 00 00")
    assert enc.encode(Envelope(MsgKVs((delete,))), ENVELOPE) == expected_delete
    status_name = REGISTERED_PREFIX + "MsgSyncStatus"
    expected_status = (h("68 ff 80 01 3a", f'"{status_name}"', "ff 8b 03 01 01 0d",
                         '"MsgSyncStatus"', "01 ff 8c 00 01 01 01 0a", '"SyncStatus"',
                         "01 06 00 00 00") + h("07 ff 8c 03 01 02 00 00"))
    assert enc.encode(Envelope(MsgSyncStatus(SyncStatus.IN_SYNC)), ENVELOPE) == expected_status
    ping_name = REGISTERED_PREFIX + "MsgPing"
    stamp = GoTime.from_unix_ns(1_700_000_000 * 10**9 + 5, offset=0)  # Local = UTC
    expected_ping = (h("5c ff 80 01 34", f'"{ping_name}"', "ff 8d 03 01 01 07", '"MsgPing"',
                       "01 ff 8e 00 01 01 01 09", '"Timestamp"', "01 ff 90 00 00 00")
                     + h("10 ff 8f 05 01 01 04", '"Time"', "01 ff 90 00 00 00")
                     + h("16 ff 8e 12 01 0f 01 00 00 00 0e dc e5 e8 00 00 00 00 05 00 00 00 00"))
    assert enc.encode(Envelope(MsgPing(stamp)), ENVELOPE) == expected_ping
    stream = (ENVELOPE_DEF + expected_add[len(ENVELOPE_DEF):] + expected_delete
              + expected_status + expected_ping)
    assert [e.message for e in decode_all(stream)] == [
        MsgKVs((add,)), MsgKVs((delete,)), MsgSyncStatus(SyncStatus.IN_SYNC), MsgPing(stamp)]


def test_pong_leaves_zero_time_out() -> None:
    stamp = GoTime.from_unix_ns(1_700_000_000 * 10**9 + 5, offset=0)
    data = Encoder(REGISTRY).encode(Envelope(MsgPong(ping_timestamp=stamp)), ENVELOPE)
    assert data.endswith(h("01 0f") + stamp.marshal_binary() + h("00 00"))
    assert decode_all(data) == [Envelope(MsgPong(ping_timestamp=stamp))]


# --- decoding rules


def test_split_messages_decode_fed_byte_by_byte() -> None:
    dec = Decoder(REGISTRY, ENVELOPE)
    values = []
    for i in range(len(MODERN_HELLO)):
        dec.feed(MODERN_HELLO[i:i + 1])
        v = dec.next_value()
        if v is not NEED_DATA:
            values.append((i, v))
    assert values == [(len(MODERN_HELLO) - 1, Envelope(HELLO))]


def test_standalone_definitions_before_the_value() -> None:
    enc = Encoder(REGISTRY)
    prefix = enc.define([ENVELOPE, MSG_CLIENT_HELLO])
    value = enc.encode(Envelope(HELLO), ENVELOPE)
    assert value[0] == len(value) - 1  # one message: no definitions left to send
    assert decode_all(prefix + value) == [Envelope(HELLO)]


def test_frozen_encoder_refuses_undefined_types() -> None:
    enc = Encoder(REGISTRY)
    enc.define([ENVELOPE])
    enc.freeze()
    with pytest.raises(GobError, match="not defined"):
        enc.encode(Envelope(MsgACK()), ENVELOPE)


def _remote_hello(fields: list[Field]) -> bytes:
    """An Envelope holding a MsgClientHello as a peer with other fields would send it."""
    remote = Struct("MsgClientHello", fields, _Obj)
    registry = Registry()
    registry.register(HELLO_NAME, remote, _Obj)
    return Encoder(registry).encode(Envelope(_Obj({f.attr: v for f, v in zip(
        fields, ["host", 7, True, "felix"], strict=False)})), ENVELOPE)


def test_unknown_remote_fields_are_skipped_and_missing_ones_default() -> None:
    data = _remote_hello([Field("Hostname", "a", STRING), Field("Extra", "b", INT),
                          Field("SupportsModernPolicyKeys", "c", BOOL),
                          Field("SyncerType", "d", STRING)])
    [envelope] = decode_all(data)
    assert envelope.message == MsgClientHello(hostname="host", syncer_type="felix",
                                              supports_modern_policy_keys=True)


def test_no_matching_field_is_an_error() -> None:
    data = _remote_hello([Field("Nothing", "a", STRING), Field("Else", "b", INT)])
    with pytest.raises(GobError, match="no fields matched"):
        decode_all(data)


def test_wrong_field_type_is_an_error() -> None:
    data = _remote_hello([Field("Hostname", "a", STRING), Field("ClientConnID", "b", INT)])
    with pytest.raises(GobError, match="ClientConnID"):
        decode_all(data)


def test_value_out_of_range_for_uint8() -> None:
    remote = Struct("MsgSyncStatus", [Field("SyncStatus", "s", UINT)], _Obj)
    registry = Registry()
    registry.register(REGISTERED_PREFIX + "MsgSyncStatus", remote, _Obj)
    data = Encoder(registry).encode(Envelope(_Obj(s=300)), ENVELOPE)
    with pytest.raises(GobError, match="out of range"):
        decode_all(data)


@pytest.mark.parametrize(("desc", "data"), [
    ("id below 64", h("05 7d 02 01 00 00")),
    ("duplicate id", ENVELOPE_DEF + ENVELOPE_DEF),
    ("unregistered name", ENVELOPE_DEF + h("09 ff 80 01 04", '"nope"', "00")),
    ("trailing bytes", ENVELOPE_DEF + h("04 ff 80 00 00")),
    ("empty message", h("00")),
    ("unknown type id", h("03 ff 90 00")),
    ("top-level int into Envelope", h("03 04 00 54")),
    ("definition with two kinds",
     h("12 7f 02 01 01 01", '"a"', "00 01 0c 00 01 01 01 01", '"b"', "00 00 00")),
    ("message length over 8 bytes", h("f7 01 02 03 04 05 06 07 08 09")),
])
def test_malformed_envelope_streams(desc: str, data: bytes) -> None:
    with pytest.raises(GobError):
        decode_all(data)


@pytest.mark.parametrize(("desc", "data"), [
    ("non-zero singleton delta", h("03 04 01 02")),
    ("string past the end", h("05 0c 00 09 61 62")),
    ("uint wider than 8 bytes", h("0b 06 00 f7 01 02 03 04 05 06 07 08 09")),
])
def test_malformed_singletons(desc: str, data: bytes) -> None:
    with pytest.raises(GobError):
        decode_all(data, root=None)


def test_oversized_message_fails_before_its_bytes_arrive() -> None:
    dec = Decoder(REGISTRY, ENVELOPE, max_message_size=1 << 20)
    dec.feed(h("fd 10 00 01"))  # announces 1 MiB + 1
    with pytest.raises(GobError, match="exceeds"):
        dec.next_value()
    with pytest.raises(GobError):  # the error sticks
        dec.next_value()


def test_huge_slice_count_is_refused_without_allocating() -> None:
    from trio_typha.protocols.gob.messages import MSG_KVS
    prefix = Encoder(REGISTRY).define([ENVELOPE, MSG_KVS])  # MsgKVs gets id 65
    name = (REGISTERED_PREFIX + "MsgKVs").encode()
    body = (h("ff 80 01") + encode_uint(len(name)) + name + encode_int(65) + h("0a 01")
            + encode_uint(1 << 60))
    with pytest.raises(GobError, match="larger than the input"):
        decode_all(prefix + encode_uint(len(body)) + body)


def test_recursive_remote_type_decodes_dynamically() -> None:
    node = Struct("Node", [], dict)
    node.fields = (Field("Name", "name", STRING), Field("Kids", "kids", Slice("[]Node", node)))
    tree = _Obj(name="a", kids=[_Obj(name="b", kids=[]), _Obj(name="c", kids=[
        _Obj(name="d", kids=[])])])
    data = Encoder(Registry()).encode(tree, node)
    [value] = decode_all(data, root=None, registry=Registry())
    assert value == {"Name": "a", "Kids": [{"Name": "b"}, {"Name": "c", "Kids": [{"Name": "d"}]}]}


def test_deep_nesting_is_bounded() -> None:
    node = Struct("Node", [], dict)
    node.fields = (Field("Kids", "kids", Slice("[]Node", node)),)
    tree = _Obj(kids=[])
    for _ in range(200):
        tree = _Obj(kids=[tree])
    data = Encoder(Registry()).encode(tree, node)
    with pytest.raises(GobError, match="too deeply"):
        decode_all(data, root=None, registry=Registry())


def test_non_string_revision_becomes_go_text() -> None:
    remote = Struct("SerializedUpdate", [
        Field("Key", "key", STRING), Field("Revision", "rev", INTERFACE)], _Obj)
    kvs = Struct("MsgKVs", [Field("KVs", "kvs", Slice("[]syncproto.SerializedUpdate", remote))],
                 _Obj)
    registry = Registry()
    registry.register(REGISTERED_PREFIX + "MsgKVs", kvs, _Obj)
    data = Encoder(registry).encode(Envelope(_Obj(kvs=[
        _Obj(key="/a", rev=Named("int64", -7)), _Obj(key="/b", rev=True),
        _Obj(key="/c", rev=b"\x01\x02"), _Obj(key="/d", rev=None)])), ENVELOPE)
    [envelope] = decode_all(data)
    assert [u.revision for u in envelope.message.kvs] == ["-7", "true", "[1 2]", "<nil>"]


def test_unconsumed_bytes_are_handed_back() -> None:
    dec = Decoder(REGISTRY, ENVELOPE)
    dec.feed(MODERN_HELLO + b"\x05\x01")  # and the start of a message still to come
    assert dec.next_value() == Envelope(HELLO)
    assert dec.next_value() is NEED_DATA
    assert dec.unconsumed() == b"\x05\x01"
