"""Fuzzing the decoders: any input ends in a value, a wait for more, or a clean error."""

from __future__ import annotations

import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.gob import encode_once
from trio_typha.protocols.gob.client_session import ClientSession, TyphaProtocolError
from trio_typha.protocols.gob.codec import (
    NEED_DATA,
    Decoder,
    Encoder,
    Field,
    GobError,
    Slice,
    Struct,
)
from trio_typha.protocols.gob.gotime import GoTime
from trio_typha.protocols.gob.messages import (
    ENVELOPE,
    REGISTERED_PREFIX,
    REGISTRY,
    SERIALIZED_UPDATE,
    Envelope,
    MsgACK,
    MsgClientHello,
    MsgKVs,
    MsgPing,
    MsgPong,
    MsgServerHello,
    MsgSyncStatus,
    make_registry,
)
from trio_typha.protocols.gob.session import Close, ServerSession
from trio_typha.sessions.settings import ServerSettings

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
STAMP = GoTime.from_unix_ns(1_700_000_000 * 10**9 + 5, offset=0)


def _client_stream() -> bytes:
    enc = Encoder(REGISTRY)
    msgs = [MsgClientHello("n", "i", "v", "felix", True, ("snappy",), True, 9), MsgACK(),
            MsgACK(), MsgPong(STAMP), MsgPong(STAMP, STAMP)]
    return b"".join(enc.encode(Envelope(m), ENVELOPE) for m in msgs)


def _server_stream() -> bytes:
    updates = tuple(SerializedUpdate(f"/calico/v1/k{i}", b"v" * i, str(i), "rv" if i % 2 else "",
                                     i * 1000, UpdateType(1 + i % 3)) for i in range(20))
    return (encode_once.STREAM_PREFIX + encode_once.encode(MsgServerHello("v", "felix", True, 1))
            + encode_once.encode(MsgKVs(updates)) + encode_once.STATUS[SyncStatus.IN_SYNC]
            + encode_once.encode(MsgPing(STAMP)))


CLIENT_STREAM = _client_stream()
SERVER_STREAM = _server_stream()
SNAPSHOT = encode_once.build_compressed_snapshot(tuple(
    SerializedUpdate(f"/calico/v1/s{i:04d}", b"x" * (i % 50), str(i)) for i in range(300)))


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7f, 0x80, 0xf8, 0xf7, 0xff]))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 16))]
        else:
            del data[at:]
    return bytes(data)


def _chunks(data: bytes, sizes: list[int]) -> list[bytes]:
    out, i = [], 0
    for n in sizes:
        if i >= len(data):
            break
        out.append(data[i:i + n])
        i += n
    out.append(data[i:])
    return out


def _drain(data: bytes, sizes: list[int], root: object) -> None:
    dec = Decoder(REGISTRY, root)  # type: ignore[arg-type]
    try:
        for piece in _chunks(data, sizes):
            dec.feed(piece)
            while dec.next_value() is not NEED_DATA:
                pass
    except GobError:
        pass


SIZES = st.lists(st.integers(1, 64), max_size=20)


@FUZZ
@given(st.binary(max_size=2000), SIZES)
def test_random_bytes(data: bytes, sizes: list[int]) -> None:
    _drain(data, sizes, ENVELOPE)
    _drain(data, sizes, None)


@FUZZ
@given(st.one_of(mutated(CLIENT_STREAM), mutated(SERVER_STREAM)), SIZES)
def test_mutated_streams(data: bytes, sizes: list[int]) -> None:
    _drain(data, sizes, ENVELOPE)
    _drain(data, sizes, None)


@FUZZ
@given(st.one_of(st.binary(max_size=500), mutated(CLIENT_STREAM)), SIZES)
def test_server_session_only_ever_closes(data: bytes, sizes: list[int]) -> None:
    session = ServerSession(settings=ServerSettings(), syncer_types=("felix",),
                            server_version="v", conn_id=1, now=0.0)
    for piece in _chunks(data, sizes):
        for action in session.receive_data(piece, now=0.0):
            assert not isinstance(action, Close) or action.reason


@FUZZ
@given(st.one_of(mutated(SERVER_STREAM),
                 mutated(encode_once.STREAM_PREFIX + encode_once.encode(MsgServerHello("v", "felix", True, 1))
                         + encode_once.RESTART_FOR_SNAPSHOT + SNAPSHOT)), SIZES)
def test_client_session_only_raises_protocol_errors(data: bytes, sizes: list[int]) -> None:
    core = ClientSession()
    try:
        for piece in _chunks(data, sizes):
            core.receive_data(piece)
    except TyphaProtocolError:
        pass


def test_adversarial_input_is_bounded_in_memory() -> None:
    # Length prefixes, counts and definitions claiming far more than was sent.
    evil = (b"\xfc\x0f\xff\xff\xff" + SERVER_STREAM[:200] + b"\xf8" + b"\xff" * 8) * 2000
    tracemalloc.start()
    try:
        _drain(evil, [4096] * 400, ENVELOPE)
        _drain(bytes(b ^ 0x55 for b in SERVER_STREAM) * 200, [1000] * 2000, None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


_KEYS = st.text(max_size=60)
_UPDATES = st.builds(
    SerializedUpdate, _KEYS, st.one_of(st.none(), st.binary(min_size=1, max_size=300)),
    st.text(max_size=20), st.text(max_size=20),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), st.sampled_from(UpdateType))

# The same struct without its hand-written codecs: the generic path is the reference.
_GENERIC_UPDATE = Struct("SerializedUpdate", SERIALIZED_UPDATE.fields, SERIALIZED_UPDATE.make)
_GENERIC_REGISTRY = make_registry()
_GENERIC_REGISTRY.register(REGISTERED_PREFIX + "MsgKVs", Struct("MsgKVs", [
    Field("KVs", "kvs", Slice("[]syncproto.SerializedUpdate", _GENERIC_UPDATE))], MsgKVs), MsgKVs)


@FUZZ
@given(st.lists(_UPDATES, max_size=30))
def test_kvs_round_trip_and_fast_path_equals_generic(updates: list[SerializedUpdate]) -> None:
    fast, generic = bytearray(), bytearray()
    for u in updates:
        SERIALIZED_UPDATE.fast_encode(fast, u)  # type: ignore[misc]
        Encoder(REGISTRY)._fn(_GENERIC_UPDATE)(generic, u)
    assert fast == generic
    data = encode_once.STREAM_PREFIX + encode_once.encode(MsgKVs(tuple(updates)))
    for registry in (REGISTRY, _GENERIC_REGISTRY):
        dec = Decoder(registry, ENVELOPE)
        dec.feed(data)
        assert dec.next_value() == Envelope(MsgKVs(tuple(updates)))


def test_status_round_trip() -> None:
    for status in SyncStatus:
        dec = Decoder(REGISTRY, ENVELOPE)
        dec.feed(encode_once.STREAM_PREFIX + encode_once.STATUS[status])
        assert dec.next_value() == Envelope(MsgSyncStatus(status))
