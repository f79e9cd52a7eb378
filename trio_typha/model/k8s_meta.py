"""Shared pieces of the Kubernetes -> Calico conversions: errors, UIDs, times, Go JSON.

The conversions in ``model.k8s_*`` build Calico v3 objects as plain dicts shaped like the
Go structs libcalico-go marshals (v3.32.1, json-iterator).  Every dict is built with its
keys inserted in Go declaration order and every Go ``map`` field sorted by key, so an
encoder that walks dicts in insertion order reproduces Go's field order.

The Kubernetes input is the object as the API server serves it in JSON.  Calico's client
reads the same objects as protobuf, which turns an empty list or map into a nil one; the
conversions apply that rule where it shows in the output (a non-``omitempty`` nil slice
marshals as ``null``, a nil map marshals as ``null``).
"""

from __future__ import annotations

__sans_io__ = True

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

CALICO_API_VERSION = "projectcalico.org/v3"

# Label keys Calico adds to workload endpoints (apiv3.Label*).
LABEL_NAMESPACE = "projectcalico.org/namespace"
LABEL_ORCHESTRATOR = "projectcalico.org/orchestrator"
LABEL_SERVICE_ACCOUNT = "projectcalico.org/serviceaccount"
ORCHESTRATOR_K8S = "k8s"


class ConversionError(ValueError):
    """A Kubernetes object that Calico's KDD backend refuses to convert.

    Calico reports these as list errors or watch error events; the object yields no
    Calico resource.
    """


def convert_uid(uid: str) -> str:
    """Derive a new UID from ``uid`` deterministically (Calico's ``ConvertUID``).

    The UUID's bytes are bit-reversed one by one, except bytes 6 and 8 which carry the
    version and variant and are kept, so the result is still a valid v4 UUID.  Accepts
    the forms Go's ``uuid.Parse`` accepts (plain, ``{...}``, ``urn:uuid:...``, 32 hex
    digits) and prints the canonical lower-case form.  Raises ``ConversionError``
    otherwise (an empty UID included).
    """
    raw = _parse_uuid(uid)
    out = bytearray(_reverse_bits(b) for b in raw)
    out[6], out[8] = raw[6], raw[8]
    h = out.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_HEX = frozenset("0123456789abcdefABCDEF")


def _parse_uuid(s: str) -> bytes:
    if len(s) == 45:
        if s[:9].lower() != "urn:uuid:":
            raise ConversionError(f"failed to parse UID for resource: invalid urn prefix: {s!r}")
        s = s[9:]
    elif len(s) == 38:
        if s[0] != "{" or s[-1] != "}":
            raise ConversionError(f"failed to parse UID for resource: invalid prefix: {s!r}")
        s = s[1:-1]
    elif len(s) == 32:
        if not set(s) <= _HEX:
            raise ConversionError(f"failed to parse UID for resource: invalid UUID format: {s!r}")
        return bytes.fromhex(s)
    if len(s) != 36:
        raise ConversionError(f"failed to parse UID for resource: invalid UUID length: {len(s)}")
    if s[8] != "-" or s[13] != "-" or s[18] != "-" or s[23] != "-":
        raise ConversionError(f"failed to parse UID for resource: invalid UUID format: {s!r}")
    digits = s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
    if not set(digits) <= _HEX:
        raise ConversionError(f"failed to parse UID for resource: invalid UUID format: {s!r}")
    return bytes.fromhex(digits)


