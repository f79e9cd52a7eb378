"""Every HTTP/2 connection state has a timeout, and a second `start` ends the stream at once."""

from __future__ import annotations

import trio

from trio_typha.protocols.grpc import typha_pb2 as pb
from trio_typha.sessions.settings import ServerSettings

TIMERS = ServerSettings(handshake_timeout=5, h2_idle_timeout=30, ping_interval=2,
                        pong_timeout=10, drain_timeout=0.5)


async def test_no_first_stream_within_the_handshake_timeout(grpc_harness, autojump_clock):
    async with grpc_harness.server(TIMERS) as srv, \
            grpc_harness.raw_connection(srv.port) as raw:
        raw.read_timeout = 60
        await raw.read_until(lambda: raw.h2.server_settings)
        opened = trio.current_time()
        await raw.read_until(lambda: False)  # until the server closes
        assert raw.closed
        assert 5 <= trio.current_time() - opened < 6
        assert raw.h2.goaway is not None and raw.h2.goaway.error_code == 0  # NO_ERROR
        assert b"no stream opened within 5s" in raw.h2.goaway.additional_data
        assert srv.connections[0].close_reason == "no stream opened within 5s"


async def test_no_open_stream_for_the_idle_timeout(grpc_harness, autojump_clock):
    async with grpc_harness.server(TIMERS) as srv, \
            grpc_harness.raw_connection(srv.port) as raw:
        raw.read_timeout = 120
        sid = raw.h2.start(syncer_type="no-such-syncer")
        await raw.read_until(lambda: raw.h2.streams.get(sid) and raw.h2.streams[sid].ended)
        assert raw.h2.streams[sid].status[0] == 3  # INVALID_ARGUMENT
        ended = trio.current_time()
        await raw.read_until(lambda: False)
        assert raw.closed
        assert 30 <= trio.current_time() - ended < 31
        assert b"idle: no open stream for 30s" in raw.h2.goaway.additional_data


async def test_a_connection_with_a_live_stream_is_never_idle(grpc_harness, autojump_clock):
    async with grpc_harness.server(TIMERS) as srv, \
            grpc_harness.raw_connection(srv.port) as raw:
        raw.read_timeout = 200
        sid = raw.h2.start()
        pings_answered = 0
        deadline = trio.current_time() + 100  # more than three idle timeouts

        def next_ping() -> bool:
            return raw.closed or len([r for r in raw.h2.streams[sid].responses()
                                      if r.WhichOneof("msg") == "ping"]) > pings_answered

        while trio.current_time() < deadline:
            await raw.read_until(next_ping)
            assert not raw.closed
            ping = [r for r in raw.h2.streams[sid].responses()
                    if r.WhichOneof("msg") == "ping"][pings_answered].ping
            raw.h2.ack(sid, ping)
            pings_answered += 1
        assert raw.h2.goaway is None
        assert srv.connections[0].close_reason is None


async def test_second_start_ends_the_stream_when_it_arrives(grpc_harness):
    # The peer grants no window beyond the first 64 KiB, so the snapshot cannot go out:
    # the stream must end on the second start's arrival, not after the snapshot.
    client = grpc_harness.RawH2Client(auto_window_update=False)
    async with grpc_harness.server(TIMERS, snapshot=grpc_harness.kvs(4000)) as srv, \
            grpc_harness.raw_connection(srv.port, client) as raw:
        sid = raw.h2.start()
        raw.h2.send_request(sid, pb.SyncRequest(start=pb.SyncRequestStart(syncer_type="felix")))
        await raw.flush()
        await srv.wait_until(lambda: srv.connections and srv.connections[0].streams)
        conn = srv.connections[0]
        await srv.wait_until(lambda: sid not in conn.streams)  # the handler has ended
        raw.h2.auto_window_update = True
        raw.h2.window_update(0, 1 << 24)
        raw.h2.window_update(sid, 1 << 24)
        await raw.read_until(lambda: raw.h2.streams[sid].ended or raw.h2.streams[sid].reset)
        stream = raw.h2.streams[sid]
        assert stream.status is not None, stream
        code, message = stream.status
        assert code == 3 and "'start' sent twice" in message  # INVALID_ARGUMENT
        assert not any(r.WhichOneof("msg") == "finished" for r in stream.responses())
