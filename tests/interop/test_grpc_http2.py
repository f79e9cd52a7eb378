"""HTTP/2 behaviour of the gRPC server against raw peers (and grpcio) on loopback sockets."""

from __future__ import annotations

import struct

import pytest
import trio

from trio_typha.model.kv import SerializedUpdate, UpdateType
from trio_typha.protocols.grpc import h2conn, shell
from trio_typha.protocols.grpc import typha_pb2 as pb
from trio_typha.sessions.settings import ServerSettings

FAST_DRAIN = ServerSettings(drain_timeout=0.5)


def finished(raw, sid: int) -> bool:
    return any(r.WhichOneof("msg") == "finished" for r in raw.h2.streams[sid].responses())


@pytest.mark.parametrize("stall", ["no-window-update", "never-reads"])
async def test_stalled_reader_does_not_stall_others_and_stays_bounded(grpc_harness, stall):
    snapshot = grpc_harness.kvs(8000)  # ~8 MiB: more than loopback socket buffers absorb
    if stall == "no-window-update":
        # Reads everything, never grants window beyond the initial 64 KiB.
        client = grpc_harness.RawH2Client(auto_window_update=False)
        rcvbuf = None
    else:
        # Grants huge windows up front, then never reads the socket again.
        client = grpc_harness.RawH2Client(initial_window=2**31 - 1, connection_window=2**31 - 1)
        rcvbuf = 16 * 1024
    async with grpc_harness.server(FAST_DRAIN, snapshot=snapshot) as srv, \
            grpc_harness.raw_connection(srv.port, client, rcvbuf=rcvbuf) as stuck:
        sid = stuck.h2.start()
        await stuck.flush()
        async with trio.open_nursery() as nursery:
            if stall == "no-window-update":
                nursery.start_soon(stuck.read_until, lambda: False)
            await srv.wait_until(lambda: srv.connections and srv.connections[0].core.buffered(1))
            stuck_conn = srv.connections[0]
            largest = max(len(m) for m in _snapshot_messages(srv))
            bound = shell.STREAM_BUFFER_LIMIT + largest + h2conn.WRITE_CHUNK

            async with grpc_harness.grpcio_client(srv.port) as healthy:
                await healthy.recv_kind("finished", skip=("header", "update"))
                assert stuck_conn.buffered_bytes <= bound
                for i in range(20):
                    srv.felix.apply([SerializedUpdate(f"/calico/v1/extra/{i}", b"v" * 1024,
                                                      update_type=UpdateType.NEW)])
                for i in range(20):
                    kv = (await healthy.recv_kind("update")).update.kvs[0]
                    assert kv.key == f"/calico/v1/extra/{i}"
                    assert stuck_conn.buffered_bytes <= bound
            # The stuck stream never got its snapshot and is still parked, bounded.
            assert not finished(stuck, sid)
            assert 0 < stuck_conn.core.buffered(sid) <= shell.STREAM_BUFFER_LIMIT + largest
            nursery.cancel_scope.cancel()


def _snapshot_messages(srv):
    from trio_typha.protocols.grpc import encode_once
    return encode_once.snapshot_messages(srv.felix.snapshot_point(), srv.ctx.settings.max_message_size)


async def test_protocol_error_closes_only_that_connection(grpc_harness):
    async with grpc_harness.server(ServerSettings(ping_interval=0.05, pong_timeout=1)) as srv, \
            grpc_harness.grpcio_client(srv.port) as healthy, \
            grpc_harness.raw_connection(srv.port) as bad:
        await healthy.recv_kind("finished", skip=("header", "update"))
        await bad.read_until(lambda: bad.h2.server_settings)
        bad.h2.out += b"\x00\x00\x04\x00\x00\x00\x00\x00\x00abcd"  # DATA on stream 0
        await bad.read_until(lambda: bad.closed)
        assert bad.h2.goaway is not None and bad.h2.goaway.error_code == 1  # PROTOCOL_ERROR
        bad_conn = next(c for c in srv.connections if c.close_reason)
        assert "protocol error" in bad_conn.close_reason
        for _ in range(3):
            await healthy.recv_kind("ping")


async def test_garbage_instead_of_preface_is_dropped(grpc_harness):
    async with grpc_harness.server() as srv:
        stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
        async with stream:
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            with trio.fail_after(10):
                while await stream.receive_some(65536):
                    pass
        await srv.wait_until(lambda: srv.connections and srv.connections[0].close_reason)
        assert "protocol error" in srv.connections[0].close_reason


