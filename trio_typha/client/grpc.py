"""A gRPC ``typha.v1.Sync`` client on h2 and trio (no grpcio), used by the CLI and the fleet.

One task owns the socket: it reads, feeds h2, acknowledges DATA as messages are consumed,
answers pings, and yields decoded events to the caller.  A caller that stops iterating stops
reading, so flow control pushes back on the server instead of buffering here.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import trio

from ..model.kv import SerializedUpdate, SyncStatus, UpdateType
from ..protocols.grpc import typha_pb2 as pb
from ..protocols.grpc.framing import MessageDecoder, frame_message
from ..protocols.grpc.status import GrpcError, StatusCode, decode_grpc_message
from .tls import tls_handshake
from .view import SyncView

PATH = "/typha.v1.Sync/Sync"
MAX_MESSAGE = 64 << 20


@dataclass(frozen=True, slots=True)
class Header:
    server_conn_id: int
    server_version: str
    syncer_type: str
    status: SyncStatus


@dataclass(frozen=True, slots=True)
class Updates:
    updates: list[SerializedUpdate]
    snapshot: bool  # part of the initial snapshot


@dataclass(frozen=True, slots=True)
class Finished:
    status: SyncStatus
    snapshot_size: int


@dataclass(frozen=True, slots=True)
class StatusChanged:
    status: SyncStatus


SyncEvent = Header | Updates | Finished | StatusChanged


def kv_from_pb(kv: pb.KV) -> SerializedUpdate:
    return SerializedUpdate(kv.key, None if kv.deleted or not kv.value else kv.value,
                            kv.revision, kv.v3_resource_version, kv.ttl_nanos,
                            UpdateType(kv.update_type))


async def open_stream(host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                      server_hostname: str | None = None, server_cn: str = "",
                      server_uri_san: str = "") -> trio.abc.Stream:
    """TCP (and TLS, checking the server's CN / URI SAN; see :mod:`.tls`) to a server."""
    sock = await trio.open_tcp_stream(host, port)
    if ssl_context is None:
        return sock
    # gRPC over TLS negotiates HTTP/2 by ALPN (the server also tells it by the preface).
    ssl_context.set_alpn_protocols(["h2"])
    try:
        return await tls_handshake(sock, ssl_context, server_hostname=server_hostname or host,
                                   server_cn=server_cn, server_uri_san=server_uri_san)
    except BaseException:
        await trio.aclose_forcefully(sock)
        raise


async def sync(stream: trio.abc.Stream, syncer_type: str, *, hostname: str = "",
               info: str = "trio-typha client", version: str = "",
               authority: str = "localhost") -> AsyncIterator[SyncEvent]:
    """Run one Sync stream over ``stream``; yields events until the server ends it.

    Raises :class:`GrpcError` if the stream ends with a non-OK status (or the connection
    ends without trailers).
    """
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                header_encoding=None))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
    conn.increment_flow_control_window(16 << 20)
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", PATH.encode()),
        (b":authority", authority.encode()), (b"content-type", b"application/grpc"),
        (b"te", b"trailers"), (b"user-agent", b"trio-typha-client"),
    ])
    start = pb.SyncRequest(start=pb.SyncRequestStart(syncer_type=syncer_type, hostname=hostname,
                                                     info=info, version=version))
    conn.send_data(sid, frame_message(start.SerializeToString()))
    await stream.send_all(conn.data_to_send())
    decoder = MessageDecoder(MAX_MESSAGE)
    finished = False
    http_status = b""
    while True:
        data = await stream.receive_some(1 << 16)
        if not data:
            raise GrpcError(StatusCode.UNAVAILABLE, "connection closed without trailers")
        out: list[SyncEvent] = []
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            # h2 closes a client's state machine at the server's GOAWAY, so frames the server
            # still sends after a graceful GOAWAY (our stream's trailers) land here.
            if conn.state_machine.state is h2.connection.ConnectionState.CLOSED:
                raise GrpcError(StatusCode.UNAVAILABLE, "server sent GOAWAY") from None
            raise GrpcError(StatusCode.INTERNAL, f"HTTP/2 protocol error: {exc}") from None
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                http_status = dict(event.headers).get(b":status", b"")
                trailers_only = dict(event.headers).get(b"grpc-status")
                if trailers_only is not None:
                    _raise_for_status(dict(event.headers))
                    return
            elif isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                for payload in decoder.feed(event.data):
                    msg = pb.SyncResponse.FromString(payload)
                    ev, finished = _event(msg, finished)
                    if msg.WhichOneof("msg") == "ping":
                        ack = pb.SyncRequest(ack=pb.Ack(
                            ping_id=msg.ping.id,
                            ping_timestamp_unix_nanos=msg.ping.timestamp_unix_nanos))
                        conn.send_data(sid, frame_message(ack.SerializeToString()))
                    if ev is not None:
                        out.append(ev)
                conn.acknowledge_received_data(event.flow_controlled_length, sid)
            elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == sid:
                await stream.send_all(conn.data_to_send())
                for ev in out:
                    yield ev
                _raise_for_status(dict(event.headers))
                return
            elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                raise GrpcError(StatusCode.UNAVAILABLE,
                                f"stream reset by server (error code {event.error_code})")
            elif isinstance(event, h2.events.ConnectionTerminated):
                raise GrpcError(StatusCode.UNAVAILABLE,
                                f"server sent GOAWAY (error code {event.error_code})")
        pending = conn.data_to_send()
        if pending:
            await stream.send_all(pending)
        if http_status and http_status != b"200":
            raise GrpcError(StatusCode.UNKNOWN, f"HTTP status {http_status.decode()}")
        for ev in out:
            yield ev


def _event(msg: pb.SyncResponse, finished: bool) -> tuple[SyncEvent | None, bool]:
    which = msg.WhichOneof("msg")
    if which == "header":
        h = msg.header
        return Header(h.server_conn_id, h.server_version, h.syncer_type,
                      SyncStatus(h.sync_status)), finished
    if which == "update":
        return Updates([kv_from_pb(kv) for kv in msg.update.kvs], not finished), finished
    if which == "finished":
        return Finished(SyncStatus(msg.finished.sync_status), msg.finished.snapshot_size), True
    if which == "status":
        return StatusChanged(SyncStatus(msg.status.sync_status)), finished
    return None, finished


def _raise_for_status(headers: dict[bytes, bytes]) -> None:
    code = int(headers.get(b"grpc-status", b"2"))
    if code != 0:
        message = decode_grpc_message(headers.get(b"grpc-message", b"").decode("ascii",
                                                                                 "replace"))
        raise GrpcError(StatusCode(code), message)


def apply_event(view: SyncView, event: SyncEvent) -> None:
    """Fold one event into ``view``."""
    if isinstance(event, Header):
        view.status = event.status
    elif isinstance(event, Updates):
        view.apply(event.updates)
    elif isinstance(event, Finished):
        view.status = event.status
        view.snapshot_done = True
        view.snapshot_size = event.snapshot_size
    elif isinstance(event, StatusChanged):
        view.status = event.status
