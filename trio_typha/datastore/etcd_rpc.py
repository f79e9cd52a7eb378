"""etcd v3's gRPC API, sans I/O: request messages out, typed replies in.

The messages are protobuf (proto/etcd.proto, compiled into :mod:`.etcd_pb2`), each framed
with gRPC's 5-byte prefix (:mod:`trio_typha.grpcwire.framing`); the method paths are
``/etcdserverpb.<Service>/<Method>``.  A call's outcome is its trailers' ``grpc-status``:
:func:`check_status` turns a non-OK one into :class:`~.etcd_errors.EtcdServerError` with
etcd's message (``etcdserver: mvcc: required revision has been compacted``, ``etcdserver:
no leader``, ...).

Every request carries ``hasleader: true`` metadata, as clientv3's ``WithRequireLeader``
does: a member that has lost its leader then refuses the call, and cancels the watch
streams it carries, instead of leaving a watch silently cut off from the cluster.

Nothing here performs I/O; :mod:`.etcd_client` moves the bytes.
"""

from __future__ import annotations

__sans_io__ = True

from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from ..grpcwire.framing import frame_message
from ..grpcwire.status import StatusCode, decode_grpc_message
from . import etcd_pb2 as pb
from .etcd_errors import EtcdProtocolError, EtcdServerError

RANGE_PATH = b"/etcdserverpb.KV/Range"
PUT_PATH = b"/etcdserverpb.KV/Put"
DELETE_RANGE_PATH = b"/etcdserverpb.KV/DeleteRange"
COMPACT_PATH = b"/etcdserverpb.KV/Compact"
WATCH_PATH = b"/etcdserverpb.Watch/Watch"
STATUS_PATH = b"/etcdserverpb.Maintenance/Status"

#: etcd's watch id for a reply that answers a WatchProgressRequest (clientv3's
#: InvalidWatchID): it reports on the stream as a whole, not on one watch.
STREAM_PROGRESS_ID = -1

#: Largest reply accepted: a range page of ``page_size`` large values stays well under it.
MAX_MESSAGE = 64 << 20


def request_headers() -> list[tuple[bytes, bytes]]:
    """The HEADERS of a gRPC call to etcd (after the pseudo-headers)."""
    return [(b"content-type", b"application/grpc"), (b"te", b"trailers"),
            (b"user-agent", b"trio-typha"), (b"hasleader", b"true")]


@dataclass(frozen=True, slots=True)
class Header:
    """The response header every etcd reply carries."""

    cluster_id: str
    revision: int
    member_id: int = 0


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int = 0


