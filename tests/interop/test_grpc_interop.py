"""The real grpcio client against the trio server over loopback."""

from __future__ import annotations

import grpc
import trio

from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.grpc import typha_pb2 as pb
from trio_typha.sessions.settings import ServerSettings

SNAPSHOT_KVS = 5000  # x 1 KiB values: > 4 MiB in total, far beyond a 64 KiB window


async def test_snapshot_finished_updates_and_pings(grpc_harness):
    settings = ServerSettings(ping_interval=0.05, pong_timeout=0.5)
    snapshot = grpc_harness.kvs(SNAPSHOT_KVS)
    async with grpc_harness.server(settings, snapshot=snapshot) as srv, \
            grpc_harness.grpcio_client(srv.port) as client:
        header = (await client.recv()).header
        assert header.syncer_type == "felix"
        assert header.sync_status == pb.SYNC_STATUS_IN_SYNC
        assert header.server_conn_id in srv.ctx.sessions

        got: list[pb.KV] = []
        batches = 0
        while (resp := await client.recv()).WhichOneof("msg") == "update":
            batches += 1
            assert len(resp.update.kvs) <= settings.max_message_size
            got.extend(resp.update.kvs)
        assert resp.WhichOneof("msg") == "finished"
        assert resp.finished.sync_status == pb.SYNC_STATUS_IN_SYNC
        assert resp.finished.snapshot_size == SNAPSHOT_KVS
        assert batches == SNAPSHOT_KVS // settings.max_message_size
        assert sum(len(kv.value) for kv in got) > 4 * 1024 * 1024
        expected = sorted(snapshot, key=lambda u: u.key)
        assert [kv.key for kv in got] == [u.key for u in expected]
        assert [kv.value for kv in got] == [u.value for u in expected]
        assert {kv.update_type for kv in got} == {pb.UPDATE_TYPE_NEW}

        # Live updates: a change and a deletion in one breadcrumb, then a status change.
        first = expected[0].key
        srv.felix.apply([
            SerializedUpdate(first, b"changed", revision="r2", update_type=UpdateType.UPDATED),
            SerializedUpdate(expected[1].key, None, revision="r3", update_type=UpdateType.DELETED),
        ])
        update = (await client.recv_kind("update")).update
        assert [(kv.key, kv.value, kv.update_type, kv.deleted) for kv in update.kvs] == [
            (first, b"changed", pb.UPDATE_TYPE_UPDATED, False),
            (expected[1].key, b"", pb.UPDATE_TYPE_DELETED, True),
        ]
        srv.felix.set_status(SyncStatus.RESYNC_IN_PROGRESS)
        status = (await client.recv_kind("status")).status
        assert status.sync_status == pb.SYNC_STATUS_RESYNC_IN_PROGRESS

        # Pings keep coming and, answered, keep the stream alive well past the pong
        # timeout (30 pings are at least 1.5 s; the timeout is 0.5 s).
        ids = [(await client.recv_kind("ping")).ping.id for _ in range(30)]
        assert ids == list(range(ids[0], ids[0] + 30))
        assert client.acks_sent >= ids[-1]
        session = srv.ctx.sessions[header.server_conn_id]
        assert session.protocol == "grpc" and session.hostname == "test-host"
        assert session.bytes_sent > 4 * 1024 * 1024


async def test_two_clients_get_the_same_snapshot(grpc_harness):
    async with grpc_harness.server(snapshot=grpc_harness.kvs(700, size=100)) as srv, \
            grpc_harness.grpcio_client(srv.port) as a, \
            grpc_harness.grpcio_client(srv.port) as b:
        streams = []
        for client in (a, b):
            header = (await client.recv()).header
            msgs = []
            while (resp := await client.recv()).WhichOneof("msg") == "update":
                msgs.append(resp.SerializeToString())
            streams.append(msgs)
            assert resp.finished.snapshot_size == 700
            assert header.server_conn_id in srv.ctx.sessions
        assert streams[0] == streams[1]
        assert len(srv.ctx.sessions) == 2


