"""The records of a warm-start transfer on the sync port (pure).

A starting replica connects to a sibling's sync port (under the same TLS as clients) and
sends :data:`MAGIC` (which the port's protocol sniffing tells from gob and HTTP/2), then
``REQUEST``: the syncer types it wants and its *fingerprint*, everything that decides how
datastore objects become KVs (datastore type, Calico API group, conversion options, the
build).  The sibling answers ``REFUSED`` with a reason, or for each syncer type ``BEGIN``,
its cache as ``CACHE`` records (the worker feed's SNAPSHOT record, :mod:`..upstream.wire`),
its tracker as ``TRACKER`` records, one ``WATCH`` (the datastore's resume state), ``END``;
then ``DONE``.  Nothing is used before ``DONE``: a transfer cut short anywhere leaves the
receiver with nothing, and it lists as on a cold start.

Framing as :mod:`trio_typha.records`.  The tracker, watch and control records are JSON
(data, no pickle); the counts in ``BEGIN`` are checked at ``END``.
"""

from __future__ import annotations

__sans_io__ = True

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model.kv import SerializedUpdate, SyncStatus
from ..records import RecordReader, frame
from ..server.sniff import WARM_MAGIC
from ..syncer.handover import SyncerState
from ..upstream import wire as feed_wire

#: What a warm-start peer sends first on the sync port (see :mod:`..server.sniff`).
MAGIC = WARM_MAGIC
VERSION = 1
CACHE = feed_wire.SNAPSHOT
REQUEST, REFUSED, BEGIN, TRACKER, WATCH, END, DONE = 20, 21, 22, 23, 24, 25, 26
#: Largest record either side accepts.
MAX_RECORD = 256 << 20
#: Cache updates and tracker rows per record.
CHUNK = 20000
_STATUSES = {int(s): s for s in SyncStatus}


class WarmError(ValueError):
    """A transfer that cannot be used: malformed, refused, incomplete or mismatched."""


@dataclass(frozen=True, slots=True)
class Request:
    syncer_types: tuple[str, ...]
    fingerprint: dict[str, str]


def encode_request(syncer_types: Sequence[str], fingerprint: Mapping[str, str]) -> bytes:
    return MAGIC + _json(REQUEST, {"version": VERSION, "syncers": list(syncer_types),
                                   "fingerprint": dict(fingerprint)})


def decode_request(payload: bytes) -> Request:
    """The REQUEST's payload (after :data:`MAGIC`); :class:`WarmError` if malformed."""
    body = _load(payload, "request")
    syncers, fingerprint = body.get("syncers"), body.get("fingerprint")
    if body.get("version") != VERSION:
        raise WarmError(f"warm-start version {body.get('version')!r}, this one speaks "
                        f"{VERSION}")
    if (not isinstance(syncers, list) or not all(isinstance(s, str) for s in syncers)
            or not isinstance(fingerprint, dict)
            or not all(isinstance(v, str) for v in fingerprint.values())):
        raise WarmError("malformed warm-start request")
    return Request(tuple(syncers), fingerprint)


def mismatch(ours: Mapping[str, str], theirs: Mapping[str, str]) -> str:
    """Why state built under ``ours`` is not valid under ``theirs`` ("" if it is)."""
    return "; ".join(f"{k} is {theirs.get(k)!r} there, {ours.get(k)!r} here"
                     for k in sorted(ours.keys() | theirs.keys())
                     if ours.get(k) != theirs.get(k))


def encode_refused(reason: str) -> bytes:
    return _json(REFUSED, {"reason": reason})


def encode_state(state: SyncerState) -> Iterator[bytes]:
    """One syncer type's records, a chunk at a time (a large cache is many records)."""
    updates, rows = state.updates, state.tracker
    yield _json(BEGIN, {"syncer": state.syncer_type, "status": int(state.status),
                        "kvs": len(updates), "sources": len(rows)})
    for i in range(0, len(updates), CHUNK):
        yield feed_wire.encode_snapshot(state.status, 0.0, updates[i:i + CHUNK])
    for i in range(0, len(rows), CHUNK):
        yield _json(TRACKER, rows[i:i + CHUNK])
    yield _json(WATCH, state.watch)
    yield _json(END, {"syncer": state.syncer_type})


def encode_done() -> bytes:
    return _json(DONE, {})


