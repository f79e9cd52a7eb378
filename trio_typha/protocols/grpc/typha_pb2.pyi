from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SyncStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SYNC_STATUS_WAIT_FOR_DATASTORE: _ClassVar[SyncStatus]
    SYNC_STATUS_RESYNC_IN_PROGRESS: _ClassVar[SyncStatus]
    SYNC_STATUS_IN_SYNC: _ClassVar[SyncStatus]

class UpdateType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UPDATE_TYPE_UNKNOWN: _ClassVar[UpdateType]
    UPDATE_TYPE_NEW: _ClassVar[UpdateType]
    UPDATE_TYPE_UPDATED: _ClassVar[UpdateType]
    UPDATE_TYPE_DELETED: _ClassVar[UpdateType]

class ResumeMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESUME_METHOD_SNAPSHOT: _ClassVar[ResumeMethod]
    RESUME_METHOD_POSITION: _ClassVar[ResumeMethod]
    RESUME_METHOD_DIGEST: _ClassVar[ResumeMethod]
SYNC_STATUS_WAIT_FOR_DATASTORE: SyncStatus
SYNC_STATUS_RESYNC_IN_PROGRESS: SyncStatus
SYNC_STATUS_IN_SYNC: SyncStatus
UPDATE_TYPE_UNKNOWN: UpdateType
UPDATE_TYPE_NEW: UpdateType
UPDATE_TYPE_UPDATED: UpdateType
UPDATE_TYPE_DELETED: UpdateType
RESUME_METHOD_SNAPSHOT: ResumeMethod
RESUME_METHOD_POSITION: ResumeMethod
RESUME_METHOD_DIGEST: ResumeMethod

class SyncRequest(_message.Message):
    __slots__ = ("start", "ack", "digest")
    START_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    start: SyncRequestStart
    ack: Ack
    digest: DigestAnswer
    def __init__(self, start: _Optional[_Union[SyncRequestStart, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., digest: _Optional[_Union[DigestAnswer, _Mapping]] = ...) -> None: ...

class SyncRequestStart(_message.Message):
    __slots__ = ("syncer_type", "hostname", "info", "version", "client_conn_id", "resume")
    SYNCER_TYPE_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CONN_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    syncer_type: str
    hostname: str
    info: str
    version: str
    client_conn_id: int
    resume: Resume
    def __init__(self, syncer_type: _Optional[str] = ..., hostname: _Optional[str] = ..., info: _Optional[str] = ..., version: _Optional[str] = ..., client_conn_id: _Optional[int] = ..., resume: _Optional[_Union[Resume, _Mapping]] = ...) -> None: ...

class Resume(_message.Message):
    __slots__ = ("epoch", "seq", "root")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    seq: int
    root: bytes
    def __init__(self, epoch: _Optional[int] = ..., seq: _Optional[int] = ..., root: _Optional[bytes] = ...) -> None: ...

class DigestAnswer(_message.Message):
    __slots__ = ("sums", "leaves", "names")
    SUMS_FIELD_NUMBER: _ClassVar[int]
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    sums: bytes
    leaves: _containers.RepeatedScalarFieldContainer[bytes]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sums: _Optional[bytes] = ..., leaves: _Optional[_Iterable[bytes]] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("ping_id", "ping_timestamp_unix_nanos")
    PING_ID_FIELD_NUMBER: _ClassVar[int]
    PING_TIMESTAMP_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    ping_id: int
    ping_timestamp_unix_nanos: int
    def __init__(self, ping_id: _Optional[int] = ..., ping_timestamp_unix_nanos: _Optional[int] = ...) -> None: ...

class SyncResponse(_message.Message):
    __slots__ = ("header", "update", "finished", "ping", "status", "digest_query")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_QUERY_FIELD_NUMBER: _ClassVar[int]
    header: Header
    update: Updates
    finished: Finished
    ping: Ping
    status: StatusChange
    digest_query: DigestQuery
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., update: _Optional[_Union[Updates, _Mapping]] = ..., finished: _Optional[_Union[Finished, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., status: _Optional[_Union[StatusChange, _Mapping]] = ..., digest_query: _Optional[_Union[DigestQuery, _Mapping]] = ...) -> None: ...

class DigestQuery(_message.Message):
    __slots__ = ("nodes", "leaves", "names")
    NODES_FIELD_NUMBER: _ClassVar[int]
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedScalarFieldContainer[int]
    leaves: _containers.RepeatedScalarFieldContainer[int]
    names: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, nodes: _Optional[_Iterable[int]] = ..., leaves: _Optional[_Iterable[int]] = ..., names: _Optional[_Iterable[int]] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("server_conn_id", "server_version", "syncer_type", "sync_status", "epoch", "resume_method")
    SERVER_CONN_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    SYNCER_TYPE_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATUS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESUME_METHOD_FIELD_NUMBER: _ClassVar[int]
    server_conn_id: int
    server_version: str
    syncer_type: str
    sync_status: SyncStatus
    epoch: int
    resume_method: ResumeMethod
    def __init__(self, server_conn_id: _Optional[int] = ..., server_version: _Optional[str] = ..., syncer_type: _Optional[str] = ..., sync_status: _Optional[_Union[SyncStatus, str]] = ..., epoch: _Optional[int] = ..., resume_method: _Optional[_Union[ResumeMethod, str]] = ...) -> None: ...

class KV(_message.Message):
    __slots__ = ("key", "value", "revision", "v3_resource_version", "ttl_nanos", "update_type", "deleted")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    V3_RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TTL_NANOS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    revision: str
    v3_resource_version: str
    ttl_nanos: int
    update_type: UpdateType
    deleted: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., revision: _Optional[str] = ..., v3_resource_version: _Optional[str] = ..., ttl_nanos: _Optional[int] = ..., update_type: _Optional[_Union[UpdateType, str]] = ..., deleted: _Optional[bool] = ...) -> None: ...

class Updates(_message.Message):
    __slots__ = ("kvs", "seq")
    KVS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    kvs: _containers.RepeatedCompositeFieldContainer[KV]
    seq: int
    def __init__(self, kvs: _Optional[_Iterable[_Union[KV, _Mapping]]] = ..., seq: _Optional[int] = ...) -> None: ...

class Finished(_message.Message):
    __slots__ = ("sync_status", "snapshot_size", "seq")
    SYNC_STATUS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    sync_status: SyncStatus
    snapshot_size: int
    seq: int
    def __init__(self, sync_status: _Optional[_Union[SyncStatus, str]] = ..., snapshot_size: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("id", "timestamp_unix_nanos")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    id: int
    timestamp_unix_nanos: int
    def __init__(self, id: _Optional[int] = ..., timestamp_unix_nanos: _Optional[int] = ...) -> None: ...

class StatusChange(_message.Message):
    __slots__ = ("sync_status",)
    SYNC_STATUS_FIELD_NUMBER: _ClassVar[int]
    sync_status: SyncStatus
    def __init__(self, sync_status: _Optional[_Union[SyncStatus, str]] = ...) -> None: ...