async def test_cancel_mid_stream_cleans_up(grpc_harness):
    async with grpc_harness.server(snapshot=grpc_harness.kvs(SNAPSHOT_KVS)) as srv:
        async with grpc_harness.grpcio_client(srv.port) as client:
            await client.recv_kind("header")
            await client.recv_kind("update")  # mid-snapshot
            assert len(srv.ctx.sessions) == 1
            client.cancel()
            end = await client.ended()
            assert end.code == grpc.StatusCode.CANCELLED
            conn = srv.connections[0]
            await srv.wait_until(lambda: not srv.ctx.sessions and not conn.streams
                                 and conn.core.open_streams == 0)
            assert conn.close_reason is None  # the connection itself lives on
        # Closing the channel ends the connection and all of its tasks.
        await srv.wait_until(lambda: not srv.conn_nursery.child_tasks)
        assert srv.connections[0].close_reason is not None
        assert srv.connections[0].buffered_bytes == 0


async def test_unknown_syncer_type_is_invalid_argument(grpc_harness):
    async with grpc_harness.server() as srv, \
            grpc_harness.grpcio_client(srv.port, syncer_type="typha-fanciness") as client:
        end = await client.ended()
        assert end.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "typha-fanciness" in end.details
        assert not srv.ctx.sessions


async def test_empty_syncer_type_means_felix(grpc_harness):
    async with grpc_harness.server() as srv, \
            grpc_harness.grpcio_client(srv.port, syncer_type="") as client:
        assert (await client.recv()).header.syncer_type == "felix"


async def test_unknown_method_is_unimplemented(grpc_harness):
    async with grpc_harness.server() as srv:
        def call(path: str) -> grpc.StatusCode:
            with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as channel:
                try:
                    channel.unary_unary(path)(b"", timeout=10)
                except grpc.RpcError as exc:
                    return exc.code()
            raise AssertionError("call succeeded")

        for path in ("/typha.v1.Sync/Nope", "/other.v1.Service/Sync"):
            assert await trio.to_thread.run_sync(call, path) == grpc.StatusCode.UNIMPLEMENTED


async def test_unanswered_pings_end_the_stream(grpc_harness):
    settings = ServerSettings(ping_interval=0.05, pong_timeout=0.3)
    async with grpc_harness.server(settings, snapshot=grpc_harness.kvs(10)) as srv, \
            grpc_harness.grpcio_client(srv.port, auto_ack=False) as client:
        end = await client.ended()
        assert end.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "ping ack" in end.details
        await srv.wait_until(lambda: not srv.ctx.sessions)


async def test_grpc_deadline_is_honoured(grpc_harness):
    async with grpc_harness.server(snapshot=grpc_harness.kvs(10)) as srv:
        def call() -> grpc.StatusCode:
            with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as channel:
                start = pb.SyncRequest(start=pb.SyncRequestStart(syncer_type="felix"))
                responses = grpc_harness.stubs.SyncStub(channel).Sync(iter([start]), timeout=0.5)
                try:
                    for _ in responses:
                        pass
                except grpc.RpcError as exc:
                    return exc.code()
            raise AssertionError("stream ended without error")

        assert await trio.to_thread.run_sync(call) == grpc.StatusCode.DEADLINE_EXCEEDED
        await srv.wait_until(lambda: not srv.ctx.sessions)


async def test_shutdown_sends_goaway_and_ends_streams(grpc_harness):
    settings = ServerSettings(drain_timeout=5)
    async with grpc_harness.server(settings, snapshot=grpc_harness.kvs(50)) as srv, \
            grpc_harness.grpcio_client(srv.port) as client, \
            grpc_harness.raw_connection(srv.port) as raw:
        await client.recv_kind("finished", skip=("header", "update"))
        sid = raw.h2.start()
        await raw.read_until(lambda: any(r.WhichOneof("msg") == "finished"
                                         for r in raw.h2.streams[sid].responses()))
        assert len(srv.ctx.sessions) == 2

        srv.ctx.draining.set()
        end = await client.ended()
        assert end.code == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in end.details

        await raw.read_until(lambda: raw.closed)
        assert raw.h2.goaway is not None and raw.h2.goaway.error_code == 0
        assert raw.h2.goaway.last_stream_id == sid
        assert raw.h2.streams[sid].status == (14, "server is shutting down")
        # GOAWAY came first, then the stream's trailers, then the final GOAWAY.
        kinds = [type(f).__name__ for f in raw.h2.frames]
        first_goaway = kinds.index("GoAwayFrame")
        assert "HeadersFrame" in kinds[first_goaway:]
        assert kinds[-1] == "GoAwayFrame", kinds[first_goaway - 2:]
        # Every connection task is gone: the server nursery can exit.
        await srv.wait_until(lambda: not srv.conn_nursery.child_tasks)
        assert not srv.ctx.sessions
