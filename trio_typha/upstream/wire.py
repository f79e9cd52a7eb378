"""The primary's feed to its ServerWorkers workers: records on a local socket (pure).

A worker opens one connection per syncer type and sends ``HELLO`` (the syncer type); a
relay tier dialling another trio-typha's sync port over TCP sends
:data:`~trio_typha.records.FEED_PREAMBLE` first.  The primary answers with one ``SNAPSHOT`` (its cache's KV set at some breadcrumb, and the
status then), then one ``CRUMB`` per breadcrumb published after it, in order.  A crumb
carries what the worker's cache needs to publish *the same* breadcrumb (its updates, the
status after it, how old its oldest datastore event is) and the protocol encodings the
primary has already made of it, once (:data:`ENCODINGS`): the worker hangs those on its
breadcrumb's memo, so its clients get the primary's bytes and the worker encodes no delta.

Framing (:mod:`trio_typha.records`): type (1 byte), payload length (4 bytes, little endian),
payload.  Integers are little endian; strings and byte strings are length-prefixed.  No
pickle: a record is data.

  HELLO     version u8, syncer type (UTF-8, the rest of the payload)
  SNAPSHOT  status u8, age f64, count u32, updates
  CRUMB     seq u64, status u8, age f64, encodings u8, count u32,
            encodings (id u8, length u32, bytes), updates
  PING      lag f64
  update    key length u32, value length i32 (-1: no value), revision length u16,
            v3 resource version length u16, ttl ns i64, update type u8, then the four strings
"""

from __future__ import annotations

__sans_io__ = True

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cache.core import Breadcrumb
from ..model.kv import SerializedUpdate, SyncStatus, UpdateType
from ..protocols.gob import encode_once as gob
from ..protocols.grpc import encode_once as grpc
from ..records import HEADER, RecordReader, frame, over_limit

VERSION = 3
HELLO, SNAPSHOT, CRUMB, PING = 1, 2, 3, 4
#: Seconds between the upstream's pings on an idle feed.
PING_INTERVAL = 1.0
#: Largest record accepted (a snapshot of a very large cluster is the largest).
MAX_RECORD = 1 << 30

_SNAPSHOT = struct.Struct("<BdI")
_CRUMB = struct.Struct("<QBdBI")
_ENCODING = struct.Struct("<BI")
_UPDATE = struct.Struct("<IiHHqB")
_PING = struct.Struct("<d")
_STATUSES = {int(s): s for s in SyncStatus}
_UPDATE_TYPES = {int(u): u for u in UpdateType}


@dataclass(frozen=True, slots=True)
class Encoding:
    """One per-breadcrumb encoding the primary ships: its memo key and how it is built."""

    id: int
    name: str  # for metrics
    memo_key: tuple[str, ...]
    build: Callable[[Breadcrumb], bytes]
    protocol: str  # "typha" or "grpc" (ServerProtocols)


#: Every breadcrumb encoding a worker's sessions use (snapshots are built by the worker,
#: once per worker, from its own cache; status and ping messages are constants).
ENCODINGS: tuple[Encoding, ...] = (
    Encoding(1, "gob", gob.DELTAS_KEY, gob.deltas, "typha"),
    Encoding(2, "gob-snappy", gob.DELTAS_CHUNKS_KEY, gob.deltas_chunks, "typha"),
    Encoding(3, "grpc", grpc.UPDATE_KEY, grpc.update_message, "grpc"),
)
_BY_ID = {e.id: e for e in ENCODINGS}


def encodings_for(protocols: str) -> tuple[Encoding, ...]:
    """The encodings to ship for ``ServerProtocols`` (all, typha or grpc)."""
    return tuple(e for e in ENCODINGS if protocols in ("all", e.protocol))


class WireError(ValueError):
    """A record that is not well formed (a bug or a foreign peer on the socket)."""


@dataclass(frozen=True, slots=True)
class Hello:
    syncer_type: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    status: SyncStatus
    age: float  # seconds since the oldest datastore event behind it (0: none pending)
    updates: tuple[SerializedUpdate, ...]


@dataclass(frozen=True, slots=True)
class Crumb:
    seq: int  # the primary's sequence number (the worker checks that none is missing)
    status: SyncStatus
    age: float  # seconds from its oldest datastore event to when it was sent
    updates: tuple[SerializedUpdate, ...]
    memo: dict[Any, bytes] = field(default_factory=dict)  # memo key -> the primary's bytes


@dataclass(frozen=True, slots=True)
class Ping:
    lag: float  # the upstream's own lag when it sent this (seconds)


Record = Hello | Snapshot | Crumb | Ping


# ---- encoding ---------------------------------------------------------------------------


def _frame(kind: int, payload: bytes) -> bytes:
    return frame(kind, payload, MAX_RECORD, WireError)


def _updates(updates: Sequence[SerializedUpdate]) -> bytes:
    parts: list[bytes] = []
    pack = _UPDATE.pack
    for u in updates:
        key = u.key.encode()
        rev = u.revision.encode()
        v3 = u.v3_resource_version.encode()
        value = u.value
        parts.append(pack(len(key), -1 if value is None else len(value), len(rev), len(v3),
                          u.ttl_ns, u.update_type))
        parts.append(key)
        if value:
            parts.append(value)
        parts.append(rev)
        parts.append(v3)
    return b"".join(parts)


