"""Profiles → ``ProfileLabelsKey`` + ``ProfileRulesKey`` + the v3 object itself
(``profileprocessor.go``)."""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from . import keys
from .gojson import STRING, Map, dumps
from .goschema import ROOTS
from .passthrough import resource_kv
from .rules import rule_v3_to_v1
from .shape import maps

_RULES = ROOTS["v1.ProfileRules"]
_LABELS = Map(STRING)


def profile_kvs(key_name: str, profile: Mapping[str, Any]) -> list[tuple[str, bytes, str]]:
    """(key, value, V3ResourceVersion) triples in the processor's order: labels (only when
    there are some), rules, then the v3 passthrough."""
    spec = profile.get("spec") or {}
    out: list[tuple[str, bytes, str]] = []
    labels = spec.get("labelsToApply")
    if labels:
        out.append((keys.profile_labels_key(key_name), dumps(_LABELS, labels), ""))
    rules = {"inbound_rules": [rule_v3_to_v1(r, "") for r in maps(spec.get("ingress"),
                                                                  "spec.ingress")],
             "outbound_rules": [rule_v3_to_v1(r, "") for r in maps(spec.get("egress"),
                                                                   "spec.egress")]}
    out.append((keys.profile_rules_key(key_name), dumps(_RULES, rules), ""))
    out.append(resource_kv("Profile", profile, key_name=key_name))
    return out
