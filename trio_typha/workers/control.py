"""The one channel between the primary and each of its workers: records on the control
socketpair (pure).

The primary makes a Unix socketpair per worker before starting it; the worker's end is its
stdin.  Everything between the two processes other than the cache feed travels here, as
records framed like the feed's (:mod:`trio_typha.records`): type (1 byte), payload length
(4 bytes, little endian), payload.  No pickle: a record is data, and a record of an unknown type or version
is a :class:`ControlError`.

Primary to worker:

  START  version u8, then JSON: the worker's configuration (every :class:`~trio_typha.config.
         Config` field by name), the feed's socket path, the port it serves, its index
  PASS   empty; the accepted client socket travels with it as SCM_RIGHTS (one descriptor)
  QUERY  id u32, what u8 (:data:`METRICS` or :data:`CONNECTIONS`): answered by a REPLY
  LIMIT  connections u32: the worker's share of the replica's connection limit
  DRAIN  empty: shut down gracefully, as on SIGTERM

Worker to primary:

  STATUS ready u8, accepted u64, open u32, detail (UTF-8, the rest): sent when any of them
         changes; the first one says the worker is up
  REPLY  id u32, then the answer: the Prometheus exposition, or the /connections document
         (JSON)

Descriptors arrive on the receiving socket no later than the bytes they were sent with, and
in order, so the decoder hands the oldest one received to each PASS it decodes.
"""

from __future__ import annotations

__sans_io__ = True

import dataclasses
import json
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..records import RecordReader, frame

VERSION = 1
START, PASS, QUERY, LIMIT, DRAIN = 1, 2, 3, 4, 5
STATUS, REPLY = 16, 17
#: What a QUERY asks for.
METRICS, CONNECTIONS = 1, 2
#: Largest record accepted (a big exposition or /connections document is the largest).
MAX_RECORD = 64 << 20

_QUERY = struct.Struct("<IB")
_LIMIT = struct.Struct("<I")
_STATUS = struct.Struct("<BQI")
_REPLY = struct.Struct("<I")
_QUERIES = (METRICS, CONNECTIONS)


class ControlError(ValueError):
    """A record that is not well formed (a bug, or something foreign on the socket)."""


@dataclass(frozen=True, slots=True)
class Start:
    config: Config
    upstream: str  # the primary's feed socket
    port: int  # the port the worker's clients connected to (for its /connections)
    index: int  # 1.. : which worker this is


@dataclass(frozen=True, slots=True)
class Pass:
    fd: int  # the received descriptor, now the receiver's


@dataclass(frozen=True, slots=True)
class Query:
    id: int
    what: int


@dataclass(frozen=True, slots=True)
class Limit:
    connections: int


@dataclass(frozen=True, slots=True)
class Drain:
    pass


@dataclass(frozen=True, slots=True)
class Status:
    ready: bool
    accepted: int  # sockets received from the primary since the worker started
    open: int  # of those, still open
    detail: str = ""  # why not ready


@dataclass(frozen=True, slots=True)
class Reply:
    id: int
    body: bytes


Record = Start | Pass | Query | Limit | Drain | Status | Reply


# ---- the configuration as data ------------------------------------------------------------

_FIELD_TYPES = {f.name: type(f.default) for f in dataclasses.fields(Config)}


def config_document(cfg: Config) -> dict[str, Any]:
    """Every field of ``cfg`` by name (tuples as lists): JSON-ready."""
    return {name: list(v) if isinstance(v := getattr(cfg, name), tuple) else v
            for name in _FIELD_TYPES}


def config_from_document(doc: Any) -> Config:
    """The :class:`Config` :func:`config_document` describes; every field must be there,
    with its declared type."""
    if not isinstance(doc, dict) or set(doc) != set(_FIELD_TYPES):
        missing = set(_FIELD_TYPES) - set(doc) if isinstance(doc, dict) else set()
        raise ControlError(f"start record: configuration fields differ (missing {missing})")
    values: dict[str, Any] = {}
    for name, kind in _FIELD_TYPES.items():
        value = doc[name]
        if kind is tuple and isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = tuple(value)
        elif kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not kind:
            raise ControlError(f"start record: {name} is {type(value).__name__}, not "
                               f"{kind.__name__}")
        values[name] = value
    return Config(**values)


# ---- encoding -----------------------------------------------------------------------------


def _frame(kind: int, payload: bytes) -> bytes:
    return frame(kind, payload, MAX_RECORD, ControlError)


