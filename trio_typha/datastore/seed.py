"""Load a multi-document YAML of Kubernetes and projectcalico.org/v3 resources.

Accepts what ``kubectl apply -f`` takes: documents separated by ``---``, and ``List`` kinds
whose ``items`` are resources.  Errors name the file and the document.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..model.kinds import kind_for


class SeedError(ValueError):
    pass


def iter_resources(text: str, source: str = "<seed>") -> Iterator[dict[str, Any]]:
    import yaml  # here: the CLI imports this module's error on every start, etcd's too

    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise SeedError(f"{source}: invalid YAML: {exc}") from None
    for i, doc in enumerate(docs, 1):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise SeedError(f"{source}: document {i} is not a mapping")
        if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
            items = doc["items"]
        else:
            items = [doc]
        for item in items:
            for field in ("apiVersion", "kind"):
                if not item.get(field):
                    raise SeedError(f"{source}: document {i} has no {field}")
            if not (item.get("metadata") or {}).get("name"):
                raise SeedError(f"{source}: document {i} ({item['kind']}) has no metadata.name")
            try:
                kind_for(item["apiVersion"], item["kind"])
            except KeyError as exc:
                raise SeedError(f"{source}: document {i}: {exc.args[0]}") from None
            yield item


def load_seed_file(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SeedError(f"{path}: {exc.strerror}") from None
    return list(iter_resources(text, path))
