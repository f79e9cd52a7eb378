"""Sans-IO client side of Typha's gob protocol (what Felix's syncclient does on the wire).

Feed it the bytes read from the server; it returns events and queues the bytes to send back
(the hello, an ACK per decoder restart, a pong per ping).  On MsgDecoderRestart it stacks a
fresh gob decoder (over a snappy frame reader for "snappy") on whatever bytes follow the
restart message, including any already read.
"""

from __future__ import annotations

__sans_io__ = True

from dataclasses import dataclass

from ...model.kv import SerializedUpdate, SyncStatus
from . import snappy
from .codec import NEED_DATA, Decoder, Encoder, GobError
from .gotime import GoTime
from .messages import (
    COMPRESSION_SNAPPY,
    ENVELOPE,
    REGISTRY,
    Envelope,
    MsgACK,
    MsgClientHello,
    MsgDecoderRestart,
    MsgKVs,
    MsgPing,
    MsgPong,
    MsgServerHello,
    MsgSyncStatus,
    message_name,
)

DEFAULT_SYNCER_TYPE = "felix"
#: Typha's messages have no size limit; this only bounds one message's buffering.
DEFAULT_MAX_MESSAGE = 256 << 20


class TyphaProtocolError(Exception):
    """The server broke the protocol; the connection must be dropped."""


@dataclass(frozen=True, slots=True)
class ServerHelloReceived:
    hello: MsgServerHello


@dataclass(frozen=True, slots=True)
class DecoderRestarted:
    message: str
    algorithm: str


@dataclass(frozen=True, slots=True)
class KVsReceived:
    updates: tuple[SerializedUpdate, ...]


@dataclass(frozen=True, slots=True)
class SyncStatusReceived:
    status: SyncStatus


@dataclass(frozen=True, slots=True)
class PingAnswered:
    timestamp: GoTime


ClientEvent = (ServerHelloReceived | DecoderRestarted | KVsReceived | SyncStatusReceived
               | PingAnswered)


class ClientSession:
    """One connection's client state: decoders, restarts, replies."""

    def __init__(self, *, syncer_type: str = DEFAULT_SYNCER_TYPE, hostname: str = "",
                 info: str = "", version: str = "", compression: bool = True,
                 conn_id: int = 0, max_message_size: int = DEFAULT_MAX_MESSAGE) -> None:
        self.syncer_type = syncer_type or DEFAULT_SYNCER_TYPE
        self.compression = compression
        self.max_message_size = max_message_size
        self.server_hello: MsgServerHello | None = None
        self.restarts = 0
        self._encoder = Encoder(REGISTRY)
        self._gob = self._new_decoder()
        self._frames: snappy.FrameReader | None = None
        hello = MsgClientHello(
            hostname=hostname, info=info, version=version, syncer_type=syncer_type,
            supports_decoder_restart=compression,
            supported_compression_algorithms=(COMPRESSION_SNAPPY,) if compression else (),
            supports_modern_policy_keys=True, client_conn_id=conn_id)
        self._outgoing = bytearray(self._encode(hello))

    def data_to_send(self) -> bytes:
        """Bytes queued for the server (hello, ACKs, pongs); the queue is emptied."""
        out = bytes(self._outgoing)
        self._outgoing.clear()
        return out

    def receive_data(self, data: bytes | bytearray) -> list[ClientEvent]:
        """Bytes from the server; raises TyphaProtocolError if the server misbehaves."""
        try:
            if self._frames is not None:
                self._frames.feed(data)
            else:
                self._gob.feed(data)
            events: list[ClientEvent] = []
            while True:
                envelope = self._gob.next_value()
                if envelope is NEED_DATA:
                    # Decompress one chunk at a time, so that a restart stops us exactly at
                    # the end of the stream it ends.
                    chunk = self._frames.next_chunk() if self._frames is not None else None
                    if chunk is None:
                        return events
                    self._gob.feed(chunk)
                    continue
                event = self._on_message(envelope.message)
                if event is not None:
                    events.append(event)
        except (GobError, snappy.FramingError) as exc:
            raise TyphaProtocolError(f"undecodable data from server: {exc}") from exc

    def _on_message(self, msg: object) -> ClientEvent | None:
        if self.server_hello is None:
            if not isinstance(msg, MsgServerHello):
                raise TyphaProtocolError(
                    f"first message was {message_name(msg)}, not MsgServerHello")
            if not msg.supports_node_resource_updates:
                raise TyphaProtocolError("server does not support node resource updates")
            if (msg.syncer_type or DEFAULT_SYNCER_TYPE) != self.syncer_type:
                raise TyphaProtocolError(
                    f"server answered for syncer {msg.syncer_type!r}, not {self.syncer_type!r}")
            self.server_hello = msg
            return ServerHelloReceived(msg)
        if isinstance(msg, MsgKVs):
            return KVsReceived(msg.kvs)
        if isinstance(msg, MsgSyncStatus):
            return SyncStatusReceived(msg.sync_status)
        if isinstance(msg, MsgPing):
            self._outgoing += self._encode(MsgPong(ping_timestamp=msg.timestamp))
            return PingAnswered(msg.timestamp)
        if isinstance(msg, MsgDecoderRestart):
            self._restart(msg.compression_algorithm)
            return DecoderRestarted(msg.message, msg.compression_algorithm)
        if isinstance(msg, MsgServerHello):
            raise TyphaProtocolError("second MsgServerHello")
        return None  # nil, ACK, pong, hello, basic values: ignored, as Go's client does

    def _restart(self, algorithm: str) -> None:
        if not self.compression:
            raise TyphaProtocolError("MsgDecoderRestart sent to a client that announced no "
                                     "restart support")
        self.restarts += 1
        if algorithm in (COMPRESSION_SNAPPY, ""):
            if self._frames is None:
                rest = self._gob.unconsumed()
            else:
                if self._gob.unconsumed():
                    raise TyphaProtocolError("data after MsgDecoderRestart in the same "
                                             "snappy stream")
                rest = self._frames.unconsumed()
            self._gob = self._new_decoder()
            if algorithm == COMPRESSION_SNAPPY:
                self._frames = snappy.FrameReader()
                self._frames.feed(rest)
            else:
                self._frames = None
                self._gob.feed(rest)
        # Any other algorithm: Go's client keeps its decoder but still ACKs.
        self._outgoing += self._encode(MsgACK())

    def _new_decoder(self) -> Decoder:
        return Decoder(REGISTRY, ENVELOPE, max_message_size=self.max_message_size)

    def _encode(self, msg: object) -> bytes:
        return self._encoder.encode(Envelope(msg), ENVELOPE)
