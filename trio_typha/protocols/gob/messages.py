"""Typha's eight wire messages (syncproto), their gob shapes and registered names.

Field order is Go's declaration order: it fixes gob's field numbers.  Struct and field names
are what Go's decoder matches on, and the registered names keep Typha's pre-monorepo
package path (docs/typha-protocol.md §2.2).  Every message travels inside :class:`Envelope`.

``MsgKVs`` carries :class:`trio_typha.model.kv.SerializedUpdate` directly, so the updates the
cache publishes are encoded without conversion.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...model.kv import SerializedUpdate, SyncStatus, UpdateType
from .codec import (
    BOOL,
    BYTES,
    INT,
    INTERFACE,
    SMALL_UINT,
    STRING,
    UINT,
    UINT8,
    DecoderView,
    Field,
    GobEncoded,
    GobError,
    Registry,
    Slice,
    Struct,
    encode_int,
    encode_uint,
)
from .gotime import ZERO_TIME, GoTime

REGISTERED_PREFIX = "github.com/projectcalico/typha/pkg/syncproto."
COMPRESSION_SNAPPY = "snappy"


@dataclass(frozen=True, slots=True)
class MsgClientHello:
    hostname: str = ""
    info: str = ""
    version: str = ""
    syncer_type: str = ""
    supports_decoder_restart: bool = False
    supported_compression_algorithms: tuple[str, ...] = ()
    supports_modern_policy_keys: bool = False
    client_conn_id: int = 0


@dataclass(frozen=True, slots=True)
class MsgServerHello:
    version: str = ""
    syncer_type: str = ""
    supports_node_resource_updates: bool = False
    server_conn_id: int = 0


@dataclass(frozen=True, slots=True)
class MsgDecoderRestart:
    message: str = ""
    compression_algorithm: str = ""


@dataclass(frozen=True, slots=True)
class MsgACK:
    pass


@dataclass(frozen=True, slots=True)
class MsgSyncStatus:
    sync_status: SyncStatus = SyncStatus.WAIT_FOR_DATASTORE


@dataclass(frozen=True, slots=True)
class MsgPing:
    timestamp: GoTime = ZERO_TIME


@dataclass(frozen=True, slots=True)
class MsgPong:
    ping_timestamp: GoTime = ZERO_TIME
    pong_timestamp: GoTime = ZERO_TIME


@dataclass(frozen=True, slots=True)
class MsgKVs:
    kvs: tuple[SerializedUpdate, ...] = ()


@dataclass(frozen=True, slots=True)
class Envelope:
    message: Any = None


Message = (MsgClientHello | MsgServerHello | MsgDecoderRestart | MsgACK | MsgSyncStatus
           | MsgPing | MsgPong | MsgKVs)


def go_text(value: Any) -> str:
    """Go's ``fmt.Sprint`` of a decoded interface value (how Go clients read Revision)."""
    if value is None:
        return "<nil>"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return "[" + " ".join(str(b) for b in value) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(go_text(v) for v in value) + "]"
    return str(value)


_UPDATE_TYPES = {int(t): t for t in UpdateType}
# An interface holding a Go string: name "string", then type id 6 (gob int 0x0c).
_STRING_IFACE = b"\x06string\x0c"


def _encode_update(out: bytearray, u: SerializedUpdate) -> None:
    """SerializedUpdate's gob struct body; the generic encoder's bytes, several times faster.

    Field numbers: Key 0, Value 1, Revision 2, V3ResourceVersion 3, TTL 4, UpdateType 5.
    Revision is always sent, as a "string" interface, even when empty.
    """
    last = -1
    if u.key:
        b = u.key.encode("utf-8", "surrogateescape")
        out += b"\x01"
        out += SMALL_UINT[len(b)] if len(b) < 128 else encode_uint(len(b))
        out += b
        last = 0
    if u.value:
        out += SMALL_UINT[1 - last]
        out += SMALL_UINT[len(u.value)] if len(u.value) < 128 else encode_uint(len(u.value))
        out += u.value
        last = 1
    rev = u.revision.encode("utf-8", "surrogateescape")
    head = SMALL_UINT[len(rev)] if len(rev) < 128 else encode_uint(len(rev))
    out += SMALL_UINT[2 - last]
    out += _STRING_IFACE
    out += encode_uint(1 + len(head) + len(rev))
    out += b"\x00"
    out += head
    out += rev
    last = 2
    if u.v3_resource_version:
        b = u.v3_resource_version.encode("utf-8", "surrogateescape")
        out += b"\x01"
        out += SMALL_UINT[len(b)] if len(b) < 128 else encode_uint(len(b))
        out += b
        last = 3
    if u.ttl_ns:
        out += SMALL_UINT[4 - last]
        out += encode_int(u.ttl_ns)
        last = 4
    if u.update_type:
        out += SMALL_UINT[5 - last]
        out += SMALL_UINT[u.update_type]
    out.append(0)


