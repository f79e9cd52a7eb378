"""The gRPC client's pure core against an in-memory HTTP/2 server (h2, no sockets, no loop)."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import pytest

from trio_typha.grpcwire.framing import MessageDecoder
from trio_typha.grpcwire.status import GrpcError, StatusCode
from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.grpc import encode_once
from trio_typha.protocols.grpc import typha_pb2 as pb
from trio_typha.protocols.grpc.client_session import (
    ClientSession,
    Finished,
    Header,
    StatusChanged,
    Updates,
)


class Server:
    """h2's server side, answering the client's one stream."""

    def __init__(self, client: ClientSession) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None))
        self.h2.initiate_connection()
        self.requests: list[pb.SyncRequest] = []
        self._decoder = MessageDecoder(1 << 20)
        self.sid = 0
        self.client = client
        self.pump()

    def pump(self) -> list:
        """Client bytes to the server; returns the client's events for the server's bytes."""
        for ev in self.h2.receive_data(self.client.data_to_send()):
            if isinstance(ev, h2.events.RequestReceived):
                self.sid = ev.stream_id
                assert dict(ev.headers)[b":path"] == b"/typha.v1.Sync/Sync"
            elif isinstance(ev, h2.events.DataReceived):
                self.requests += [pb.SyncRequest.FromString(p)
                                  for p in self._decoder.feed(ev.data)]
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        return self.client.receive_data(self.h2.data_to_send())

    def headers(self) -> None:
        self.h2.send_headers(self.sid, [(b":status", b"200"),
                                        (b"content-type", b"application/grpc")])

    def send(self, message: bytes) -> None:
        self.h2.send_data(self.sid, message)

    def trailers(self, code: int, message: str = "") -> None:
        self.h2.send_headers(self.sid, [(b"grpc-status", str(code).encode()),
                                        (b"grpc-message", message.encode())], end_stream=True)


UPDATE = SerializedUpdate("/k", b"v", "7", update_type=UpdateType.NEW)


def test_start_snapshot_updates_ping_ack_and_ok_trailers() -> None:
    client = ClientSession("bgp", hostname="node-1", version="v1")
    server = Server(client)
    assert server.requests[0].start.syncer_type == "bgp"
    assert server.requests[0].start.hostname == "node-1"
    server.headers()
    server.send(encode_once.header_message(conn_id=5, server_version="s", syncer_type="bgp",
                                           status=SyncStatus.IN_SYNC))
    server.send(encode_once._updates([UPDATE]))
    server.send(encode_once._framed(pb.SyncResponse(finished=pb.Finished(
        sync_status=pb.SYNC_STATUS_IN_SYNC, snapshot_size=1))))
    server.send(encode_once._updates([UPDATE]))
    server.send(encode_once.ping_message(9, 123))
    server.send(encode_once.status_message(SyncStatus.RESYNC_IN_PROGRESS))
    events = server.pump()
    assert events == [Header(5, "s", "bgp", SyncStatus.IN_SYNC), Updates([UPDATE], True),
                      Finished(SyncStatus.IN_SYNC, 1), Updates([UPDATE], False),
                      StatusChanged(SyncStatus.RESYNC_IN_PROGRESS)]
    server.pump()  # the ack the ping queued reaches the server
    assert server.requests[-1].ack.ping_id == 9
    assert server.requests[-1].ack.ping_timestamp_unix_nanos == 123
    assert not client.ended
    server.trailers(0)
    assert server.pump() == [] and client.ended and client.error is None


def test_error_status_trailers_and_trailers_only() -> None:
    client = ClientSession("felix")
    server = Server(client)
    server.headers()
    server.trailers(int(StatusCode.UNAVAILABLE), "fell behind")
    server.pump()
    assert client.ended and client.error is not None
    assert (client.error.code, client.error.message) == (StatusCode.UNAVAILABLE, "fell behind")

    client = ClientSession("felix")
    server = Server(client)
    server.h2.send_headers(server.sid, [(b":status", b"200"), (b"grpc-status", b"3"),
                                        (b"grpc-message", b"bad")], end_stream=True)
    server.pump()
    assert client.ended and client.error is not None
    assert client.error.code is StatusCode.INVALID_ARGUMENT


def test_reset_goaway_and_http_errors_fail_at_once() -> None:
    client = ClientSession("felix")
    server = Server(client)
    server.h2.reset_stream(server.sid)
    with pytest.raises(GrpcError, match="reset"):
        server.pump()

    client = ClientSession("felix")
    server = Server(client)
    server.h2.send_headers(server.sid, [(b":status", b"503")])
    with pytest.raises(GrpcError, match="HTTP status 503"):
        server.pump()

    client = ClientSession("felix")
    server = Server(client)
    server.h2.close_connection()
    with pytest.raises(GrpcError) as info:
        client.receive_data(server.h2.data_to_send())
    assert info.value.code is StatusCode.UNAVAILABLE
    assert client.connection_closed().code is StatusCode.UNAVAILABLE


def test_a_ping_right_before_a_reset_is_not_answered() -> None:
    # Both in one read: h2 has closed the stream before the ping is handled, and the
    # reset is what the client reports.
    client = ClientSession("felix")
    server = Server(client)
    server.headers()
    server.send(encode_once.ping_message(3, 1))
    server.h2.reset_stream(server.sid)
    with pytest.raises(GrpcError, match="reset"):
        server.pump()