@dataclass(frozen=True, slots=True)
class RangePage:
    """One page of a range: its ``kvs`` in key order, and whether ``more`` follow."""

    header: Header
    kvs: tuple[KeyValue, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class Status:
    header: Header
    version: str
    leader: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    deleted: bool
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class WatchResponse:
    """One message of a watch stream.

    ``created`` acknowledges the watch; ``canceled`` ends it (``compact_revision`` set when
    the start revision was compacted away); otherwise it carries ``events`` or, with no
    events, is a progress report: a progress notification of the watch (every change up to
    ``header.revision`` was sent), or the answer to a WatchProgressRequest.
    """

    header: Header
    watch_id: int = 0
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""
    events: tuple[WatchEvent, ...] = ()

    @property
    def progress_notify(self) -> bool:
        """A progress notification of this watch: its revision may be resumed from.

        The answer to a WatchProgressRequest is not: it proves the stream alive, but an
        etcd before 3.5 may send it ahead of events it has yet to deliver.
        """
        return not (self.created or self.canceled or self.events
                    or self.watch_id == STREAM_PROGRESS_ID)

    @property
    def stream_progress(self) -> bool:
        return self.watch_id == STREAM_PROGRESS_ID and not self.events


# -- requests -----------------------------------------------------------------------------

def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range cover every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\x00"  # etcd: every key >= key
    return stripped[:-1] + bytes([stripped[-1] + 1])


def next_page_key(last_key: bytes) -> bytes:
    """Where the next page of a range starts: just after the last key received."""
    return last_key + b"\x00"


def _framed(msg: Message) -> bytes:
    return frame_message(msg.SerializeToString())


def range_request(key: bytes, range_end: bytes, *, revision: int = 0, limit: int = 0) -> bytes:
    """A range over ``[key, range_end)`` at ``revision`` (0: the current one)."""
    return _framed(pb.RangeRequest(key=key, range_end=range_end, revision=revision,
                                   limit=limit))


def status_request() -> bytes:
    return _framed(pb.StatusRequest())


def put_request(key: bytes, value: bytes) -> bytes:
    return _framed(pb.PutRequest(key=key, value=value))


def delete_request(key: bytes, range_end: bytes = b"") -> bytes:
    return _framed(pb.DeleteRangeRequest(key=key, range_end=range_end))


def compaction_request(revision: int, *, physical: bool = True) -> bytes:
    return _framed(pb.CompactionRequest(revision=revision, physical=physical))


def watch_create(key: bytes, range_end: bytes, start_revision: int) -> bytes:
    """Open a watch over ``[key, range_end)`` replaying from ``start_revision``, with
    etcd's progress notifications on."""
    create = pb.WatchCreateRequest(key=key, range_end=range_end, start_revision=start_revision,
                                   progress_notify=True)
    return _framed(pb.WatchRequest(create_request=create))


def watch_progress() -> bytes:
    """Ask etcd to report the stream's progress now (an event-less reply, watch id -1)."""
    return _framed(pb.WatchRequest(progress_request=pb.WatchProgressRequest()))


# -- replies ------------------------------------------------------------------------------

_M = TypeVar("_M", bound=Message)


def _parse(cls: type[_M], payload: bytes) -> _M:
    msg = cls()
    try:
        msg.ParseFromString(payload)
    except DecodeError as exc:
        raise EtcdProtocolError(f"{cls.__name__}: not a valid message: {exc}") from None
    return msg


def _header(hdr: pb.ResponseHeader) -> Header:
    return Header(cluster_id=str(hdr.cluster_id), revision=hdr.revision,
                  member_id=hdr.member_id)


def _kv(kv: pb.KeyValue) -> KeyValue:
    return KeyValue(key=kv.key, value=kv.value, mod_revision=kv.mod_revision,
                    create_revision=kv.create_revision)


def decode_status(payload: bytes) -> Status:
    msg = _parse(pb.StatusResponse, payload)
    return Status(header=_header(msg.header), version=msg.version, leader=msg.leader)


def decode_range(payload: bytes) -> RangePage:
    msg = _parse(pb.RangeResponse, payload)
    return RangePage(header=_header(msg.header), kvs=tuple(_kv(kv) for kv in msg.kvs),
                     more=msg.more)


def decode_header(payload: bytes, cls: type[Message]) -> Header:
    """The header of any other unary reply (put, delete, compaction)."""
    msg = _parse(cls, payload)
    return _header(msg.header)  # type: ignore[attr-defined]


def decode_watch_response(payload: bytes) -> WatchResponse:
    msg = _parse(pb.WatchResponse, payload)
    events = []
    for ev in msg.events:
        if ev.type not in (pb.Event.PUT, pb.Event.DELETE):
            raise EtcdProtocolError(f"unknown watch event type {ev.type}")
        events.append(WatchEvent(deleted=ev.type == pb.Event.DELETE, kv=_kv(ev.kv)))
    return WatchResponse(header=_header(msg.header), watch_id=msg.watch_id,
                         created=msg.created, canceled=msg.canceled,
                         compact_revision=msg.compact_revision,
                         cancel_reason=msg.cancel_reason, events=tuple(events))


def check_status(headers: list[tuple[bytes, bytes]] | None, path: bytes) -> None:
    """Raise :class:`EtcdServerError` unless the call's trailers (or a Trailers-Only
    response's headers) say ``grpc-status: 0``."""
    fields = dict(headers or ())
    raw = fields.get(b"grpc-status")
    if raw is None:
        status = fields.get(b":status", b"")
        if status and status != b"200":
            raise EtcdServerError(f"HTTP {status.decode('latin-1')} from {path.decode()}",
                                  int(StatusCode.UNKNOWN))
        raise EtcdProtocolError(f"{path.decode()}: the call ended without a grpc-status")
    try:
        code = int(raw)
    except ValueError:
        raise EtcdProtocolError(f"{path.decode()}: grpc-status {raw!r}") from None
    if code != StatusCode.OK:
        message = decode_grpc_message(fields.get(b"grpc-message", b"").decode("ascii",
                                                                              "replace"))
        try:
            name = StatusCode(code).name
        except ValueError:
            name = f"grpc-status {code}"
        raise EtcdServerError(message or name, code)
