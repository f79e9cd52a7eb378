"""Timers and limits of gRPC sessions, on trio's virtual clock over in-memory streams.

The server side is the real :class:`GrpcConnection`; the peer is the raw HTTP/2 client, so
tests can withhold acks or flow-control window at will.  ``autojump_clock`` makes the
minutes these rules are written in pass instantly.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from trio_typha.cache.feed import CacheFeed
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate, SyncStatus
from trio_typha.protocols.grpc import typha_pb2 as pb
from trio_typha.protocols.grpc.shell import GrpcConnection, serve_h2_connection
from trio_typha.sessions.context import ServerContext
from trio_typha.sessions.settings import ServerSettings

LONG = 10_000.0  # virtual seconds; for timers a test does not exercise


@contextlib.asynccontextmanager
async def session(grpc_harness, settings: ServerSettings, *, snapshot=(), client=None,
                  send_preface: bool = True) -> AsyncIterator[SimpleNamespace]:
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    feeds["felix"].apply(snapshot)
    for feed in feeds.values():
        feed.set_status(SyncStatus.IN_SYNC)
    ctx = ServerContext(feeds, settings)
    server_side, client_side = trio.testing.memory_stream_pair()
    conn = GrpcConnection(server_side, ctx, peer="memory")
    raw = grpc_harness.RawConnection(client_side, client or grpc_harness.RawH2Client(),
                                     read_timeout=LONG)
    done = trio.Event()

    async def run() -> None:
        await conn.run()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        if send_preface:
            await raw.flush()
        yield SimpleNamespace(conn=conn, ctx=ctx, felix=feeds["felix"], raw=raw, done=done)
        nursery.cancel_scope.cancel()


def kinds(raw, sid: int) -> list[str]:
    return [r.WhichOneof("msg") for r in raw.h2.streams[sid].responses()]


def pings(raw, sid: int):
    return [r.ping for r in raw.h2.streams[sid].responses() if r.WhichOneof("msg") == "ping"]


async def test_pings_keep_their_interval_and_acks_keep_the_stream(grpc_harness, autojump_clock):
    settings = ServerSettings(ping_interval=10, pong_timeout=60)
    async with session(grpc_harness, settings) as s:
        sid = s.raw.h2.start()
        await s.raw.read_until(lambda: "finished" in kinds(s.raw, sid))
        finished_at = trio.current_time()
        arrivals = []
        for n in range(1, 31):  # 5 minutes of pings, answered
            await s.raw.read_until(lambda n=n: len(pings(s.raw, sid)) >= n)
            arrivals.append(trio.current_time())
            s.raw.h2.ack(sid, pings(s.raw, sid)[-1])
        gaps = [b - a for a, b in zip([finished_at, *arrivals], arrivals, strict=False)]
        assert all(10 <= gap <= 11 for gap in gaps), gaps
        assert len(set(gaps)) > 1  # jittered
        assert [p.id for p in pings(s.raw, sid)] == list(range(1, 31))
        assert s.raw.h2.streams[sid].status is None
        info = next(iter(s.ctx.sessions.values()))
        assert info.syncer_type == "felix" and info.hostname == "raw"


async def test_unanswered_pings_end_the_stream_at_the_pong_timeout(grpc_harness, autojump_clock):
    settings = ServerSettings(ping_interval=10, pong_timeout=60)
    async with session(grpc_harness, settings) as s:
        sid = s.raw.h2.start()
        await s.raw.read_until(lambda: "finished" in kinds(s.raw, sid))
        finished_at = trio.current_time()
        await s.raw.read_until(lambda: s.raw.h2.streams[sid].status)
        code, message = s.raw.h2.streams[sid].status
        assert code == 4 and "no ping ack" in message  # DEADLINE_EXCEEDED
        assert 60 <= trio.current_time() - finished_at <= 61
        assert 5 <= len(pings(s.raw, sid)) <= 6
        assert not s.ctx.sessions
        assert not s.raw.closed  # the connection outlives the stream


async def test_pong_timeout_is_redefaulted_above_twice_the_interval(grpc_harness, autojump_clock):
    # Like Typha: a pong timeout <= 2 x ping interval becomes 6 x ping interval.
    settings = ServerSettings(ping_interval=10, pong_timeout=15)
    async with session(grpc_harness, settings) as s:
        sid = s.raw.h2.start()
        await s.raw.read_until(lambda: "finished" in kinds(s.raw, sid))
        finished_at = trio.current_time()
        await s.raw.read_until(lambda: s.raw.h2.streams[sid].status)
        assert 60 <= trio.current_time() - finished_at <= 61


async def test_missing_start_message_times_out(grpc_harness, autojump_clock):
    async with session(grpc_harness, ServerSettings(handshake_timeout=10)) as s:
        sid = s.raw.h2.request()
        await s.raw.read_until(lambda: s.raw.h2.streams[sid].status)
        assert s.raw.h2.streams[sid].status[0] == 4
        assert "no start message" in s.raw.h2.streams[sid].status[1]
        assert 10 <= trio.current_time() < 11


async def test_missing_preface_closes_the_connection(grpc_harness, autojump_clock):
    async with session(grpc_harness, ServerSettings(handshake_timeout=10),
                       send_preface=False) as s:
        await s.done.wait()
        assert "no HTTP/2 preface" in s.conn.close_reason
        assert trio.current_time() == 10


async def test_client_falling_behind_is_dropped(grpc_harness, autojump_clock, caplog):
    caplog.set_level(logging.INFO)
    settings = ServerSettings(max_fall_behind=30, new_client_fall_behind_grace=60,
                              ping_interval=LONG, pong_timeout=3 * LONG, write_timeout=LONG)
    client = grpc_harness.RawH2Client(auto_window_update=False)
    async with session(grpc_harness, settings, client=client) as s:
        sid = s.raw.h2.start()
        await s.raw.read_until(lambda: "finished" in kinds(s.raw, sid))
        # 10 KiB every 5 s: window and server queue (~200 KiB) are full after ~100 s.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(s.raw.read_until, lambda: False)
            for i in range(40):
                s.felix.apply([SerializedUpdate(f"/calico/v1/k/{i}", b"x" * 10240)])
                await trio.sleep(5)
            nursery.cancel_scope.cancel()
        assert s.ctx.sessions  # still there, just stuck
        s.raw.h2.auto_window_update = True
        s.raw.h2.window_update(0, 2**20)
        s.raw.h2.window_update(sid, 2**20)
        await s.raw.read_until(lambda: s.raw.h2.streams[sid].status)
        code, message = s.raw.h2.streams[sid].status
        assert code == 14 and "behind" in message  # UNAVAILABLE: reconnect elsewhere
        assert any("behind" in r.message for r in caplog.records)
        assert not s.ctx.sessions


async def test_falling_behind_is_tolerated_during_the_grace_period(grpc_harness, autojump_clock,
                                                                    caplog):
    caplog.set_level(logging.INFO)
    settings = ServerSettings(max_fall_behind=10, new_client_fall_behind_grace=300,
                              ping_interval=LONG, pong_timeout=3 * LONG, write_timeout=LONG)
    client = grpc_harness.RawH2Client(auto_window_update=False)
    async with session(grpc_harness, settings, client=client) as s:
        sid = s.raw.h2.start()
        await s.raw.read_until(lambda: "finished" in kinds(s.raw, sid))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(s.raw.read_until, lambda: False)
            # Enough to fill the window and the server's stream queue (~200 KiB).
            for i in range(40):
                s.felix.apply([SerializedUpdate(f"/calico/v1/k/{i:02d}", b"x" * 10240)])
                await trio.sleep(5)
            nursery.cancel_scope.cancel()
        s.raw.h2.auto_window_update = True
        s.raw.h2.window_update(0, 2**20)
        s.raw.h2.window_update(sid, 2**20)
        await s.raw.read_until(lambda: kinds(s.raw, sid).count("update") == 40)
        assert s.raw.h2.streams[sid].status is None
        assert sum("grace period" in r.message for r in caplog.records) == 1


async def test_stream_that_takes_no_data_is_abandoned(grpc_harness, autojump_clock):
    settings = ServerSettings(write_timeout=30)
    client = grpc_harness.RawH2Client(auto_window_update=False)
    async with session(grpc_harness, settings, snapshot=grpc_harness.kvs(200),
                       client=client) as s:
        sid = s.raw.h2.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(s.raw.read_until, lambda: False)
            await trio.sleep(29)
            assert s.ctx.sessions
            await trio.sleep(2)
            assert not s.ctx.sessions  # dropped after the write timeout
            # Its trailers would have to follow the rest of a half-sent message, which the
            # peer will not take either: after another write timeout the stream is reset.
            await trio.sleep(30)
            nursery.cancel_scope.cancel()
        assert s.raw.h2.streams[sid].reset == 8  # CANCEL
        assert s.conn.core.open_streams == 0
        assert s.conn.buffered_bytes == 0


async def test_drain_gives_up_on_stuck_streams_after_the_drain_timeout(grpc_harness,
                                                                       autojump_clock):
    settings = ServerSettings(drain_timeout=10)
    client = grpc_harness.RawH2Client(auto_window_update=False)
    async with session(grpc_harness, settings, snapshot=grpc_harness.kvs(200),
                       client=client) as s:
        stuck = s.raw.h2.start()
        await s.raw.read_until(lambda: s.conn.core.buffered(stuck))
        s.ctx.draining.set()
        await s.raw.read_until(lambda: s.raw.h2.goaway is not None)
        drain_started = trio.current_time()
        # A stream opened after the GOAWAY is refused.
        late = s.raw.h2.start()
        await s.raw.read_until(lambda: s.raw.h2.streams[late].reset is not None)
        assert s.raw.h2.streams[late].reset == 7  # REFUSED_STREAM
        await s.raw.read_until(lambda: False)
        assert s.raw.closed
        assert trio.current_time() - drain_started == pytest.approx(10)
        assert "drain timeout" in s.conn.close_reason
        assert s.raw.h2.streams[stuck].status is None  # never got its trailers out
        assert not s.ctx.sessions


async def test_session_dropped_by_the_server_gets_unavailable(grpc_harness, autojump_clock):
    async with session(grpc_harness, ServerSettings()) as s:
        sid = s.raw.h2.start()
        await s.raw.read_until(lambda: "finished" in kinds(s.raw, sid))
        (info,) = s.ctx.sessions.values()
        info.cancel_scope.cancel()  # a server-side drop, e.g. for rebalancing
        await s.raw.read_until(lambda: s.raw.h2.streams[sid].status)
        assert s.raw.h2.streams[sid].status == (14, "session dropped by the server")
        assert not s.ctx.sessions
        # ...and the client is sent away to reconnect (maybe to another server).
        assert s.raw.h2.goaway is not None and s.raw.h2.goaway.error_code == 0
        await s.done.wait()
        assert s.conn.close_reason == "all streams done after GOAWAY"


async def test_half_closed_client_keeps_receiving_until_the_pong_timeout(grpc_harness,
                                                                          autojump_clock):
    async with session(grpc_harness, ServerSettings(ping_interval=10, pong_timeout=60)) as s:
        sid = s.raw.h2.request()
        s.raw.h2.send_request(sid, pb.SyncRequest(start=pb.SyncRequestStart()), end_stream=True)
        await s.raw.read_until(lambda: "finished" in kinds(s.raw, sid))
        s.felix.apply([SerializedUpdate("/calico/v1/late", b"v")])
        await s.raw.read_until(lambda: "update" in kinds(s.raw, sid))
        await s.raw.read_until(lambda: s.raw.h2.streams[sid].status)
        assert s.raw.h2.streams[sid].status[0] == 4


async def test_entry_point_takes_the_bytes_the_listener_sniffed(grpc_harness, autojump_clock):
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    feeds["felix"].apply(grpc_harness.kvs(5))
    feeds["felix"].set_status(SyncStatus.IN_SYNC)
    ctx = ServerContext(feeds, ServerSettings())
    server_side, client_side = trio.testing.memory_stream_pair()
    raw = grpc_harness.RawConnection(client_side, grpc_harness.RawH2Client())
    sid = raw.h2.start()
    await raw.flush()
    # What a port-sniffing listener does: read the start of the preface, then hand over.
    prefix = await server_side.receive_some(7)
    assert prefix == b"PRI * H"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(serve_h2_connection, server_side, ctx, prefix=prefix,
                                   peer="sniffed"))
        await raw.read_until(lambda: "finished" in kinds(raw, sid))
        assert next(iter(ctx.sessions.values())).peer == "sniffed"
        await raw.stream.aclose()  # peer goes away: the entry point returns by itself
    assert not ctx.sessions


class _LatePreface(trio.abc.HalfCloseableStream):
    """A server stream whose first write waits ``delay``: a server too busy (a connection
    storm) to get its SETTINGS out for a while."""

    def __init__(self, inner: trio.abc.HalfCloseableStream, delay: float) -> None:
        self.inner, self.delay, self.first_write_at = inner, delay, None

    async def send_all(self, data) -> None:
        if self.first_write_at is None:
            await trio.sleep(self.delay)
            self.first_write_at = trio.current_time()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def receive_some(self, max_bytes=None):
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_first_stream_clock_starts_when_our_settings_are_out(grpc_harness,
                                                                   autojump_clock):
    # grpcio opens no stream before it has the server's SETTINGS: a client must not be
    # blamed for "no stream opened" while ours were still waiting to be written.
    feeds = {t: CacheFeed(t) for t in SYNCER_TYPES}
    for feed in feeds.values():
        feed.set_status(SyncStatus.IN_SYNC)
    ctx = ServerContext(feeds, ServerSettings(handshake_timeout=5, ping_interval=LONG,
                                              pong_timeout=LONG))
    server_side, client_side = trio.testing.memory_stream_pair()
    late = _LatePreface(server_side, delay=30)
    conn = GrpcConnection(late, ctx, peer="memory")
    raw = grpc_harness.RawConnection(client_side, grpc_harness.RawH2Client(),
                                     read_timeout=LONG)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await raw.flush()
        await raw.read_until(lambda: raw.h2.server_settings)
        assert late.first_write_at is not None and late.first_write_at >= 30
        sid = raw.h2.start()
        await raw.read_until(lambda: "finished" in kinds(raw, sid) or raw.closed)
        assert not raw.closed and conn.close_reason is None
        nursery.cancel_scope.cancel()