def _update_decoder(decoder: DecoderView) -> Callable[[Any], SerializedUpdate]:
    """Decoder for a peer whose SerializedUpdate definition matches ours exactly.

    Works on the cursor's buffer directly for the common one-byte lengths and deltas and
    falls back to the cursor's methods otherwise; the client decodes whole snapshots with it.
    """
    decode_interface = decoder.decode_interface

    def decode_update(r: Any) -> SerializedUpdate:
        buf, end = r.buf, r.end
        key = v3 = ""
        value = revision = None
        ttl = update_type = 0
        num = -1
        while True:
            pos = r.pos
            if pos >= end:
                raise GobError("unexpected end of message")
            delta = buf[pos]
            if delta == 0:
                r.pos = pos + 1
                break
            if delta < 128:
                r.pos = pos + 1
            else:
                delta = r.uint()
            num += delta
            if num == 0:
                key = r.string()
            elif num == 1:
                value = r.take(r.uint())
            elif num == 2:
                p = r.pos
                if (buf[p:p + 8] == _STRING_IFACE and p + 10 <= end and buf[p + 8] < 128
                        and buf[p + 9] == 0):
                    # "string", id 6, one-byte value count, singleton delta 0, the string
                    r.pos = p + 10
                    revision = r.string()
                else:
                    revision = decode_interface(r)
            elif num == 3:
                v3 = r.string()
            elif num == 4:
                ttl = r.signed()
            elif num == 5:
                update_type = r.uint()
            else:
                raise GobError(f"field number {num} out of range")
        try:
            kind = _UPDATE_TYPES[update_type]
        except KeyError:
            raise GobError(f"unknown UpdateType {update_type}") from None
        return SerializedUpdate(key, value or None,
                                revision if type(revision) is str else go_text(revision),
                                v3, ttl, kind)
    return decode_update


def _make_update(key: str = "", value: bytes | None = None, revision: Any = None,
                 v3_resource_version: str = "", ttl_ns: int = 0,
                 update_type: int = 0) -> SerializedUpdate:
    return SerializedUpdate(key, value or None, go_text(revision), v3_resource_version, ttl_ns,
                            UpdateType(update_type))


TIME = GobEncoded("Time", GoTime.marshal_binary, GoTime.unmarshal_binary,
                  lambda t: t.is_zero)

SERIALIZED_UPDATE = Struct("SerializedUpdate", [
    Field("Key", "key", STRING),
    Field("Value", "value", BYTES),
    Field("Revision", "revision", INTERFACE),
    Field("V3ResourceVersion", "v3_resource_version", STRING),
    Field("TTL", "ttl_ns", INT),
    Field("UpdateType", "update_type", UINT8),
], _make_update, fast_encode=_encode_update, fast_decode=_update_decoder)

MSG_CLIENT_HELLO = Struct("MsgClientHello", [
    Field("Hostname", "hostname", STRING),
    Field("Info", "info", STRING),
    Field("Version", "version", STRING),
    Field("SyncerType", "syncer_type", STRING),
    Field("SupportsDecoderRestart", "supports_decoder_restart", BOOL),
    Field("SupportedCompressionAlgorithms", "supported_compression_algorithms",
          Slice("[]syncproto.CompressionAlgorithm", STRING)),
    Field("SupportsModernPolicyKeys", "supports_modern_policy_keys", BOOL),
    Field("ClientConnID", "client_conn_id", UINT),
], MsgClientHello)

MSG_SERVER_HELLO = Struct("MsgServerHello", [
    Field("Version", "version", STRING),
    Field("SyncerType", "syncer_type", STRING),
    Field("SupportsNodeResourceUpdates", "supports_node_resource_updates", BOOL),
    Field("ServerConnID", "server_conn_id", UINT),
], MsgServerHello)

MSG_DECODER_RESTART = Struct("MsgDecoderRestart", [
    Field("Message", "message", STRING),
    Field("CompressionAlgorithm", "compression_algorithm", STRING),
], MsgDecoderRestart)

MSG_ACK = Struct("MsgACK", [], MsgACK)

MSG_SYNC_STATUS = Struct("MsgSyncStatus", [
    Field("SyncStatus", "sync_status", UINT8),
], lambda sync_status=0: MsgSyncStatus(SyncStatus(sync_status)))

MSG_PING = Struct("MsgPing", [Field("Timestamp", "timestamp", TIME)], MsgPing)

MSG_PONG = Struct("MsgPong", [
    Field("PingTimestamp", "ping_timestamp", TIME),
    Field("PongTimestamp", "pong_timestamp", TIME),
], MsgPong)

MSG_KVS = Struct("MsgKVs", [
    Field("KVs", "kvs", Slice("[]syncproto.SerializedUpdate", SERIALIZED_UPDATE)),
], MsgKVs)

ENVELOPE = Struct("Envelope", [Field("Message", "message", INTERFACE)], Envelope)

#: (class, gob type) of every message, in the order ``typha/pkg/syncproto/sync_proto.go``'s
#: ``init`` registers them.
MESSAGE_TYPES: tuple[tuple[type, Struct], ...] = (
    (MsgClientHello, MSG_CLIENT_HELLO),
    (MsgDecoderRestart, MSG_DECODER_RESTART),
    (MsgACK, MSG_ACK),
    (MsgServerHello, MSG_SERVER_HELLO),
    (MsgSyncStatus, MSG_SYNC_STATUS),
    (MsgPing, MSG_PING),
    (MsgPong, MSG_PONG),
    (MsgKVs, MSG_KVS),
)


def make_registry() -> Registry:
    """Go's basic registrations plus Typha's eight messages."""
    registry = Registry()
    for cls, gtype in MESSAGE_TYPES:
        registry.register(REGISTERED_PREFIX + gtype.name, gtype, cls)
    return registry


REGISTRY = make_registry()


def message_name(message: Any) -> str:
    """Short name for logs: the message class, or the Python type of anything else."""
    return "nil" if message is None else type(message).__name__
