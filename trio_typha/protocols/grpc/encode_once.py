"""Sync service messages: encoded once per breadcrumb, parsed once per request (pure).

Everything derived from a breadcrumb is built through :meth:`Breadcrumb.memo`, so the
protobuf encoding and the 5-byte gRPC prefix are paid once no matter how many streams
send it; streams share the very same ``bytes`` objects.
"""

from __future__ import annotations

__sans_io__ = True

from typing import cast

from google.protobuf.message import DecodeError

from ...cache.core import Breadcrumb
from ...cache.digest import Answer, Query
from ...grpcwire.framing import frame_message
from ...grpcwire.status import GrpcError, StatusCode
from ...model.kv import SerializedUpdate, SyncStatus, UpdateType
from . import typha_pb2 as pb

SERVICE = "typha.v1.Sync"
SYNC_PATH = f"/{SERVICE}/Sync"


# The model's enums have the proto's numbers; the generated stubs type fields as proto enums.
_PB_UPDATE_TYPE = {u: cast("pb.UpdateType", int(u)) for u in UpdateType}
_PB_STATUS = {s: cast("pb.SyncStatus", int(s)) for s in SyncStatus}


def kv_message(update: SerializedUpdate) -> pb.KV:
    return pb.KV(
        key=update.key,
        value=update.value or b"",
        revision=update.revision,
        v3_resource_version=update.v3_resource_version,
        ttl_nanos=update.ttl_ns,
        update_type=_PB_UPDATE_TYPE[update.update_type],
        deleted=update.deleted,
    )


def _framed(response: pb.SyncResponse) -> bytes:
    return frame_message(response.SerializeToString())


def _updates(updates: tuple[SerializedUpdate, ...] | list[SerializedUpdate],
             seq: int = 0) -> bytes:
    return _framed(pb.SyncResponse(update=pb.Updates(kvs=[kv_message(u) for u in updates],
                                                     seq=seq)))


#: Memo key of a breadcrumb's update message (a ServerWorkers worker is handed it).
UPDATE_KEY = ("grpc", "update")


def update_message(crumb: Breadcrumb) -> bytes:
    """The breadcrumb's updates as one framed message; ``b""`` if it only changed status."""
    return crumb.memo(UPDATE_KEY,
                      lambda c: _updates(c.updates, c.seq) if c.updates else b"")


def snapshot_messages(crumb: Breadcrumb, batch_size: int) -> tuple[bytes, ...]:
    """The breadcrumb's snapshot as framed messages of at most ``batch_size`` KVs each.

    Entries are sorted by key and all NEW (the cache's snapshot guarantees both); an
    empty snapshot is no messages at all.
    """
    def build(c: Breadcrumb) -> tuple[bytes, ...]:
        kvs = c.snapshot()
        return tuple(_updates(kvs[i:i + batch_size]) for i in range(0, len(kvs), batch_size))
    return crumb.memo(("grpc", "snapshot", batch_size), build)


def finished_message(crumb: Breadcrumb) -> bytes:
    """End of the snapshot taken at ``crumb``, with its status and size."""
    return crumb.memo(("grpc", "finished"), lambda c: resumed_message(c, len(c.snapshot())))


def resumed_message(crumb: Breadcrumb, size: int) -> bytes:
    """End of a start at ``crumb`` that sent ``size`` KVs (a resume: the client's copy is
    complete as of ``crumb``, and the stream continues after it)."""
    return _framed(pb.SyncResponse(finished=pb.Finished(
        sync_status=_PB_STATUS[crumb.status], snapshot_size=size, seq=crumb.seq)))


def repair_messages(crumb: Breadcrumb, updates: list[SerializedUpdate],
                    batch_size: int) -> tuple[bytes, ...]:
    """The updates and deletions (as of ``crumb``, the newest) a resume by digest found a
    client lacking; clients that lack the same keys share the encoding."""
    if not updates:
        return ()
    # One memo entry per breadcrumb (the build counter counts it once), holding the
    # encodings by key set.
    by_keys: dict[tuple[str, ...], tuple[bytes, ...]] = crumb.memo(
        ("grpc", "repair", batch_size), lambda _: {})
    keys = tuple(u.key for u in updates)
    if (found := by_keys.get(keys)) is None:
        found = by_keys[keys] = tuple(_updates(updates[i:i + batch_size])
                                      for i in range(0, len(updates), batch_size))
    return found


def digest_query_message(query: Query) -> bytes:
    return _framed(pb.SyncResponse(digest_query=pb.DigestQuery(
        nodes=query.nodes, leaves=query.leaves, names=query.names)))


def digest_answer(msg: pb.DigestAnswer) -> Answer:
    return Answer(msg.sums, tuple(msg.leaves), tuple(msg.names))


_STATUS_MESSAGES = {
    status: _framed(pb.SyncResponse(status=pb.StatusChange(sync_status=_PB_STATUS[status])))
    for status in SyncStatus
}


def status_message(status: SyncStatus) -> bytes:
    return _STATUS_MESSAGES[status]


#: ResumeMethod by the name /connections and the metrics use.
RESUME_METHOD = {"snapshot": pb.RESUME_METHOD_SNAPSHOT, "position": pb.RESUME_METHOD_POSITION,
                 "digest": pb.RESUME_METHOD_DIGEST}


def header_message(*, conn_id: int, server_version: str, syncer_type: str,
                   status: SyncStatus, epoch: int = 0, resume: str = "snapshot") -> bytes:
    return _framed(pb.SyncResponse(header=pb.Header(
        server_conn_id=conn_id, server_version=server_version, syncer_type=syncer_type,
        sync_status=_PB_STATUS[status], epoch=epoch, resume_method=RESUME_METHOD[resume])))


def ping_message(ping_id: int, timestamp_ns: int) -> bytes:
    return _framed(pb.SyncResponse(ping=pb.Ping(id=ping_id, timestamp_unix_nanos=timestamp_ns)))


def parse_request(payload: bytes) -> pb.SyncRequest:
    """Decode one client message; a payload that is not a SyncRequest is INVALID_ARGUMENT."""
    request = pb.SyncRequest()
    try:
        request.ParseFromString(payload)
    except DecodeError as exc:
        raise GrpcError(StatusCode.INVALID_ARGUMENT,
                        f"request is not a valid SyncRequest: {exc}") from None
    return request
