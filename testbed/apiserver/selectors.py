"""Label and field selectors, parsed once per request and matched per object (pure).

Label selectors support the set-based grammar of ``labels.Parse``: ``k``, ``!k``, ``k=v``,
``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k>1``, ``k<1``.  Field selectors
support ``=``, ``==`` and ``!=`` on the fields a real server indexes for the kind;
anything else is refused as the real server refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_EXISTS = re.compile(rf"^({_KEY})$")
_NOT_EXISTS = re.compile(rf"^!\s*({_KEY})$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|!=|=)\s*({_VALUE})$")
_COMPARE = re.compile(rf"^({_KEY})\s*([<>])\s*(-?[0-9]+)$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


class SelectorError(ValueError):
    """The selector text does not parse; the request gets a 400."""


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    op: str  # exists, !exists, in, notin, gt, lt
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!exists":
            return self.key not in labels
        if op == "in":
            return labels.get(self.key) in self.values
        if op == "notin":
            return labels.get(self.key) not in self.values
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        (bound,) = self.values
        return number > int(bound) if op == "gt" else number < int(bound)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[LabelRequirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return LabelSelector(())
    requirements = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if m := _EXISTS.match(part):
            requirements.append(LabelRequirement(m[1], "exists"))
        elif m := _NOT_EXISTS.match(part):
            requirements.append(LabelRequirement(m[1], "!exists"))
        elif m := _SET.match(part):
            values = [v.strip() for v in m[3].split(",")]
            if values == [""]:
                values = []
            bad = [v for v in values if not _VALUE_ONLY.match(v)]
            if bad or (not values and m[2] == "in"):
                raise SelectorError(f"unable to parse requirement: invalid values in {part!r}")
            requirements.append(LabelRequirement(m[1], m[2], frozenset(values)))
        elif m := _EQUALITY.match(part):
            op = "notin" if m[2] == "!=" else "in"
            requirements.append(LabelRequirement(m[1], op, frozenset([m[3]])))
        elif m := _COMPARE.match(part):
            op = "gt" if m[2] == ">" else "lt"
            requirements.append(LabelRequirement(m[1], op, frozenset([m[3]])))
        else:
            raise SelectorError(f"unable to parse requirement: {part!r}")
    return LabelSelector(tuple(requirements))


# Fields the real server can select on, beyond metadata.name / metadata.namespace.
_EXTRA_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset({"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                             "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                             "status.podIP", "status.nominatedNodeName"}),
    ("", "namespaces"): frozenset({"status.phase"}),
    ("", "nodes"): frozenset({"spec.unschedulable"}),
    ("", "services"): frozenset({"spec.clusterIP", "spec.type"}),
}


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[tuple[str, bool, str], ...]  # (field path, equal?, value)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, path) == value) == equal
                   for path, equal, value in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)


def parse_field_selector(text: str | None, group: str, plural: str) -> FieldSelector:
    if not text or not text.strip():
        return FieldSelector(())
    allowed = {"metadata.name", "metadata.namespace"} | _EXTRA_FIELDS.get((group, plural),
                                                                          frozenset())
    requirements = []
    for raw in text.split(","):
        part = raw.strip()
        for op in ("!=", "==", "="):
            field, sep, value = part.partition(op)
            if sep:
                break
        else:
            raise SelectorError(f"invalid selector: {part!r}; can't understand {part!r}")
        field = field.strip()
        if field not in allowed:
            raise SelectorError(f'field label not supported: {field}')
        requirements.append((field, op != "!=", value.strip()))
    return FieldSelector(tuple(requirements))


def combine(labels: LabelSelector, fields: FieldSelector
            ) -> Callable[[Mapping[str, Any]], bool] | None:
    """One predicate for both selectors, or None when there is nothing to filter."""
    if not labels and not fields:
        return None
    if not fields:
        return lambda obj: labels.matches(obj.get("metadata", {}).get("labels"))
    if not labels:
        return fields.matches
    return lambda obj: (labels.matches(obj.get("metadata", {}).get("labels"))
                        and fields.matches(obj))
