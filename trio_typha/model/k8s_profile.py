"""Namespaces and ServiceAccounts -> Calico v3 Profiles, and the default-allow profile.

Mirrors libcalico-go v3.32.1 ``NamespaceToProfile`` / ``ServiceAccountToProfile``
(``k8s/conversion/conversion.go``) and ``DefaultAllowProfile`` (``lib/resources/static.go``).
A namespace becomes profile ``kns.<ns>`` that allows all traffic and hands its labels,
prefixed ``pcns.``, to the pods in it; a service account becomes ``ksa.<ns>.<sa>`` with
``pcsa.``-prefixed labels and no rules.  All three are keyed by a ResourceKey of kind
``Profile`` and their own name.

Revisions (not part of the value): namespace profiles ``"<nsRV>/"``, service-account
profiles ``"/<saRV>"`` (:func:`profile_revision`), default-allow ``"1"``.
"""

from __future__ import annotations

__sans_io__ = True

import copy
from collections.abc import Mapping
from typing import Any

from .k8s_meta import CALICO_API_VERSION, convert_uid, go_time, mapping, sorted_map, str_or_empty

PROFILE_KIND = "Profile"
NAMESPACE_PROFILE_PREFIX = "kns."
SERVICE_ACCOUNT_PROFILE_PREFIX = "ksa."
NAMESPACE_LABEL_PREFIX = "pcns."
SERVICE_ACCOUNT_LABEL_PREFIX = "pcsa."
NAME_LABEL = "projectcalico.org/name"
DEFAULT_ALLOW_PROFILE_NAME = "projectcalico-default-allow"
DEFAULT_ALLOW_PROFILE_REVISION = "1"


def _allow_rule() -> dict[str, Any]:
    # Source and destination are struct fields; json-iterator emits them even when empty.
    return {"action": "Allow", "source": {}, "destination": {}}


def namespace_profile_name(namespace: str) -> str:
    return NAMESPACE_PROFILE_PREFIX + namespace


def service_account_profile_name(namespace: str, service_account: str) -> str:
    """``ksa.<ns>.<sa>``; an empty namespace counts as ``default``, as in Calico."""
    return f"{SERVICE_ACCOUNT_PROFILE_PREFIX}{namespace or 'default'}.{service_account}"


def profile_revision(namespace_rv: str = "", service_account_rv: str = "") -> str:
    """Calico's ``JoinProfileRevisions``: ``"<nsRV>/<saRV>"``."""
    return f"{namespace_rv}/{service_account_rv}"


def namespace_to_profile(ns: Mapping[str, Any]) -> dict[str, Any]:
    """The v3 Profile ``kns.<ns>`` Calico derives from a Namespace.

    Labels to apply: ``pcns.<k>=<v>`` for every namespace label plus
    ``pcns.projectcalico.org/name=<ns>``; one Allow rule each way.  Metadata carries only
    the name, ``ConvertUID`` of the namespace UID and the creation time.  Raises
    ``ConversionError`` when the UID is missing or not a UUID (Calico fails there too).
    """
    meta = mapping(ns.get("metadata"))
    name = str_or_empty(meta.get("name"))
    labels = {NAMESPACE_LABEL_PREFIX + k: str_or_empty(v)
              for k, v in mapping(meta.get("labels")).items()}
    labels[NAMESPACE_LABEL_PREFIX + NAME_LABEL] = name
    uid = convert_uid(str_or_empty(meta.get("uid")))
    return {
        "kind": PROFILE_KIND,
        "apiVersion": CALICO_API_VERSION,
        "metadata": _metadata(namespace_profile_name(name), uid, meta),
        "spec": {
            "ingress": [_allow_rule()],
            "egress": [_allow_rule()],
            "labelsToApply": sorted_map(labels),
        },
    }


def service_account_to_profile(sa: Mapping[str, Any]) -> dict[str, Any]:
    """The v3 Profile ``ksa.<ns>.<sa>`` Calico derives from a ServiceAccount.

    Labels to apply: ``pcsa.<k>=<v>`` for every label plus
    ``pcsa.projectcalico.org/name=<sa>``; no rules.  Metadata as for namespaces; a
    missing or malformed UID raises ``ConversionError``.
    """
    meta = mapping(sa.get("metadata"))
    name = str_or_empty(meta.get("name"))
    labels = {SERVICE_ACCOUNT_LABEL_PREFIX + k: str_or_empty(v)
              for k, v in mapping(meta.get("labels")).items()}
    labels[SERVICE_ACCOUNT_LABEL_PREFIX + NAME_LABEL] = name
    uid = convert_uid(str_or_empty(meta.get("uid")))
    profile_name = service_account_profile_name(str_or_empty(meta.get("namespace")), name)
    return {
        "kind": PROFILE_KIND,
        "apiVersion": CALICO_API_VERSION,
        "metadata": _metadata(profile_name, uid, meta),
        "spec": {"labelsToApply": sorted_map(labels)},
    }


def _metadata(name: str, uid: str, source_meta: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "uid": uid,
            "creationTimestamp": go_time(source_meta.get("creationTimestamp"))}


DEFAULT_ALLOW_PROFILE: dict[str, Any] = {
    "kind": PROFILE_KIND,
    "apiVersion": CALICO_API_VERSION,
    # Only the name is set; the zero creation time still marshals (as null).
    "metadata": {"name": DEFAULT_ALLOW_PROFILE_NAME, "creationTimestamp": None},
    "spec": {"ingress": [_allow_rule()], "egress": [_allow_rule()]},
}
"""Calico's always-present ``projectcalico-default-allow`` profile (revision ``"1"``).

Shared: treat it as read-only, or take :func:`default_allow_profile` for a private copy.
"""


def default_allow_profile() -> dict[str, Any]:
    """A fresh copy of :data:`DEFAULT_ALLOW_PROFILE`."""
    return copy.deepcopy(DEFAULT_ALLOW_PROFILE)
