"""The Python Typha client: its sans-IO core against scripted servers, and its deadlines."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_typha.client.typha import (
    Connected,
    Disconnected,
    TyphaClient,
    TyphaDisconnected,
    parse_address,
)
from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.protocols.gob import encode_once
from trio_typha.protocols.gob.client_session import (
    ClientSession,
    DecoderRestarted,
    KVsReceived,
    PingAnswered,
    ServerHelloReceived,
    SyncStatusReceived,
    TyphaProtocolError,
)
from trio_typha.protocols.gob.codec import NEED_DATA, Decoder
from trio_typha.protocols.gob.gotime import GoTime
from trio_typha.protocols.gob.messages import (
    ENVELOPE,
    REGISTRY,
    MsgACK,
    MsgClientHello,
    MsgKVs,
    MsgPing,
    MsgPong,
    MsgServerHello,
    MsgSyncStatus,
)

HELLO = encode_once.STREAM_PREFIX + encode_once.encode(MsgServerHello("v", "felix", True, 1))
SNAPSHOT = tuple(SerializedUpdate(f"/k{i:04d}", b"v", str(i)) for i in range(2500))
STAMP = GoTime.from_unix_ns(1_700_000_000 * 10**9 + 5, 0)


def sent_messages(core: ClientSession) -> list[object]:
    dec = Decoder(REGISTRY, ENVELOPE)
    dec.feed(core.data_to_send())
    out = []
    while (v := dec.next_value()) is not NEED_DATA:
        out.append(v.message)
    return out


def test_hello_announces_snappy_or_not() -> None:
    [hello] = sent_messages(ClientSession(syncer_type="bgp", hostname="h", conn_id=5))
    assert hello == MsgClientHello("h", "", "", "bgp", True, ("snappy",), True, 5)
    [legacy] = sent_messages(ClientSession(compression=False))
    assert not legacy.supports_decoder_restart and legacy.supported_compression_algorithms == ()
    assert legacy.supports_modern_policy_keys


def test_whole_compressed_session_even_when_everything_arrives_at_once() -> None:
    # Bytes after a restart that were read along with it are carried over to the new layer.
    core = ClientSession()
    stream = (HELLO + encode_once.RESTART_FOR_SNAPSHOT + encode_once.build_compressed_snapshot(SNAPSHOT)
              + encode_once.SNAPPY_STREAM_START + encode_once.STATUS_CHUNKS[SyncStatus.IN_SYNC]
              + encode_once.snappy.chunks(encode_once.encode(MsgPing(STAMP))))
    events = core.receive_data(stream)
    assert isinstance(events[0], ServerHelloReceived)
    assert [e.algorithm for e in events if isinstance(e, DecoderRestarted)] == ["snappy"] * 2
    kvs = [u for e in events if isinstance(e, KVsReceived) for u in e.updates]
    assert tuple(kvs) == SNAPSHOT
    assert events[-2:] == [SyncStatusReceived(SyncStatus.IN_SYNC), PingAnswered(STAMP)]
    assert sent_messages(core)[1:] == [MsgACK(), MsgACK(), MsgPong(STAMP)]


def test_byte_at_a_time() -> None:
    core = ClientSession()
    stream = (HELLO + encode_once.RESTART_FOR_SNAPSHOT
              + encode_once.build_compressed_snapshot(SNAPSHOT[:30]) + encode_once.SNAPPY_STREAM_START
              + encode_once.STATUS_CHUNKS[SyncStatus.IN_SYNC])
    events = []
    for i in range(len(stream)):
        events += core.receive_data(stream[i:i + 1])
    assert sum(len(e.updates) for e in events if isinstance(e, KVsReceived)) == 30
    assert events[-1] == SyncStatusReceived(SyncStatus.IN_SYNC)


@pytest.mark.parametrize(("stream", "error"), [
    (encode_once.STREAM_PREFIX + encode_once.STATUS[SyncStatus.IN_SYNC], "not MsgServerHello"),
    (encode_once.STREAM_PREFIX + encode_once.encode(MsgServerHello("v", "felix", False, 1)),
     "node resource updates"),
    (encode_once.STREAM_PREFIX + encode_once.encode(MsgServerHello("v", "bgp", True, 1)), "syncer"),
    (HELLO + encode_once.encode(MsgServerHello("v", "felix", True, 1)), "second MsgServerHello"),
    (HELLO + b"\x03\xff\xff\x00", "undecodable"),
    (HELLO + encode_once.RESTART_FOR_SNAPSHOT + b"\x00\x01\x02\x03garbage", "undecodable"),
])
def test_protocol_errors(stream: bytes, error: str) -> None:
    with pytest.raises(TyphaProtocolError, match=error):
        ClientSession().receive_data(stream)


def test_restart_to_a_legacy_client_is_an_error() -> None:
    with pytest.raises(TyphaProtocolError, match="restart"):
        ClientSession(compression=False).receive_data(HELLO + encode_once.RESTART_FOR_SNAPSHOT)


def test_empty_syncer_type_is_felix_both_ways() -> None:
    core = ClientSession(syncer_type="")
    assert isinstance(core.receive_data(encode_once.STREAM_PREFIX + encode_once.encode(
        MsgServerHello("v", "", True, 1)))[0], ServerHelloReceived)


def test_ignored_messages() -> None:
    core = ClientSession()
    events = core.receive_data(HELLO + encode_once.encode(MsgKVs(())) + encode_once.STATUS[SyncStatus(0)])
    assert events[1:] == [KVsReceived(()), SyncStatusReceived(SyncStatus.WAIT_FOR_DATASTORE)]


def test_parse_address() -> None:
    assert parse_address("10.0.0.1:5473") == ("10.0.0.1", 5473)
    assert parse_address("[::1]:99") == ("::1", 99)
    assert parse_address("typha") == ("typha", 5473)
    assert parse_address("::1") == ("::1", 5473)


async def test_read_timeout_disconnects(autojump_clock: trio.abc.Clock) -> None:
    client_side, server_side = trio.testing.memory_stream_pair()

    async def opened() -> trio.abc.Stream:
        return client_side

    client = TyphaClient("mem", open_stream=opened, read_timeout=30)
    await server_side.send_all(HELLO)
    start = trio.current_time()
    events = [e async for e in client]
    assert isinstance(events[0], Connected) and isinstance(events[-1], Disconnected)
    assert "timed out" in events[-1].reason
    assert trio.current_time() - start >= 30
    assert client.status is SyncStatus.WAIT_FOR_DATASTORE


async def test_batches_raise_when_the_connection_ends(autojump_clock: trio.abc.Clock) -> None:
    client_side, server_side = trio.testing.memory_stream_pair()

    async def opened() -> trio.abc.Stream:
        return client_side

    async def server() -> None:
        await server_side.receive_some()  # the hello
        await server_side.send_all(HELLO + encode_once.encode(MsgKVs(SNAPSHOT[:3]))
                                   + encode_once.STATUS[SyncStatus.IN_SYNC])
        await server_side.aclose()

    client = TyphaClient("mem", open_stream=opened, compression=False)
    batches = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        with pytest.raises(TyphaDisconnected, match="closed"):
            async for batch in client.batches():
                batches.append(batch)
    assert [len(b.updates) for b in batches] == [3, 0]
    assert not batches[0].after_snapshot and batches[1].status is SyncStatus.IN_SYNC
    assert batches[1].after_snapshot and len(client.kvs) == 3


async def test_status_message_of_zero_is_reported(autojump_clock: trio.abc.Clock) -> None:
    client_side, server_side = trio.testing.memory_stream_pair()

    async def opened() -> trio.abc.Stream:
        return client_side

    await server_side.send_all(HELLO + encode_once.encode(MsgSyncStatus(SyncStatus.RESYNC_IN_PROGRESS)))
    async with TyphaClient("mem", open_stream=opened) as client:
        await client.wait_for_status(SyncStatus.RESYNC_IN_PROGRESS)
        assert client.status is SyncStatus.RESYNC_IN_PROGRESS
