"""Sans-IO client side of one ``typha.v1.Sync`` stream over HTTP/2 (pure: no socket, no
trio), as :mod:`trio_typha.protocols.gob.client_session` is for Typha's gob protocol.

Feed it the server's bytes with :meth:`ClientSession.receive_data`; it returns the decoded
events, queues what must go back (flow-control credit, ping acks) for
:meth:`ClientSession.data_to_send`, and says when the stream has :attr:`~ClientSession.ended`
and how (:attr:`~ClientSession.error`).  The trio shell is :mod:`trio_typha.client.grpc`.
"""

from __future__ import annotations

__sans_io__ = True

import contextlib
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from ...cache.digest import DigestError, KeyTree, Query, answer
from ...grpcwire.framing import MessageDecoder, frame_message
from ...grpcwire.status import GrpcError, StatusCode, decode_grpc_message
from ...model.kv import SerializedUpdate, SyncStatus, UpdateType
from . import typha_pb2 as pb
from .encode_once import SYNC_PATH

#: Largest response message accepted (a snapshot batch of very large values).
MAX_MESSAGE = 64 << 20


@dataclass(frozen=True, slots=True)
class Header:
    server_conn_id: int
    server_version: str
    syncer_type: str
    status: SyncStatus
    #: The server's cache epoch, and how the stream starts: "snapshot" (the client's copy
    #: is replaced), "position" or "digest" (it is kept and amended).
    epoch: int = 0
    resume: str = "snapshot"


@dataclass(frozen=True, slots=True)
class Updates:
    updates: list[SerializedUpdate]
    snapshot: bool  # part of the initial snapshot (or of a resume's repair)
    seq: int = 0  # the server's breadcrumb (0: none, e.g. in a snapshot)


@dataclass(frozen=True, slots=True)
class Finished:
    status: SyncStatus
    snapshot_size: int
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Resume:
    """What a client kept from an earlier stream: the position it reached and (for a
    resume by digest, on any replica) the hash tree of its copy."""

    epoch: int = 0
    seq: int = 0
    tree: KeyTree | None = None


_METHODS = {0: "snapshot", 1: "position", 2: "digest"}


@dataclass(frozen=True, slots=True)
class StatusChanged:
    status: SyncStatus


SyncEvent = Header | Updates | Finished | StatusChanged


def kv_from_pb(kv: pb.KV) -> SerializedUpdate:
    return SerializedUpdate(kv.key, None if kv.deleted or not kv.value else kv.value,
                            kv.revision, kv.v3_resource_version, kv.ttl_nanos,
                            UpdateType(kv.update_type))