def encode_start(start: Start) -> bytes:
    doc = {"config": config_document(start.config), "upstream": start.upstream,
           "port": start.port, "index": start.index}
    return _frame(START, bytes([VERSION]) + json.dumps(doc).encode())


#: PASS's record: the descriptor goes beside it (``socket.send_fds``).
PASS_RECORD = _frame(PASS, b"")
DRAIN_RECORD = _frame(DRAIN, b"")


def encode_query(ident: int, what: int) -> bytes:
    return _frame(QUERY, _QUERY.pack(ident & 0xFFFFFFFF, what))


def encode_limit(connections: int) -> bytes:
    return _frame(LIMIT, _LIMIT.pack(max(0, min(connections, 0xFFFFFFFF))))


def encode_status(status: Status) -> bytes:
    return _frame(STATUS, _STATUS.pack(status.ready, status.accepted, status.open)
                  + status.detail.encode())


def encode_reply(ident: int, body: bytes) -> bytes:
    return _frame(REPLY, _REPLY.pack(ident & 0xFFFFFFFF) + body)


def encode(record: Record) -> bytes:
    """Any record but :class:`Pass` (whose descriptor cannot be bytes)."""
    match record:
        case Start():
            return encode_start(record)
        case Query(ident, what):
            return encode_query(ident, what)
        case Limit(connections):
            return encode_limit(connections)
        case Drain():
            return DRAIN_RECORD
        case Status():
            return encode_status(record)
        case Reply(ident, body):
            return encode_reply(ident, body)
    raise ControlError(f"{type(record).__name__} has no byte encoding")


# ---- decoding -----------------------------------------------------------------------------


def _start(payload: bytes) -> Start:
    if not payload or payload[0] != VERSION:
        raise ControlError(f"unsupported control version {payload[:1]!r} (this is {VERSION})")
    try:
        doc = json.loads(payload[1:])
    except ValueError as exc:
        raise ControlError(f"start record: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ControlError("start record: not a JSON object")
    upstream, port, index = doc.get("upstream"), doc.get("port"), doc.get("index")
    if not isinstance(upstream, str) or type(port) is not int or type(index) is not int:
        raise ControlError("start record: upstream, port or index missing or mistyped")
    return Start(config_from_document(doc.get("config")), upstream, port, index)


def decode(kind: int, payload: bytes, fds: deque[int]) -> Record:
    """One record from its type and payload; a PASS takes the oldest of ``fds``."""
    try:
        if kind == START:
            return _start(payload)
        if kind == PASS:
            if payload:
                raise ControlError("pass record with a payload")
            if not fds:
                raise ControlError("pass record without a descriptor")
            return Pass(fds.popleft())
        if kind == QUERY:
            ident, what = _QUERY.unpack(payload)
            if what not in _QUERIES:
                raise ControlError(f"query for unknown {what}")
            return Query(ident, what)
        if kind == LIMIT:
            (connections,) = _LIMIT.unpack(payload)
            return Limit(connections)
        if kind == DRAIN:
            if payload:
                raise ControlError("drain record with a payload")
            return Drain()
        if kind == STATUS:
            ready, accepted, open_ = _STATUS.unpack_from(payload)
            if ready > 1 or open_ > accepted:
                raise ControlError(f"status ready={ready} open={open_} accepted={accepted}")
            return Status(bool(ready), accepted, open_, payload[_STATUS.size:].decode())
        if kind == REPLY:
            (ident,) = _REPLY.unpack_from(payload)
            return Reply(ident, payload[_REPLY.size:])
    except (struct.error, UnicodeDecodeError) as exc:
        raise ControlError(f"malformed record of type {kind}: {exc}") from None
    raise ControlError(f"unknown record type {kind}")


class Decoder:
    """Incremental: :meth:`feed` what was received (bytes and descriptors), iterate the
    complete records so far.  Descriptors no record has taken yet are :attr:`fds`: the
    owner closes them when it gives up on the channel."""

    def __init__(self, max_record: int = MAX_RECORD) -> None:
        self.fds: deque[int] = deque()
        self._reader = RecordReader(max_record, ControlError)

    def feed(self, data: bytes | bytearray, fds: Iterable[int] = ()) -> None:
        self._reader.feed(data)
        self.fds.extend(fds)

    def __iter__(self) -> Iterator[Record]:
        for kind, payload in self._reader:
            yield decode(kind, payload, self.fds)