def _json(kind: int, body: Any) -> bytes:
    return frame(kind, json.dumps(body, separators=(",", ":")).encode(), MAX_RECORD,
                 WarmError)


def _load(payload: bytes, what: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise WarmError(f"malformed {what} record: {exc}") from None


@dataclass
class _Partial:
    syncer_type: str
    status: SyncStatus
    kvs: int
    sources: int
    updates: list[SerializedUpdate] = field(default_factory=list)
    tracker: list[list[Any]] = field(default_factory=list)
    watch: dict[str, Any] | None = None


class Assembly:
    """The receiver's side: :meth:`feed` bytes as they arrive; :attr:`states` is set (and
    :attr:`done` true) once ``DONE`` has come after every syncer type asked for.  Any
    record out of place, count that does not add up, or a ``REFUSED`` raises
    :class:`WarmError`."""

    def __init__(self, syncer_types: Sequence[str]) -> None:
        self.wanted = tuple(syncer_types)
        self._reader = RecordReader(MAX_RECORD, WarmError)
        self._current: _Partial | None = None
        self._complete: dict[str, SyncerState] = {}
        self.states: dict[str, SyncerState] | None = None
        self.received = 0  # bytes so far

    @property
    def done(self) -> bool:
        return self.states is not None

    def feed(self, data: bytes | bytearray) -> None:
        if self.done:
            raise WarmError("bytes after the end of the transfer")
        self.received += len(data)
        self._reader.feed(data)
        for kind, payload in self._reader:
            self._record(kind, payload)

    def _record(self, kind: int, payload: bytes) -> None:
        if self.done:
            raise WarmError("a record after the end of the transfer")
        cur = self._current
        if kind == REFUSED:
            reason = _load(payload, "refusal")
            raise WarmError(f"refused: {reason.get('reason') if isinstance(reason, dict) else reason}")
        if cur is None:
            if kind == BEGIN:
                self._current = self._begin(_load(payload, "begin"))
            elif kind == DONE:
                missing = [t for t in self.wanted if t not in self._complete]
                if missing:
                    raise WarmError(f"transfer ended without {', '.join(missing)}")
                self.states = self._complete
            else:
                raise WarmError(f"record {kind} outside a syncer's state")
            return
        if kind == CACHE:
            record = feed_wire.decode(kind, payload)
            assert isinstance(record, feed_wire.Snapshot)
            cur.updates.extend(record.updates)
        elif kind == TRACKER:
            rows = _load(payload, "tracker")
            if not isinstance(rows, list):
                raise WarmError("tracker record is not a list")
            cur.tracker.extend(rows)
        elif kind == WATCH:
            watch = _load(payload, "watch")
            if not isinstance(watch, dict) or cur.watch is not None:
                raise WarmError("watch record is not an object, or a second one")
            cur.watch = watch
        elif kind == END:
            self._end(cur)
        else:
            raise WarmError(f"record {kind} inside {cur.syncer_type}'s state")

    def _begin(self, body: Any) -> _Partial:
        if not isinstance(body, dict):
            raise WarmError("begin record is not an object")
        syncer, status, kvs, sources = (body.get("syncer"), body.get("status"),
                                        body.get("kvs"), body.get("sources"))
        if (syncer not in self.wanted or syncer in self._complete
                or status not in _STATUSES or not isinstance(kvs, int)
                or not isinstance(sources, int)):
            raise WarmError(f"bad begin record for {syncer!r:.40}")
        return _Partial(syncer, _STATUSES[status], kvs, sources)

    def _end(self, cur: _Partial) -> None:
        if len(cur.updates) != cur.kvs or len(cur.tracker) != cur.sources or cur.watch is None:
            raise WarmError(f"{cur.syncer_type}: {len(cur.updates)} of {cur.kvs} KVs, "
                            f"{len(cur.tracker)} of {cur.sources} sources"
                            f"{'' if cur.watch is not None else ', no watch state'}")
        self._complete[cur.syncer_type] = SyncerState(
            cur.syncer_type, cur.status, tuple(cur.updates), cur.tracker, cur.watch)
        self._current = None


def fingerprint(**parts: object) -> dict[str, str]:
    """A fingerprint from named settings (their text forms)."""
    return {k: str(v) for k, v in parts.items()}