class ClientSession:
    """One Sync stream, from the client's side."""

    def __init__(self, syncer_type: str, *, hostname: str = "",
                 info: str = "trio-typha client", version: str = "",
                 authority: str = "localhost", resume: Resume | None = None) -> None:
        self._h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None))
        conn = self._h2
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        conn.increment_flow_control_window(16 << 20)
        self._sid = sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", SYNC_PATH.encode()),
            (b":authority", authority.encode()), (b"content-type", b"application/grpc"),
            (b"te", b"trailers"), (b"user-agent", b"trio-typha-client"),
        ])
        start = pb.SyncRequest(start=pb.SyncRequestStart(
            syncer_type=syncer_type, hostname=hostname, info=info, version=version))
        self._tree = resume.tree if resume is not None else None
        if resume is not None:
            start.start.resume.epoch = resume.epoch
            start.start.resume.seq = resume.seq
            if resume.tree is not None:
                start.start.resume.root = resume.tree.root.to_bytes(8, "big")
        conn.send_data(sid, frame_message(start.SerializeToString()))
        self._decoder = MessageDecoder(MAX_MESSAGE)
        self._snapshot_finished = False
        self._http_status = b""
        #: The server ended the stream (trailers); :attr:`error` says whether it failed.
        self.ended = False
        self.error: GrpcError | None = None

    def data_to_send(self) -> bytes:
        return self._h2.data_to_send()

    def connection_closed(self) -> GrpcError:
        """What it means that the server closed the connection now."""
        return GrpcError(StatusCode.UNAVAILABLE, "connection closed without trailers")

    def receive_data(self, data: bytes | bytearray) -> list[SyncEvent]:
        """The events in ``data``; raises :class:`GrpcError` if the stream fails at once
        (reset, GOAWAY, a protocol error, an HTTP error status)."""
        conn, sid = self._h2, self._sid
        out: list[SyncEvent] = []
        try:
            events = conn.receive_data(bytes(data))
        except h2.exceptions.ProtocolError as exc:
            # h2 closes a client's state machine at the server's GOAWAY, so frames the server
            # still sends after a graceful GOAWAY (our stream's trailers) land here.
            if conn.state_machine.state is h2.connection.ConnectionState.CLOSED:
                raise GrpcError(StatusCode.UNAVAILABLE, "server sent GOAWAY") from None
            raise GrpcError(StatusCode.INTERNAL, f"HTTP/2 protocol error: {exc}") from None
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                self._http_status = headers.get(b":status", b"")
                if b"grpc-status" in headers:  # trailers-only response
                    self._end(headers)
                    return out
            elif isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                for payload in self._decoder.feed(event.data):
                    ev = self._message(pb.SyncResponse.FromString(payload))
                    if ev is not None:
                        out.append(ev)
                conn.acknowledge_received_data(event.flow_controlled_length, sid)
            elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == sid:
                self._end(dict(event.headers))
                return out
            elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                raise GrpcError(StatusCode.UNAVAILABLE,
                                f"stream reset by server (error code {event.error_code})")
            elif isinstance(event, h2.events.ConnectionTerminated):
                raise GrpcError(StatusCode.UNAVAILABLE,
                                f"server sent GOAWAY (error code {event.error_code})")
        if self._http_status and self._http_status != b"200":
            raise GrpcError(StatusCode.UNKNOWN, f"HTTP status {self._http_status.decode()}")
        return out

    def _message(self, msg: pb.SyncResponse) -> SyncEvent | None:
        which = msg.WhichOneof("msg")
        if which == "header":
            h = msg.header
            return Header(h.server_conn_id, h.server_version, h.syncer_type,
                          SyncStatus(h.sync_status), h.epoch,
                          _METHODS.get(h.resume_method, "snapshot"))
        if which == "update":
            return Updates([kv_from_pb(kv) for kv in msg.update.kvs],
                           not self._snapshot_finished, msg.update.seq)
        if which == "finished":
            self._snapshot_finished = True
            return Finished(SyncStatus(msg.finished.sync_status), msg.finished.snapshot_size,
                            msg.finished.seq)
        if which == "digest_query":
            self._answer_digest(msg.digest_query)
            return None
        if which == "status":
            return StatusChanged(SyncStatus(msg.status.sync_status))
        if which == "ping":
            ack = pb.SyncRequest(ack=pb.Ack(
                ping_id=msg.ping.id, ping_timestamp_unix_nanos=msg.ping.timestamp_unix_nanos))
            self._send(ack)
        return None

    def _answer_digest(self, q: pb.DigestQuery) -> None:
        if self._tree is None:
            raise GrpcError(StatusCode.INTERNAL, "server sent a digest query unasked")
        try:
            ans = answer(self._tree, Query(tuple(q.nodes), tuple(q.leaves), tuple(q.names)))
        except DigestError as exc:
            raise GrpcError(StatusCode.INTERNAL, f"server's digest query: {exc}") from None
        reply = pb.SyncRequest(digest=pb.DigestAnswer(
            sums=ans.sums, leaves=ans.leaves, names=ans.names))
        self._send(reply)

    def _send(self, request: pb.SyncRequest) -> None:
        # The server may have reset the stream right after this message (h2 has seen the
        # whole read): nothing to answer any more; the reset is reported from the same data.
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            self._h2.send_data(self._sid, frame_message(request.SerializeToString()))

    def _end(self, headers: dict[bytes, bytes]) -> None:
        self.ended = True
        code = int(headers.get(b"grpc-status", b"2"))
        if code != 0:
            message = decode_grpc_message(
                headers.get(b"grpc-message", b"").decode("ascii", "replace"))
            self.error = GrpcError(StatusCode(code), message)