def encode_hello(syncer_type: str) -> bytes:
    return _frame(HELLO, bytes([VERSION]) + syncer_type.encode())


def encode_snapshot(status: SyncStatus, age: float,
                    updates: Sequence[SerializedUpdate]) -> bytes:
    return _frame(SNAPSHOT, _SNAPSHOT.pack(status, age, len(updates)) + _updates(updates))


def encode_ping(lag: float) -> bytes:
    return _frame(PING, _PING.pack(lag))


def crumb_body(crumb: Breadcrumb, encodings: Sequence[Encoding]) -> bytes:
    """The part of ``crumb``'s record that is the same for every worker, built once.

    Building it encodes the breadcrumb for every protocol in ``encodings`` (through the
    breadcrumb's memo: the primary's own clients share those bytes), whether or not the
    primary has clients of that protocol itself.
    """
    def build(c: Breadcrumb) -> bytes:
        parts: list[bytes] = []
        for e in encodings:
            data = e.build(c)
            parts.append(_ENCODING.pack(e.id, len(data)))
            parts.append(data)
        parts.append(_updates(c.updates))
        return b"".join(parts)
    return crumb.memo(("worker-wire", tuple(e.id for e in encodings)), build)


def encode_crumb(crumb: Breadcrumb, age: float, encodings: Sequence[Encoding]) -> bytes:
    """``crumb``'s record, ``age`` seconds after its oldest datastore event."""
    body = crumb_body(crumb, encodings)
    head = _CRUMB.pack(crumb.seq, crumb.status, age, len(encodings), len(crumb.updates))
    if len(head) + len(body) > MAX_RECORD:
        raise over_limit(len(head) + len(body), MAX_RECORD, WireError)
    return b"".join((HEADER.pack(CRUMB, len(head) + len(body)), head, body))


# ---- decoding ---------------------------------------------------------------------------


def _status(raw: int) -> SyncStatus:
    try:
        return _STATUSES[raw]
    except KeyError:
        raise WireError(f"unknown sync status {raw}") from None


def _read_updates(data: bytes, pos: int, count: int) -> tuple[tuple[SerializedUpdate, ...], int]:
    out: list[SerializedUpdate] = []
    unpack = _UPDATE.unpack_from
    size = _UPDATE.size
    end = len(data)
    for _ in range(count):
        if pos + size > end:
            raise WireError("update truncated")
        klen, vlen, rlen, v3len, ttl, utype = unpack(data, pos)
        pos += size
        stop = pos + klen + max(vlen, 0) + rlen + v3len
        if stop > end or vlen < -1:
            raise WireError("update truncated")
        key = data[pos:pos + klen].decode()
        pos += klen
        value: bytes | None = None
        if vlen >= 0:
            value = data[pos:pos + vlen]
            pos += vlen
        rev = data[pos:pos + rlen].decode()
        pos += rlen
        v3 = data[pos:pos + v3len].decode()
        pos += v3len
        try:
            kind = _UPDATE_TYPES[utype]
        except KeyError:
            raise WireError(f"unknown update type {utype}") from None
        out.append(SerializedUpdate(key, value, rev, v3, ttl, kind))
    return tuple(out), pos


def decode(kind: int, payload: bytes) -> Record:
    """One record from its type and payload."""
    try:
        if kind == HELLO:
            if not payload or payload[0] != VERSION:
                raise WireError(f"unsupported feed version {payload[:1]!r}")
            return Hello(payload[1:].decode())
        if kind == SNAPSHOT:
            status, age, count = _SNAPSHOT.unpack_from(payload, 0)
            updates, pos = _read_updates(payload, _SNAPSHOT.size, count)
            _at_end(payload, pos)
            return Snapshot(_status(status), age, updates)
        if kind == CRUMB:
            seq, status, age, n_enc, count = _CRUMB.unpack_from(payload, 0)
            pos = _CRUMB.size
            memo: dict[Any, bytes] = {}
            for _ in range(n_enc):
                eid, length = _ENCODING.unpack_from(payload, pos)
                pos += _ENCODING.size
                if pos + length > len(payload) or eid not in _BY_ID:
                    raise WireError(f"bad encoding {eid} of {length} bytes")
                memo[_BY_ID[eid].memo_key] = payload[pos:pos + length]
                pos += length
            updates, pos = _read_updates(payload, pos, count)
            _at_end(payload, pos)
            return Crumb(seq, _status(status), age, updates, memo)
        if kind == PING:
            (lag,) = _PING.unpack_from(payload, 0)
            _at_end(payload, _PING.size)
            return Ping(lag)
    except (struct.error, UnicodeDecodeError) as exc:
        raise WireError(f"malformed record of type {kind}: {exc}") from None
    raise WireError(f"unknown record type {kind}")


def _at_end(payload: bytes, pos: int) -> None:
    if pos != len(payload):
        raise WireError(f"{len(payload) - pos} bytes after the end of a record")


class Decoder:
    """Incremental: :meth:`feed` received bytes, iterate the complete records so far."""

    def __init__(self, max_record: int = MAX_RECORD) -> None:
        self._reader = RecordReader(max_record, WireError)

    def feed(self, data: bytes | bytearray) -> None:
        self._reader.feed(data)

    def __iter__(self) -> Iterator[Record]:
        for kind, payload in self._reader:
            yield decode(kind, payload)
