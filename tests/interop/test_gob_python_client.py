"""The Python Typha client against the trio server over real loopback sockets (and TLS)."""

from __future__ import annotations

import functools
import ssl

import pytest
import trio
import trustme

from trio_typha.cache.feed import CacheFeed
from trio_typha.client.typha import (
    Connected,
    Disconnected,
    KVsReceived,
    PingAnswered,
    TyphaClient,
)
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.gob.shell import serve_gob_connection
from trio_typha.sessions.context import ServerContext
from trio_typha.sessions.settings import ServerSettings


def make_ctx(kvs: int = 1200) -> ServerContext:
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    for feed in feeds.values():
        feed.set_status(SyncStatus.IN_SYNC)
    feeds["felix"].apply([SerializedUpdate(f"/calico/v1/k{i:05d}", b"value-%d" % i, str(i))
                          for i in range(kvs)])
    return ServerContext(feeds=feeds, settings=ServerSettings(ping_interval=0.1),
                         version="v-test")


async def serve(nursery: trio.Nursery, ctx: ServerContext,
                tls: ssl.SSLContext | None = None) -> int:
    async def handler(stream: trio.SocketStream) -> None:
        if tls is None:
            await serve_gob_connection(stream, ctx, peer="tcp")
            return
        wrapped = trio.SSLStream(stream, tls, server_side=True)
        try:
            await wrapped.do_handshake()
        except trio.BrokenResourceError:
            await trio.aclose_forcefully(stream)
            return
        await serve_gob_connection(wrapped, ctx, peer="tls")

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0,
                                                      host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


def expected(ctx: ServerContext) -> dict[str, bytes | None]:
    return {u.key: u.value for u in ctx.feeds["felix"].latest.snapshot()}


def values(client: TyphaClient) -> dict[str, bytes | None]:
    return {k: u.value for k, u in client.kvs.items()}


@pytest.mark.parametrize("compression", [True, False])
async def test_snapshot_deltas_and_pings_over_tcp(compression: bool) -> None:
    ctx = make_ctx()
    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx)
        async with TyphaClient(("127.0.0.1", port), compression=compression) as client:
            await client.wait_for_status()
            assert values(client) == expected(ctx)
            ctx.feeds["felix"].apply([
                SerializedUpdate("/calico/v1/k00000", None, "x", update_type=UpdateType.DELETED),
                SerializedUpdate("/calico/v1/extra", b"e", "y")])
            deltas = 0
            async for event in client:
                if isinstance(event, KVsReceived):
                    deltas += len(event.updates)
                if deltas == 2 and client.pings >= 2:
                    break
            assert values(client) == expected(ctx)
            assert client.server_hello is not None
            assert client.server_hello.version == "v-test"
        nursery.cancel_scope.cancel()


async def test_many_clients_share_one_server() -> None:
    ctx = make_ctx(kvs=2000)
    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx)
        clients = [TyphaClient(("127.0.0.1", port), compression=i % 2 == 0, hostname=f"n{i}")
                   for i in range(16)]
        async with trio.open_nursery() as joining:
            for c in clients:
                joining.start_soon(c.wait_for_status)
        assert len(ctx.sessions) == 16
        ctx.feeds["felix"].apply([SerializedUpdate("/calico/v1/late", b"l", "z")])
        for c in clients:
            while "/calico/v1/late" not in c.kvs:
                await c.__anext__()
            assert values(c) == expected(ctx)
            await c.aclose()
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("typha").configure_cert(server)
    ca.configure_trust(server)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client)
    ca.issue_cert("felix").configure_cert(client)
    anonymous = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(anonymous)
    return server, client, anonymous


async def test_mutual_tls(tls: tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ctx, client_ctx, anonymous_ctx = tls
    ctx = make_ctx(kvs=50)
    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx, tls=server_ctx)
        async with TyphaClient(("127.0.0.1", port), ssl_context=client_ctx,
                               server_hostname="typha") as client:
            await client.wait_for_status()
            assert values(client) == expected(ctx)
            async for event in client:
                if isinstance(event, PingAnswered):
                    break
        async with TyphaClient(("127.0.0.1", port), ssl_context=anonymous_ctx,
                               server_hostname="typha") as rejected:
            events = [e async for e in rejected]
            assert not any(isinstance(e, Connected) for e in events)
            assert isinstance(events[-1], Disconnected)
        nursery.cancel_scope.cancel()


async def test_reconnect_gets_a_fresh_snapshot() -> None:
    ctx = make_ctx(kvs=20)
    feed = ctx.feeds["felix"]
    async with trio.open_nursery() as nursery:
        port = await serve(nursery, ctx)
        async with TyphaClient(("127.0.0.1", port), reconnect=True) as client:
            await client.wait_for_status()
            next(iter(ctx.sessions.values())).cancel_scope.cancel()
            async for event in client:
                if isinstance(event, Disconnected):
                    break
            # While it is away, a key goes (no client will hear of it as a delta).
            feed.apply([SerializedUpdate("/calico/v1/k00003", None, "d",
                                         update_type=UpdateType.DELETED)])
            await client.wait_for_status()
            assert client.connections == 2
            assert values(client) == expected(ctx) and "/calico/v1/k00003" not in client.kvs
        nursery.cancel_scope.cancel()


async def test_connection_refused_ends_the_iteration() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        events = [e async for e in TyphaClient(("127.0.0.1", port))]
    assert len(events) == 1 and isinstance(events[0], Disconnected)
    assert "failed" in events[0].reason
