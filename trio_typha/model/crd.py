"""``crd.projectcalico.org/v1`` custom resources → projectcalico.org/v3 objects, as the KDD
backend converts them (``k8s/resources/resources.go`` ``ConvertK8sResourceToCalicoResource``
and ``customresource.go``).

The CR's ``uid`` is always bit-reversed (:func:`convert_uid`).  Objects written through the
Calico API carry their real v3 metadata in the ``projectcalico.org/metadata`` annotation;
when present it *replaces* the CR's metadata, with namespace, resourceVersion, uid, merged
labels and annotations and (if the stored one is zero) the creation time taken from the CR.
The datastore key name stays the CR's own name even when the stored v3 name differs (legacy
``default.``-prefixed policies).
"""

from __future__ import annotations

__sans_io__ = True

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from .shape import as_map, as_str, field_map, field_str

METADATA_ANNOTATION = "projectcalico.org/metadata"
_POLICY_KINDS = frozenset({"GlobalNetworkPolicy", "NetworkPolicy", "StagedGlobalNetworkPolicy",
                           "StagedNetworkPolicy"})
_UUID_FORMS = re.compile(
    r"(?:urn:uuid:|\{)?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12})\}?|([0-9a-fA-F]{32})")


class CRDConversionError(ValueError):
    """The custom resource cannot be converted (bad uid or metadata annotation)."""


def _parse_uuid(s: str) -> uuid.UUID:
    # google/uuid.Parse: 36-char form, urn:uuid: or {} wrapped, or 32 bare hex digits.
    m = _UUID_FORMS.fullmatch(s)
    if m is None or (s.startswith("{") != s.endswith("}")) or \
            (s.startswith("urn:") and s.endswith("}")):
        raise CRDConversionError(f"failed to parse UID {s!r}")
    return uuid.UUID(m.group(1) or m.group(2))


def _reverse8(b: int) -> int:
    return int(f"{b:08b}"[::-1], 2)


def convert_uid(uid: str) -> str:
    """``conversion.ConvertUID``: reverse the bits of every byte except the version and
    variant bytes (6 and 8).  Its own inverse."""
    raw = _parse_uuid(uid).bytes
    out = bytes(b if i in (6, 8) else _reverse8(b) for i, b in enumerate(raw))
    return str(uuid.UUID(bytes=out))


def _policy_name(name: str, tier: str | None) -> str:
    if not tier or tier == "default":
        return name.removeprefix("default.")
    return name


def crd_to_v3(kind: str, cr: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(datastore key name, v3 object) for a ``crd.projectcalico.org/v1`` object of
    Calico ``kind``.  Raises :class:`CRDConversionError` where the backend fails."""
    md_in = field_map(cr, "metadata")
    key_name = field_str(md_in, "name")
    obj = dict(cr)
    obj["kind"] = kind
    obj["apiVersion"] = "projectcalico.org/v3"
    md = dict(md_in)
    if md.get("uid"):
        md["uid"] = convert_uid(md["uid"])
    annotations = as_map(md.get("annotations"), "metadata.annotations")
    if METADATA_ANNOTATION not in annotations:
        obj["metadata"] = md
        return key_name, obj

    try:
        stored = json.loads(as_str(annotations[METADATA_ANNOTATION],
                                   f"metadata.annotations[{METADATA_ANNOTATION!r}]"))
    except (ValueError, RecursionError) as e:
        raise CRDConversionError(f"invalid {METADATA_ANNOTATION} annotation: {e}") from None
    if not isinstance(stored, dict):
        raise CRDConversionError(f"invalid {METADATA_ANNOTATION} annotation")
    refs = []
    for ref in stored.get("ownerReferences") or []:
        ref = dict(ref)
        if ref.get("apiVersion") in ("crd.projectcalico.org/v1", "projectcalico.org/v3"):
            ref["apiVersion"] = "projectcalico.org/v3"
            ref["uid"] = convert_uid(ref.get("uid") or "")
        refs.append(ref)
    stored["ownerReferences"] = refs or None

    merged_annotations: dict[str, str] | None = {
        k: v for k, v in annotations.items() if k != METADATA_ANNOTATION} or None
    labels: dict[str, str] | None = dict(md.get("labels") or {}) or None
    for k, v in (stored.get("labels") or {}).items():
        labels = labels if labels is not None else {}
        labels[k] = v
    for k, v in (stored.get("annotations") or {}).items():
        merged_annotations = merged_annotations if merged_annotations is not None else {}
        merged_annotations[k] = v

    if not stored.get("name"):
        if kind in _POLICY_KINDS:
            stored["name"] = _policy_name(key_name, (cr.get("spec") or {}).get("tier"))
        else:
            stored["name"] = key_name
    stored["namespace"] = md.get("namespace")
    stored["resourceVersion"] = md.get("resourceVersion")
    stored["uid"] = md.get("uid")
    stored["labels"] = labels
    stored["annotations"] = merged_annotations
    if not stored.get("creationTimestamp"):
        stored["creationTimestamp"] = md.get("creationTimestamp")
    obj["metadata"] = {k: v for k, v in stored.items() if v is not None}
    return key_name, obj
