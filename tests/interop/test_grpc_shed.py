"""Shedding a gRPC connection (rebalancing, drain) is GOAWAY, then UNAVAILABLE on its streams."""

from __future__ import annotations

import grpc


async def test_shed_grpc_connection_gets_goaway_then_unavailable(grpc_harness):
    async with grpc_harness.server(snapshot=grpc_harness.kvs(20)) as srv, \
            grpc_harness.grpcio_client(srv.port) as client, \
            grpc_harness.raw_connection(srv.port) as raw:
        await client.recv_kind("finished", skip=("header", "update"))
        sid = raw.h2.start()
        await raw.read_until(lambda: any(r.WhichOneof("msg") == "finished"
                                         for r in raw.h2.streams[sid].responses()))
        await srv.wait_until(lambda: len(srv.ctx.sessions) == 2)
        registry = srv.ctx.registry
        raw_conn = next(c for c in registry
                        if any(s.hostname != "test-host" for s in c.sessions.values()))
        raw_conn.close("re-balance load with other Typha instances")

        await raw.read_until(lambda: raw.closed)
        assert raw.h2.goaway is not None and raw.h2.goaway.error_code == 0
        assert raw.h2.streams[sid].status == (14, "re-balance load with other Typha instances")
        kinds = [type(f).__name__ for f in raw.h2.frames]
        assert "HeadersFrame" in kinds[kinds.index("GoAwayFrame"):]
        # The other client is untouched.
        await srv.wait_until(lambda: len(registry) == 1)
        (left,) = registry
        assert [s.hostname for s in left.sessions.values()] == ["test-host"]

        left.close("re-balance load with other Typha instances")
        end = await client.ended()
        assert end.code == grpc.StatusCode.UNAVAILABLE
        assert "re-balance" in end.details
        await srv.wait_until(lambda: not registry.sessions and not len(registry))
