"""The trio shell over in-memory streams, on trio's autojump clock."""

from __future__ import annotations

import functools
import logging

import pytest
import trio
import trio.testing

from trio_typha.cache.feed import CacheFeed
from trio_typha.client.typha import Connected, Disconnected, KVsReceived, TyphaClient
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.gob import encode_once, snappy
from trio_typha.protocols.gob.client_session import (
    ClientSession,
    DecoderRestarted,
    PingAnswered,
    SyncStatusReceived,
)
from trio_typha.protocols.gob.client_session import (
    KVsReceived as CoreKVs,
)
from trio_typha.protocols.gob.codec import Encoder
from trio_typha.protocols.gob.messages import (
    ENVELOPE,
    REGISTRY,
    Envelope,
    MsgClientHello,
    MsgSyncStatus,
)
from trio_typha.protocols.gob.shell import serve_gob_connection
from trio_typha.sessions.context import ServerContext
from trio_typha.sessions.settings import ServerSettings

LOGGER = "trio_typha.protocols.gob.shell"


@pytest.fixture(autouse=True)
def _log_connection_closes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)


def make_ctx(kvs: int = 250, status: SyncStatus = SyncStatus.IN_SYNC,
             **settings: float) -> ServerContext:
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    feeds["felix"].apply([SerializedUpdate(f"/calico/v1/k{i:05d}", f"v{i}".encode(), str(i))
                          for i in range(kvs)])
    feeds["felix"].set_status(status)
    return ServerContext(feeds=feeds, settings=ServerSettings(**settings), version="v-test")


def connect(nursery: trio.Nursery, ctx: ServerContext, *, lockstep: bool = False,
            prefix: bytes = b"") -> trio.abc.Stream:
    pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
    server_side, client_side = pair()
    nursery.start_soon(functools.partial(serve_gob_connection, server_side, ctx, prefix=prefix,
                                         peer="mem"))
    return client_side


def client_for(stream: trio.abc.Stream, **kwargs: object) -> TyphaClient:
    async def opened() -> trio.abc.Stream:
        return stream
    return TyphaClient("mem", open_stream=opened, hostname="h1", **kwargs)


def hello_bytes(hello: MsgClientHello) -> bytes:
    return Encoder(REGISTRY).encode(Envelope(hello), ENVELOPE)


