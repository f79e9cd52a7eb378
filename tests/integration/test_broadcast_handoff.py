"""A gob client handed between the broadcast round and its own writer over a real socket.

Loopback TCP with small kernel buffers on both ends: while the client reads, it sits in the
caught-up set and the round writes to it; when it stalls mid-write the round's send falls
short and its writer task finishes the write; once it reads again it catches up and joins
again.  It must receive every update exactly once and in order, on both gob streams and
on gRPC (whose round goes through the connection's h2 core, so flow control stays right),
over plain TCP and over TLS (the server's own TLS stream, real certificates from trustme:
there the round's send takes the plaintext whole and the ciphertext the kernel does not
take is owed, which hands the seat back just the same).  A client that stops reading for
good is dropped at the write timeout, by its own writer.
"""

from __future__ import annotations

import logging
import socket
import ssl

import pytest
import trio
import trustme

from trio_typha.cache.fanout import RoundResult
from trio_typha.cache.feed import CacheFeed
from trio_typha.client.grpc import Updates, sync
from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.protocols.gob.client_session import ClientSession, KVsReceived
from trio_typha.protocols.gob.shell import serve_gob_connection
from trio_typha.protocols.grpc.shell import serve_h2_connection
from trio_typha.sessions.context import ServerContext
from trio_typha.sessions.settings import ServerSettings
from trio_typha.tls.stream import TLSStream

BUFFER = 4096


async def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = trio.socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
    listener.close()
    return trio.SocketStream(server), trio.SocketStream(client)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def stream_pair(ca: trustme.CA | None
                      ) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """(server side, client side) over small-buffered loopback; TLS if ``ca`` is given."""
    server, client = await socket_pair()
    if ca is None:
        return server, client
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("typha-server").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client_ctx)
    tls_server = TLSStream(server, server_ctx)
    tls_client = trio.SSLStream(client, client_ctx, server_hostname="typha-server")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tls_server.do_handshake)
        nursery.start_soon(tls_client.do_handshake)
    return tls_server, tls_client


class Client:
    """Reads (unless paused), answers what the session says, keeps every update in order."""

    def __init__(self, stream: trio.abc.Stream, protocol: str) -> None:
        self.stream = stream
        self.protocol = protocol
        self.core = ClientSession(hostname="handoff", compression=protocol == "snappy")
        self.updates: list[tuple[str, bytes | None]] = []
        self.reading = trio.Event()
        self.reading.set()
        self.changed = trio.Event()

    async def run(self) -> None:
        if self.protocol == "grpc":
            await self.run_grpc()
        else:
            await self.run_gob()

    async def run_grpc(self) -> None:
        async for event in sync(self.stream, "felix", hostname="handoff"):
            await self.reading.wait()
            if isinstance(event, Updates):
                self.updates.extend((u.key, u.value) for u in event.updates)
                self.changed.set()
                self.changed = trio.Event()

    async def run_gob(self) -> None:
        await self.stream.send_all(self.core.data_to_send())
        while True:
            await self.reading.wait()
            data = await self.stream.receive_some(65536)
            if not data:
                return
            for event in self.core.receive_data(data):
                if isinstance(event, KVsReceived):
                    self.updates.extend((u.key, u.value) for u in event.updates)
            reply = self.core.data_to_send()
            if reply:
                await self.stream.send_all(reply)
            self.changed.set()
            self.changed = trio.Event()

    async def wait_for(self, n: int) -> None:
        while len(self.updates) < n:
            await self.changed.wait()


def make_feed_and_ctx(**settings: float) -> tuple[CacheFeed, ServerContext, int]:
    feed = CacheFeed("felix")
    snapshot = [SerializedUpdate(f"/snap/{i}", b"s") for i in range(10)]
    feed.apply(snapshot)
    feed.set_status(SyncStatus.IN_SYNC)
    ctx = ServerContext(feeds={"felix": feed}, settings=ServerSettings(**settings))
    return feed, ctx, len(snapshot)


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize("protocol", ["plain", "snappy", "grpc"])
async def test_stalled_client_catches_up_and_rejoins(nursery, ca, protocol: str,
                                                     tls: bool) -> None:
    feed, ctx, snapshot_size = make_feed_and_ctx(write_timeout=30, ping_interval=60)
    rounds: list[RoundResult] = []
    feed.on_round = rounds.append
    await nursery.start(feed.run_broadcast)
    server, client_stream = await stream_pair(ca if tls else None)
    serve = serve_h2_connection if protocol == "grpc" else serve_gob_connection
    nursery.start_soon(serve, server, ctx)
    client = Client(client_stream, protocol)
    nursery.start_soon(client.run)
    with trio.fail_after(10):
        await client.wait_for(snapshot_size)
    published: list[tuple[str, bytes | None]] = []

    async def publish(n: int, size: int) -> None:
        for _ in range(n):
            i = len(published)
            value = f"{i:08d}".encode() * (size // 8)
            feed.apply([SerializedUpdate(f"/k/{i % 7}", value)])
            published.append((f"/k/{i % 7}", value))
            await trio.sleep(0.001)

    base = snapshot_size
    with trio.fail_after(20):
        # Reading: the client joins the caught-up set and the round writes to it.
        await publish(20, 64)
        await client.wait_for(base + len(published))
        while len(feed.broadcast) != 1:  # noqa: ASYNC110 (its writer re-joins on its own)
            await trio.sleep(0.01)
        # Stalled mid-write: far more than both buffers hold.
        client.reading = trio.Event()
        await publish(200, 2048)
        assert len(feed.broadcast) == 0  # its own writer holds the socket now
        assert any(r.handed_back for r in rounds)
        # Reading again: the writer finishes, catches up, and the seat comes back.
        client.reading.set()
        await client.wait_for(base + len(published))
        await publish(20, 64)
        await client.wait_for(base + len(published))
        while len(feed.broadcast) != 1:  # noqa: ASYNC110
            await trio.sleep(0.01)
    assert client.updates[snapshot_size:] == published  # each once, in order
    assert sum(r.deliveries for r in rounds) > 0


@pytest.mark.parametrize("protocol", ["plain", "grpc"])
async def test_tls_client_at_the_write_timeout_is_dropped(nursery, ca, protocol: str,
                                                          caplog) -> None:
    """It stops reading while in the caught-up set: the round hands it back owing
    ciphertext, and its writer gives up after the write timeout, as on plain TCP."""
    caplog.set_level(logging.INFO)
    feed, ctx, snapshot_size = make_feed_and_ctx(write_timeout=1, ping_interval=60)
    await nursery.start(feed.run_broadcast)
    server, client_stream = await stream_pair(ca)
    serve = serve_h2_connection if protocol == "grpc" else serve_gob_connection
    ended = trio.Event()

    async def serve_then_note() -> None:
        await serve(server, ctx)
        ended.set()
    nursery.start_soon(serve_then_note)
    client = Client(client_stream, protocol)
    nursery.start_soon(client.run)
    with trio.fail_after(10):
        await client.wait_for(snapshot_size)
        while len(feed.broadcast) != 1:  # noqa: ASYNC110 (its writer joins on its own)
            await trio.sleep(0.01)
    client.reading = trio.Event()  # ... and never again
    with trio.fail_after(15):
        i = 0
        while not ended.is_set():
            feed.apply([SerializedUpdate(f"/k/{i % 7}", b"v" * 4096)])
            i += 1
            await trio.sleep(0.005)
    assert len(feed.broadcast) == 0
    assert "write timed out after 1s" in caplog.text
