"""etcd v3's gRPC-JSON gateway, sans I/O: request bodies out, typed responses in.

etcd (3.4+) serves every KV/Watch/Maintenance RPC as ``POST /v3/<service>/<method>`` with
the protobuf message as JSON.  The mapping has three quirks this module absorbs: ``bytes``
fields (keys, values) are base64; 64-bit integers are JSON *strings*; and fields equal to
their zero value (``0``, ``false``, ``PUT``) are omitted.  A watch is one long POST whose
response body is newline-separated JSON objects, each ``{"result": WatchResponse}`` or
``{"error": ...}``.

Nothing here performs I/O; :mod:`trio_typha.datastore.etcd_client` moves the bytes.
"""

from __future__ import annotations

__sans_io__ = True

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.jsonload import loads
from .etcd_errors import EtcdGatewayError, EtcdProtocolError

RANGE_PATH = "/v3/kv/range"
PUT_PATH = "/v3/kv/put"
DELETE_RANGE_PATH = "/v3/kv/deleterange"
COMPACTION_PATH = "/v3/kv/compaction"
WATCH_PATH = "/v3/watch"
STATUS_PATH = "/v3/maintenance/status"


@dataclass(frozen=True, slots=True)
class Header:
    """The response header every etcd reply carries."""

    cluster_id: str
    revision: int


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
class WatchEvent:
    deleted: bool
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class WatchResponse:
    """One message of a watch stream.

    ``created`` acknowledges the watch; ``canceled`` ends it (``compact_revision`` set when
    the start revision was compacted away); otherwise it carries ``events`` or, with no
    events, is a progress notification: every change up to ``header.revision`` was sent.
    """

    header: Header
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""
    events: tuple[WatchEvent, ...] = ()

    @property
    def progress_notify(self) -> bool:
        return not (self.created or self.canceled or self.events)


# -- requests -----------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range cover every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\x00"  # etcd: every key >= key
    return stripped[:-1] + bytes([stripped[-1] + 1])


def range_request(key: bytes, range_end: bytes, *, revision: int = 0,
                  limit: int = 0) -> dict[str, Any]:
    """Body of a range over ``[key, range_end)`` at ``revision`` (0: the current one)."""
    body: dict[str, Any] = {"key": _b64(key), "range_end": _b64(range_end)}
    if revision:
        body["revision"] = str(revision)
    if limit:
        body["limit"] = str(limit)
    return body


def next_page_key(last_key: bytes) -> bytes:
    """Where the next page of a range starts: just after the last key received."""
    return last_key + b"\x00"


def watch_request(key: bytes, range_end: bytes, start_revision: int, *,
                  progress_notify: bool = True) -> dict[str, Any]:
    """Body of a watch over ``[key, range_end)`` replaying from ``start_revision``."""
    create: dict[str, Any] = {"key": _b64(key), "range_end": _b64(range_end),
                              "start_revision": str(start_revision)}
    if progress_notify:
        create["progress_notify"] = True
    return {"create_request": create}


def put_request(key: bytes, value: bytes) -> dict[str, Any]:
    return {"key": _b64(key), "value": _b64(value)}


def delete_request(key: bytes, range_end: bytes = b"") -> dict[str, Any]:
    body = {"key": _b64(key)}
    if range_end:
        body["range_end"] = _b64(range_end)
    return body


def compaction_request(revision: int, *, physical: bool = True) -> dict[str, Any]:
    return {"revision": str(revision), "physical": physical}


# -- responses ----------------------------------------------------------------------------

