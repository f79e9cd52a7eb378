"""Snapshot turns on loopback: with every turn held by a snapshot send that cannot finish,
a new client's hello is read and its first message written at once, it is pinged while it
waits (calico-node's read timeout never fires), it takes its turn in arrival order, and
waiting sessions hold no snapshot.

The sends that hold the turns are real: legacy gob clients that read their ServerHello and
then stop reading, with a snapshot bigger than the kernel's socket buffers, so the server's
writes block.  Everything runs on trio's autojump clock: the assertions are about order and
structure (who has a turn, what arrived), never about how long anything took.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import AsyncIterator

import pytest
import trio

from trio_typha.cache.feed import CacheFeed
from trio_typha.client import grpc as g
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate, SyncStatus
from trio_typha.protocols.gob.client_session import (
    ClientSession,
    KVsReceived,
    PingAnswered,
    ServerHelloReceived,
    SyncStatusReceived,
)
from trio_typha.protocols.gob.shell import serve_gob_connection
from trio_typha.protocols.grpc.shell import serve_h2_connection
from trio_typha.server.backlog import BacklogListener
from trio_typha.server.listener import ConnectionHandler, Protocols
from trio_typha.sessions.context import ServerContext
from trio_typha.sessions.settings import ServerSettings

LIMIT = 2
#: ~9 MiB of incompressible values: more than a loopback socket's buffers hold, so a
#: client that stops reading keeps its snapshot send (and its turn) in progress.
KVS = 1100
VALUE = 8192
SETTINGS = ServerSettings(max_snapshot_sends=LIMIT, ping_interval=10, pong_timeout=600,
                          write_timeout=100_000, handshake_timeout=10)


class Server:
    def __init__(self, ctx: ServerContext, port: int) -> None:
        self.ctx = ctx
        self.port = port

    @property
    def running(self) -> int:
        return self.ctx.snapshots.turns.running

    @property
    def waiting(self) -> int:
        return self.ctx.snapshots.turns.waiting

    async def until(self, predicate: object) -> None:
        # Server-side bookkeeping has no event to wait on; poll it, bounded.
        with trio.fail_after(600):
            while not predicate():  # type: ignore[operator]  # noqa: ASYNC110
                await trio.sleep(0.01)


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[Server]:
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    feeds["felix"].apply([SerializedUpdate(f"/calico/v1/k{i:05d}", os.urandom(VALUE), str(i))
                          for i in range(KVS)])
    for feed in feeds.values():
        feed.set_status(SyncStatus.IN_SYNC)
    ctx = ServerContext(feeds=feeds, settings=SETTINGS, version="v-test")
    inner = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    handler = ConnectionHandler(ctx, Protocols(gob=serve_gob_connection,
                                               h2=serve_h2_connection))
    for feed in feeds.values():
        await nursery.start(feed.run_broadcast)
    await nursery.start(ctx.registry.serve, handler, [BacklogListener(inner)])
    yield Server(ctx, inner.socket.getsockname()[1])
    nursery.cancel_scope.cancel()


class GobClient:
    """A gob client on the pure client core, driven by hand."""

    def __init__(self, stream: trio.SocketStream, *, compression: bool) -> None:
        self.stream = stream
        self.core = ClientSession(compression=compression, hostname="t")
        self.events: list[object] = []
        self.kvs = 0

    @classmethod
    async def connect(cls, port: int, *, compression: bool = True) -> GobClient:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port), compression=compression)
        await client.flush()
        return client

    async def flush(self) -> None:
        if out := self.core.data_to_send():
            await self.stream.send_all(out)

    async def read_until(self, kind: type) -> object:
        """Read (answering pings, ACKing restarts) until an event of ``kind`` arrives."""
        while True:
            for i, event in enumerate(self.events):
                if isinstance(event, kind):
                    del self.events[:i + 1]
                    return event
            data = await self.stream.receive_some(65536)
            assert data, "server closed the connection"
            for event in self.core.receive_data(data):
                if isinstance(event, KVsReceived):
                    self.kvs += len(event.updates)
                self.events.append(event)
            await self.flush()

    async def in_sync(self) -> None:
        while True:
            event = await self.read_until(SyncStatusReceived)
            assert isinstance(event, SyncStatusReceived)
            if event.status is SyncStatus.IN_SYNC:
                return


async def stall(server: Server, n: int) -> list[GobClient]:
    """``n`` legacy clients that read their ServerHello, then nothing more."""
    stalled = []
    for _ in range(n):
        client = await GobClient.connect(server.port, compression=False)
        await client.read_until(ServerHelloReceived)
        stalled.append(client)
    return stalled


async def test_a_newcomer_gets_its_first_bytes_and_pings_while_every_turn_is_held(
        server: Server, autojump_clock: trio.abc.Clock) -> None:
    stalled = await stall(server, LIMIT + 3)
    await server.until(lambda: server.running == LIMIT and server.waiting == 3)

    # A compressed (calico-node-like) gob client and a gRPC client arrive now.
    newcomer = await GobClient.connect(server.port)
    hello = await newcomer.read_until(ServerHelloReceived)
    assert isinstance(hello, ServerHelloReceived)
    grpc_events: list[object] = []
    grpc_header = trio.Event()

    async def grpc_client() -> None:
        async with await g.open_stream("127.0.0.1", server.port) as stream:
            async for event in g.sync(stream, "felix", hostname="g"):
                grpc_events.append(event)
                if isinstance(event, g.Header):
                    grpc_header.set()
                if isinstance(event, g.Finished):
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(grpc_client)
        await grpc_header.wait()
        # Both have their first message, and both wait behind the three before them:
        # no turn was freed, no snapshot byte has come.
        await server.until(lambda: server.waiting == 5)
        assert server.running == LIMIT
        assert newcomer.kvs == 0 and [type(e) for e in grpc_events] == [g.Header]

        # Waiting through several ping intervals, the gob newcomer is pinged (on the plain
        # stream: its decoder is not restarted yet) and stays connected by answering.
        for _ in range(4):
            assert isinstance(await newcomer.read_until(PingAnswered), PingAnswered)
        assert newcomer.kvs == 0 and server.running == LIMIT and server.waiting == 5

        # The stalled senders go: the queue moves, first come first served, and both
        # newcomers get the whole snapshot and reach in sync.
        for client in stalled:
            await client.stream.aclose()
        await newcomer.in_sync()
        assert newcomer.kvs == KVS
    finished = [e for e in grpc_events if isinstance(e, g.Finished)]
    assert len(finished) == 1 and finished[0].snapshot_size == KVS
    assert sum(len(e.updates) for e in grpc_events if isinstance(e, g.Updates)) == KVS
    figures = server.ctx.snapshots.turns.figures
    assert figures.deepest_queue == 5 and figures.granted == LIMIT + 5


async def test_sessions_waiting_for_a_turn_hold_no_snapshot(
        server: Server, autojump_clock: trio.abc.Clock) -> None:
    """Forty sessions waiting their turn (half gob, half gRPC) cost a small fraction of one
    snapshot each: they hold neither its bytes nor its breadcrumb."""
    stalled = await stall(server, LIMIT)
    await server.until(lambda: server.running == LIMIT)
    snapshot_bytes = KVS * VALUE
    waiting = 40
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        gobs = []
        async with trio.open_nursery() as nursery:
            for i in range(waiting):
                if i % 2:
                    gobs.append(await GobClient.connect(server.port))
                else:
                    nursery.start_soon(_grpc_until_header, server.port)
            await server.until(lambda: server.waiting == waiting)
            for client in gobs:
                await client.read_until(ServerHelloReceived)
            after, _ = tracemalloc.get_traced_memory()
            nursery.cancel_scope.cancel()
    finally:
        tracemalloc.stop()
    per_session = (after - before) / waiting
    # ~70 KiB measured, both ends of each connection being in this process (and traced);
    # a snapshot here is ~9 MiB.
    assert per_session < snapshot_bytes / 50, per_session
    for client in stalled + gobs:
        await client.stream.aclose()


async def _grpc_until_header(port: int) -> None:
    async with await g.open_stream("127.0.0.1", port) as stream:
        async for event in g.sync(stream, "felix", hostname="g"):
            if isinstance(event, g.Updates):
                raise AssertionError("a waiting session was sent snapshot data")
            if isinstance(event, g.Header):
                await trio.sleep_forever()