@pytest.mark.parametrize(("method", "content_type", "status"), [
    ("POST", "text/plain", "415"),
    ("POST", "application/grpc+json", "415"),
    ("GET", "application/grpc", "405"),
])
async def test_non_grpc_requests_get_http_errors(grpc_harness, method, content_type, status):
    async with grpc_harness.server() as srv, grpc_harness.raw_connection(srv.port) as raw:
        sid = raw.h2.request(method=method, content_type=content_type, end_stream=True)
        await raw.read_until(lambda: raw.h2.streams[sid].ended)
        assert dict(raw.h2.streams[sid].headers)[":status"] == status


async def test_bad_request_messages_fail_their_stream_only(grpc_harness):
    settings = ServerSettings(max_inbound_message=1024)
    async with grpc_harness.server(settings, snapshot=grpc_harness.kvs(3)) as srv, \
            grpc_harness.raw_connection(srv.port) as raw:
        good = raw.h2.start()
        not_protobuf = raw.h2.request()
        raw.h2.send_raw(not_protobuf, b"\x00\x00\x00\x00\x03\xff\xff\xff")
        compressed = raw.h2.request()
        raw.h2.send_raw(compressed, b"\x01\x00\x00\x00\x01\x00")
        too_big = raw.h2.request()
        raw.h2.send_raw(too_big, struct.pack(">BI", 0, 2048))
        ack_first = raw.h2.request()
        raw.h2.send_request(ack_first, pb.SyncRequest(ack=pb.Ack(ping_id=1)))
        unknown_syncer = raw.h2.start(syncer_type="bogus")
        bad = [not_protobuf, compressed, too_big, ack_first, unknown_syncer]
        await raw.read_until(lambda: all(raw.h2.streams[s].status for s in bad)
                             and finished(raw, good))
        codes = {s: raw.h2.streams[s].status[0] for s in bad}
        assert codes == {not_protobuf: 3, compressed: 13, too_big: 8, ack_first: 3,
                         unknown_syncer: 3}
        assert "bogus" in raw.h2.streams[unknown_syncer].status[1]
        # The good stream carries on.
        srv.felix.apply([SerializedUpdate("/calico/v1/after", b"x")])
        await raw.read_until(lambda: raw.h2.streams[good].responses()[-1].WhichOneof("msg")
                             == "update")
        assert raw.h2.streams[good].status is None
        assert len(srv.ctx.sessions) == 1


async def test_request_bigger_than_the_window_is_received(grpc_harness):
    # 200 KiB start message: its bytes must be given back before it is complete.
    async with grpc_harness.server() as srv, grpc_harness.raw_connection(srv.port) as raw:
        sid = raw.h2.request()
        start = pb.SyncRequest(start=pb.SyncRequestStart(syncer_type="bgp", info="i" * 200_000))
        payload = start.SerializeToString()
        framed = struct.pack(">BI", 0, len(payload)) + payload
        raw.h2.send_flow_controlled(sid, framed)
        await raw.read_until(lambda: finished(raw, sid))
        assert raw.h2.streams[sid].responses()[0].header.syncer_type == "bgp"


async def test_max_concurrent_streams_advertised_and_enforced(grpc_harness):
    async with grpc_harness.server(ServerSettings(max_concurrent_streams=2)) as srv, \
            grpc_harness.raw_connection(srv.port) as raw:
        await raw.read_until(lambda: raw.h2.server_settings)
        assert raw.h2.server_settings[0x3] == 2  # SETTINGS_MAX_CONCURRENT_STREAMS
        first, second = raw.h2.start(), raw.h2.start()
        await raw.read_until(lambda: finished(raw, first) and finished(raw, second))
        raw.h2.start()
        await raw.read_until(lambda: raw.closed)
        assert raw.h2.goaway is not None and raw.h2.goaway.error_code == 1  # PROTOCOL_ERROR
        await srv.wait_until(lambda: not srv.ctx.sessions)


async def test_peer_reset_cancels_only_that_stream(grpc_harness):
    async with grpc_harness.server(snapshot=grpc_harness.kvs(3000)) as srv, \
            grpc_harness.raw_connection(srv.port) as raw:
        first = raw.h2.start()
        await raw.read_until(lambda: len(raw.h2.streams[first].responses()) > 3)
        assert len(srv.ctx.sessions) == 1
        raw.h2.reset(first)
        second = raw.h2.start()
        await raw.read_until(lambda: finished(raw, second))
        conn = srv.connections[0]
        await srv.wait_until(lambda: len(srv.ctx.sessions) == 1 and list(conn.streams) == [second])
        assert raw.h2.streams[second].responses()[-1].finished.snapshot_size == 3000
