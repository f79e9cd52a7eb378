"""v3 objects sent as they are, under their ``ResourceKey``.

Typha moves ``metadata.resourceVersion`` out of the value into the update's
``V3ResourceVersion`` (so no-op dedupe works) and blanks it; nothing else is touched here.
The KDD backend stamps every Calico object with ``kind`` and ``apiVersion:
projectcalico.org/v3`` whichever API group it came from.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from . import keys
from .gojson import Struct, dumps
from .goschema import ROOTS

CALICO_API_VERSION = "projectcalico.org/v3"


def split_resource_version(obj: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A shallow copy of ``obj`` without ``metadata.resourceVersion``, and that version."""
    out = dict(obj)
    md = dict(out.get("metadata") or {})
    rv = md.pop("resourceVersion", "") or ""
    out["metadata"] = md
    return out, str(rv)


def encode_v3(schema: Struct, obj: Mapping[str, Any], *,
              stamp_kind: str | None = None) -> tuple[bytes, str]:
    """(value bytes, V3ResourceVersion) for a passthrough object."""
    value, rv = split_resource_version(obj)
    if stamp_kind is not None:
        value["kind"] = stamp_kind
        value["apiVersion"] = CALICO_API_VERSION
    return dumps(schema, value), rv


def resource_kv(kind: str, obj: Mapping[str, Any], *, key_name: str | None = None,
                key_namespace: str | None = None, schema: str | None = None,
                stamp: bool = True) -> tuple[str, bytes, str]:
    """(key, value, V3ResourceVersion) of a Calico v3 passthrough object of ``kind``
    (``key_name``/``key_namespace`` default to the object's own; ``schema`` to ``kind``)."""
    md = obj.get("metadata") or {}
    name = key_name if key_name is not None else md.get("name") or ""
    namespace = key_namespace if key_namespace is not None else md.get("namespace") or ""
    key = keys.resource_key(kind, name, namespace)
    value, rv = encode_v3(ROOTS[schema or kind], obj, stamp_kind=kind if stamp else None)
    return key, value, rv