def _reverse_bits(b: int) -> int:
    return int(f"{b:08b}"[::-1], 2)


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})", re.ASCII
)
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def go_time(value: Any) -> str | None:
    """A ``metav1.Time`` as it marshals: RFC 3339 in UTC, whole seconds; ``None`` if zero.

    Accepts the API server's RFC 3339 text (fractions and offsets allowed, as Go's
    parser allows) or an aware ``datetime``.  ``None``/``""`` is the zero time.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
    else:
        m = _RFC3339.fullmatch(str(value))
        if not m:
            raise ConversionError(f"invalid RFC 3339 time {value!r}")
        zone = m.group(8)
        try:
            dt = datetime.fromisoformat(
                f"{m.group(1)}-{m.group(2)}-{m.group(3)}T{m.group(4)}:{m.group(5)}:"
                f"{m.group(6)}{'+00:00' if zone == 'Z' else zone}"
            )
        except ValueError as exc:
            raise ConversionError(f"invalid RFC 3339 time {value!r}") from exc
        if m.group(7) and int(m.group(7)[1:]):
            dt = dt.replace(microsecond=1)  # only to tell a fraction from the zero time
    try:
        dt = dt.astimezone(UTC)
    except OverflowError as exc:  # before year 1: Go could print it, Python cannot
        raise ConversionError(f"time {value!r} is out of range") from exc
    if dt == _GO_ZERO_TIME:
        return None
    return (f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T"
            f"{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}Z")


def go_unmarshal(text: str) -> Any:
    """Parse JSON the way Go's ``Unmarshal`` accepts it (no NaN/Infinity literals)."""
    def _reject(name: str) -> Any:
        raise ValueError(f"invalid JSON literal {name}")
    try:
        return json.loads(text, parse_constant=_reject)
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None


def go_unmarshal_string_map(text: str) -> dict[str, str] | None:
    """JSON into a Go ``map[string]string``: ``null`` gives nil (``None``), a null value
    gives ``""``; anything else that is not an object of strings raises ``ValueError``."""
    data = go_unmarshal(text)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    out: dict[str, str] = {}
    for k, v in data.items():
        if v is None:
            v = ""
        if not isinstance(v, str):
            raise ValueError(f"value of {k!r} is not a string")
        out[k] = v
    return out


def go_unmarshal_string_list(text: str) -> list[str] | None:
    """JSON into a Go ``[]string``: ``null`` gives nil, a null item gives ``""``."""
    data = go_unmarshal(text)
    if data is None:
        return None
    if not isinstance(data, list):
        raise ValueError("expected a JSON array")
    out: list[str] = []
    for v in data:
        if v is None:
            v = ""
        if not isinstance(v, str):
            raise ValueError("array item is not a string")
        out.append(v)
    return out


def go_marshal_string_map(m: Mapping[str, str] | None) -> str:
    """A Go ``map[string]string`` as libcalico-go's json-iterator marshals it.

    Keys sorted, compact, HTML characters escaped; ``None`` (a nil map) is ``null``.
    Used where Calico stores JSON text inside a string (the node kube-labels annotation).
    """
    if m is None:
        return "null"
    items = ",".join(f"{_go_string(k)}:{_go_string(m[k])}" for k in sorted(m))
    return "{" + items + "}"


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _go_string(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif o < 0x20 or ch in "<>&" or o in (0x2028, 0x2029):
            out.append(f"\\u{o:04x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")  # Go sees a lone surrogate as invalid UTF-8
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def policy_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The ObjectMeta Calico gives a policy it converts from a Kubernetes one: name,
    namespace, the converted UID (``ConversionError`` if it is not a UUID), resourceVersion
    and creationTimestamp."""
    metadata: dict[str, Any] = {}
    if meta.get("name"):
        metadata["name"] = meta["name"]
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    if meta.get("uid"):
        metadata["uid"] = convert_uid(str(meta["uid"]))
    if meta.get("resourceVersion"):
        metadata["resourceVersion"] = str(meta["resourceVersion"])
    metadata["creationTimestamp"] = go_time(meta.get("creationTimestamp"))
    return metadata


def str_or_empty(value: Any) -> str:
    """A Go string field read from decoded JSON: absent/``null`` is ``""``."""
    return "" if value is None else str(value)


def mapping(value: Any) -> Mapping[str, Any]:
    """A Go struct/map field read from decoded JSON: absent/``null`` is empty."""
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def sorted_map(m: Mapping[str, Any]) -> dict[str, Any]:
    # Any values: a damaged object's are checked where they are encoded, not here
    """A Go map field's entries in the order Go marshals them (sorted keys)."""
    return {k: m[k] for k in sorted(m)}