def _object(payload: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(payload, Mapping):
        raise EtcdProtocolError(f"{what}: expected a JSON object, got {type(payload).__name__}")
    return payload


def _int(obj: Mapping[str, Any], field: str) -> int:
    raw = obj.get(field, 0)
    # int64 comes as a string; tolerate a bare number too.
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise EtcdProtocolError(f"field {field!r}: not an integer: {raw!r}")
    try:
        return int(raw)
    except ValueError:
        raise EtcdProtocolError(f"field {field!r}: not an integer: {raw!r}") from None


def _bytes(obj: Mapping[str, Any], field: str) -> bytes:
    raw = obj.get(field, "")
    if not isinstance(raw, str):
        raise EtcdProtocolError(f"field {field!r}: expected base64 text, got {raw!r}")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise EtcdProtocolError(f"field {field!r}: invalid base64") from None


def _bool(obj: Mapping[str, Any], field: str) -> bool:
    raw = obj.get(field, False)
    if not isinstance(raw, bool):
        raise EtcdProtocolError(f"field {field!r}: not a boolean: {raw!r}")
    return raw


def _header(obj: Mapping[str, Any]) -> Header:
    hdr = _object(obj.get("header", {}), "header")
    return Header(cluster_id=str(hdr.get("cluster_id", "")), revision=_int(hdr, "revision"))


def _kv(obj: Any) -> KeyValue:
    kv = _object(obj, "kv")
    return KeyValue(key=_bytes(kv, "key"), value=_bytes(kv, "value"),
                    mod_revision=_int(kv, "mod_revision"),
                    create_revision=_int(kv, "create_revision"))


def _list(obj: Mapping[str, Any], field: str) -> list[Any]:
    raw = obj.get(field, [])
    if not isinstance(raw, list):
        raise EtcdProtocolError(f"field {field!r}: expected a list")
    return raw


def parse_json(data: bytes | str) -> Any:
    try:
        return loads(data)
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, JSONTooDeep
        raise EtcdProtocolError(f"response is not JSON: {exc}") from None


def check_error(payload: Any) -> None:
    """Raise :class:`EtcdGatewayError` if ``payload`` is the gateway's error shape.

    Unary calls answer ``{"error": msg, "message": msg, "code": n}``; a stream answers
    ``{"error": {"grpc_code": n, "message": msg, ...}}``.
    """
    if not isinstance(payload, Mapping) or "error" not in payload:
        return
    err = payload["error"]
    if isinstance(err, Mapping):
        message = str(err.get("message", "")) or json.dumps(err)
        code = err.get("grpc_code", err.get("code", 0))
    else:
        message = str(payload.get("message") or err)
        code = payload.get("code", 0)
    raise EtcdGatewayError(message, code if isinstance(code, int) else 0)


def decode_status(payload: Any) -> Header:
    """The header of a ``/v3/maintenance/status`` reply (cluster identity, current revision)."""
    check_error(payload)
    return _header(_object(payload, "status"))


def decode_range(payload: Any) -> RangePage:
    check_error(payload)
    obj = _object(payload, "range")
    return RangePage(header=_header(obj), kvs=tuple(_kv(kv) for kv in _list(obj, "kvs")),
                     more=_bool(obj, "more"))


def decode_header(payload: Any) -> Header:
    """The header of any other unary reply (put, delete, compaction)."""
    check_error(payload)
    return _header(_object(payload, "reply"))


def decode_watch_message(line: bytes | str) -> WatchResponse:
    """Decode one line of a watch stream."""
    payload = parse_json(line)
    check_error(payload)
    result = _object(_object(payload, "watch message").get("result"), "watch result")
    events = []
    for raw in _list(result, "events"):
        ev = _object(raw, "event")
        kind = ev.get("type", "PUT")
        if kind not in ("PUT", "DELETE"):
            raise EtcdProtocolError(f"unknown watch event type {kind!r}")
        events.append(WatchEvent(deleted=kind == "DELETE", kv=_kv(ev.get("kv"))))
    return WatchResponse(header=_header(result), created=_bool(result, "created"),
                         canceled=_bool(result, "canceled"),
                         compact_revision=_int(result, "compact_revision"),
                         cancel_reason=str(result.get("cancel_reason", "")),
                         events=tuple(events))