async def read_to_eof(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data


async def test_handshake_timeout_closes_silently(autojump_clock: trio.abc.Clock,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx(handshake_timeout=10)
    async with trio.open_nursery() as nursery:
        client = connect(nursery, ctx)
        start = trio.current_time()
        await trio.sleep(1)
        assert len(ctx.sessions) == 1
        assert await read_to_eof(client) == b""
        assert trio.current_time() - start >= 10
    assert ctx.sessions == {}
    assert "handshake timeout" in caplog.text


@pytest.mark.parametrize(("first", "reason"), [
    (MsgClientHello(syncer_type="garbage", supports_modern_policy_keys=True),
     "unknown syncer type"),
    (MsgClientHello(syncer_type="felix", supports_decoder_restart=True,
                    supported_compression_algorithms=("snappy",)), "modern policy keys"),
    (MsgSyncStatus(SyncStatus.IN_SYNC), "first message was MsgSyncStatus"),
])
async def test_rejected_hello_closes_without_reply(autojump_clock: trio.abc.Clock,
                                                   caplog: pytest.LogCaptureFixture,
                                                   first: object, reason: str) -> None:
    ctx = make_ctx()
    async with trio.open_nursery() as nursery:
        client = connect(nursery, ctx)
        await client.send_all(Encoder(REGISTRY).encode(Envelope(first), ENVELOPE))
        assert await read_to_eof(client) == b""
    assert reason in caplog.text


async def test_garbage_closes_the_connection(autojump_clock: trio.abc.Clock,
                                             caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx()
    async with trio.open_nursery() as nursery:
        client = connect(nursery, ctx)
        await client.send_all(b"\x05\x7d\x02\x01\x00\x00GET / HTTP/1.1\r\n")
        assert await read_to_eof(client) == b""
    assert "bad data from client" in caplog.text
    assert "Internal error" not in caplog.text


async def test_listener_prefix_is_the_start_of_the_stream(autojump_clock: trio.abc.Clock,
                                                          ) -> None:
    ctx = make_ctx(kvs=3)
    data = hello_bytes(MsgClientHello(syncer_type="felix", supports_modern_policy_keys=True))
    async with trio.open_nursery() as nursery:
        stream = connect(nursery, ctx, prefix=data[:3])
        core = ClientSession(compression=False)
        core.data_to_send()  # the hello: this test sends its own bytes
        await stream.send_all(data[3:])
        events: list[object] = []
        while not any(isinstance(e, SyncStatusReceived) for e in events):
            events += core.receive_data(await stream.receive_some())
        assert sum(len(e.updates) for e in events if isinstance(e, CoreKVs)) == 3
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("compression", [True, False])
async def test_snapshot_status_and_deltas(autojump_clock: trio.abc.Clock,
                                          compression: bool) -> None:
    ctx = make_ctx(kvs=2500)
    feed = ctx.feeds["felix"]
    async with trio.open_nursery() as nursery:
        async with client_for(connect(nursery, ctx), compression=compression) as client:
            batches: list[int] = []
            restarts = 0
            async for event in client:
                if isinstance(event, KVsReceived):
                    batches.append(len(event.updates))
                if isinstance(event, DecoderRestarted):
                    restarts += 1
                if isinstance(event, SyncStatusReceived):
                    assert event.status is SyncStatus.IN_SYNC
                    break
            assert restarts == (2 if compression else 0)
            assert max(batches) == (1000 if compression else 100)
            assert client.kvs == {u.key: u for u in feed.latest.snapshot()}
            info = next(iter(ctx.sessions.values()))
            assert (info.hostname, info.syncer_type, info.protocol) == ("h1", "felix",
                                                                         "typha-gob")
            feed.set_status(SyncStatus.RESYNC_IN_PROGRESS)
            feed.apply([SerializedUpdate("/calico/v1/new", b"n", "1"),
                        SerializedUpdate("/calico/v1/k00000", None, "2",
                                         update_type=UpdateType.DELETED)])
            feed.set_status(SyncStatus.IN_SYNC)
            statuses = []
            async for event in client:
                if isinstance(event, SyncStatusReceived):
                    statuses.append(event.status)
                    if event.status is SyncStatus.IN_SYNC:
                        break
            assert statuses == [SyncStatus.RESYNC_IN_PROGRESS, SyncStatus.IN_SYNC]
            assert client.kvs == {u.key: u for u in feed.latest.snapshot()}
        nursery.cancel_scope.cancel()


async def test_nothing_is_sent_between_a_restart_and_its_ack(autojump_clock: trio.abc.Clock,
                                                            ) -> None:
    ctx = make_ctx(kvs=1500, pong_timeout=60, ping_interval=10)
    async with trio.open_nursery() as nursery:
        stream = connect(nursery, ctx)
        core = ClientSession()
        await stream.send_all(core.data_to_send())

        async def until_restart() -> None:
            while not any(isinstance(e, DecoderRestarted)
                          for e in core.receive_data(await stream.receive_some())):
                pass

        await until_restart()  # ServerHello + MsgDecoderRestart#1
        with trio.move_on_after(30):
            extra = await stream.receive_some()
            pytest.fail(f"server sent {len(extra)} bytes before ACK#1")
        await stream.send_all(core.data_to_send())  # ACK#1
        first = await stream.receive_some()
        assert first.startswith(snappy.STREAM_IDENTIFIER)
        core.receive_data(first)
        if core.restarts < 2:
            await until_restart()  # the compressed snapshot ends with restart#2
        with trio.move_on_after(30):
            extra = await stream.receive_some()
            pytest.fail(f"server sent {len(extra)} bytes before ACK#2")
        await stream.send_all(core.data_to_send())  # ACK#2
        start = await stream.receive_some()
        assert start.startswith(encode_once.SNAPPY_STREAM_START)
        nursery.cancel_scope.cancel()


async def test_pong_timeout(autojump_clock: trio.abc.Clock,
                            caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx(ping_interval=1, pong_timeout=5)
    async with trio.open_nursery() as nursery:
        stream = connect(nursery, ctx)
        core = ClientSession()
        await stream.send_all(core.data_to_send())
        pings = 0
        streaming_at = None
        while data := await stream.receive_some():
            events = core.receive_data(data)
            reply = core.data_to_send()
            if any(isinstance(e, DecoderRestarted) for e in events):
                await stream.send_all(reply)  # ACKs yes, pongs never
                if core.restarts == 2:
                    streaming_at = trio.current_time()
            pings += sum(isinstance(e, PingAnswered) for e in events)
        assert streaming_at is not None
        assert trio.current_time() - streaming_at >= 5
        assert pings >= 3
    assert "no MsgPong within 5" in caplog.text


async def test_pongs_keep_a_client_connected(autojump_clock: trio.abc.Clock) -> None:
    ctx = make_ctx(ping_interval=1, pong_timeout=5)
    async with trio.open_nursery() as nursery, \
            client_for(connect(nursery, ctx)) as client:
        await client.wait_for_status()
        with trio.move_on_after(60):
            async for event in client:
                assert not isinstance(event, Disconnected)
        assert client.pings >= 50
        nursery.cancel_scope.cancel()


async def test_ack_timeout(autojump_clock: trio.abc.Clock,
                           caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx(ping_interval=1, pong_timeout=5)
    async with trio.open_nursery() as nursery:
        stream = connect(nursery, ctx)
        await stream.send_all(ClientSession().data_to_send())
        start = trio.current_time()
        data = await read_to_eof(stream)
        assert data.endswith(encode_once.RESTART_FOR_SNAPSHOT)
        assert trio.current_time() - start >= 5
    assert "no MsgACK" in caplog.text


async def test_write_timeout_drops_a_client_that_does_not_read(
        autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx(write_timeout=20, ping_interval=100, pong_timeout=1000)
    async with trio.open_nursery() as nursery:
        stream = connect(nursery, ctx, lockstep=True)
        await stream.send_all(hello_bytes(MsgClientHello(syncer_type="felix",
                                                         supports_modern_policy_keys=True)))
        await trio.sleep(100)
        assert ctx.sessions == {}
    assert "write timed out after 20" in caplog.text


async def test_client_that_falls_behind_is_dropped_after_grace(
        autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx(kvs=10, max_fall_behind=5, new_client_fall_behind_grace=30,
                   write_timeout=1000, ping_interval=1000, pong_timeout=10_000)
    feed = ctx.feeds["felix"]
    async with trio.open_nursery() as nursery:
        stream = connect(nursery, ctx, lockstep=True)
        core = ClientSession(compression=False)
        await stream.send_all(core.data_to_send())

        async def publish() -> None:
            for i in range(1000):
                feed.apply([SerializedUpdate(f"/calico/v1/churn{i}", b"x" * 2000, str(i))])
                await trio.sleep(0.5)
        nursery.start_soon(publish)
        # Read slowly: one receive every 3 s.
        while data := await stream.receive_some(4096):
            core.receive_data(data)
            await trio.sleep(3)
        nursery.cancel_scope.cancel()
    assert "tolerated during its grace period" in caplog.text
    assert "fell behind" in caplog.text


async def test_cancel_scope_closes_one_session_and_draining_closes_none(
        autojump_clock: trio.abc.Clock) -> None:
    """Typha drains gob clients one at a time (the daemon cancels them); draining alone
    must not drop every client at once."""
    ctx = make_ctx()
    async with trio.open_nursery() as nursery:
        first = client_for(connect(nursery, ctx))
        second = client_for(connect(nursery, ctx))
        await first.wait_for_status()
        await second.wait_for_status()
        assert len(ctx.sessions) == 2
        [one, _] = ctx.sessions.values()
        one.cancel_scope.cancel()  # rebalancing drops one connection
        await trio.sleep(1)
        assert len(ctx.sessions) == 1
        ctx.draining.set()
        await trio.sleep(5)
        assert len(ctx.sessions) == 1
        [other] = ctx.sessions.values()
        other.cancel_scope.cancel()
        await trio.sleep(1)
        assert ctx.sessions == {}
    for client in (first, second):
        events = [e async for e in client]
        assert isinstance(events[-1], Disconnected)


async def test_clients_at_one_point_share_the_snapshot_bytes(autojump_clock: trio.abc.Clock,
                                                             ) -> None:
    ctx = make_ctx(kvs=3000)
    feed = ctx.feeds["felix"]
    async with trio.open_nursery() as nursery:
        clients = [client_for(connect(nursery, ctx)) for _ in range(3)]
        async with trio.open_nursery() as inner:
            for c in clients:
                inner.start_soon(c.wait_for_status)
        crumb = feed.latest
        slot = crumb.memo(("build-once", "gob", "snappy"),
                          lambda _: pytest.fail("snapshot not memoized"))
        assert slot.value == encode_once.build_compressed_snapshot(crumb.snapshot())
        for c in clients:
            assert len(c.kvs) == 3000
            assert isinstance(c.server_hello, object)
        nursery.cancel_scope.cancel()


async def test_reconnecting_client(autojump_clock: trio.abc.Clock) -> None:
    ctx = make_ctx(kvs=5)
    streams: list[trio.abc.Stream] = []

    async def opened() -> trio.abc.Stream:
        streams.append(connect(nursery, ctx))
        return streams[-1]

    async with trio.open_nursery() as nursery:
        client = TyphaClient("mem", open_stream=opened, reconnect=True)
        await client.wait_for_status()
        next(iter(ctx.sessions.values())).cancel_scope.cancel()
        seen = []
        async for event in client:
            seen.append(type(event))
            if isinstance(event, Connected) and len(streams) == 2:
                break
        assert seen[0] is Disconnected
        await client.wait_for_status()
        assert len(client.kvs) == 5
        await client.aclose()
        nursery.cancel_scope.cancel()
