"""Turns source-object events into New / Updated / Deleted updates of derived keys (pure).

One datastore object may convert into several keys (a Profile gives labels, rules and its v3
form; a Node gives host config keys and the v3 Node) and an update may drop some of them (a
pod losing its IP drops its endpoint key).  The tracker remembers, per source object, which
keys it produced last time and diffs the new conversion against that, like libcalico-go's
watcher cache does.
"""

from __future__ import annotations

__sans_io__ = True

import logging
from typing import Any

from ..datastore.events import ResourceEvent
from ..datastore.known import StateError
from ..model.kinds import ResourceKind
from ..model.kv import SerializedUpdate, UpdateType
from ..model.syncers import ConvertedKV, SyncerDefinition

log = logging.getLogger(__name__)

SourceKey = tuple[ResourceKind, str, str]  # kind, namespace, name
#: The keys one source object produced: the key itself when it is one (most objects: a pod
#: gives one endpoint), else a tuple.  Values are not kept: the cache has them.
DerivedKeys = str | tuple[str, ...]


class SourceTracker:
    """Per syncer type: the derived keys of every source object seen so far."""

    def __init__(self, definition: SyncerDefinition) -> None:
        self.definition = definition
        self._derived: dict[SourceKey, DerivedKeys] = {}

    def __len__(self) -> int:
        return len(self._derived)

    def export(self) -> list[list[Any]]:
        """The derived keys of every source object, as ``[kind, namespace, name, keys]``
        rows (``keys`` a string or a list, as held): for a warm start."""
        return [[str(kind), ns, name, keys if isinstance(keys, str) else list(keys)]
                for (kind, ns, name), keys in self._derived.items()]

    def restore(self, rows: object) -> None:
        """Take over a sibling's :meth:`export` (of the same syncer definition)."""
        if not isinstance(rows, list):
            raise StateError("tracker state: not a list")
        kinds = {str(k): k for k in self.definition.kinds}
        derived: dict[SourceKey, DerivedKeys] = {}
        for row in rows:
            if not isinstance(row, list) or len(row) != 4:
                raise StateError(f"tracker state: bad row {row!r:.80}")
            kind, ns, name, keys = row
            if kind not in kinds or not isinstance(ns, str) or not isinstance(name, str):
                raise StateError(f"tracker state: bad source {row[:3]!r:.80}")
            if isinstance(keys, list) and all(isinstance(k, str) for k in keys) and keys:
                derived[(kinds[kind], ns, name)] = tuple(keys)
            elif isinstance(keys, str):
                derived[(kinds[kind], ns, name)] = keys
            else:
                raise StateError(f"tracker state: bad keys of {row[:3]!r:.80}")
        self._derived = derived

    def static_updates(self) -> list[SerializedUpdate]:
        """Keys that exist whatever the datastore holds (the default-allow profile)."""
        return [SerializedUpdate(kv.key, kv.value, self.definition.static_revision,
                                 kv.v3_resource_version,
                                 update_type=UpdateType.NEW)
                for kv in self.definition.static_kvs]

    def apply(self, event: ResourceEvent) -> list[SerializedUpdate]:
        source: SourceKey = (event.kind, event.namespace, event.name)
        held = self._derived.get(source, ())
        old = (held,) if isinstance(held, str) else held
        # Deletions go out in the order the keys were produced; membership by set when many.
        was = set(old) if len(old) > 8 else old
        new: dict[str, ConvertedKV] = {}
        if event.obj is not None:
            # An object Calico would refuse converts to nothing (one warning from the
            # conversion), so its keys go as deleted, as Calico's watcher treats it.  Any
            # exception is a bug in the conversion: it propagates before anything changes
            # here, so no client is sent a deletion for it.
            for kv in self.definition.convert(event.kind, event.obj,
                                              key=(event.namespace, event.name)):
                new[kv.key] = kv
        revision = self.definition.source_revision(event.kind, event.revision)
        stamp = event.profile_stamp
        updates = [
            SerializedUpdate(key, kv.value, revision,
                             kv.v3_resource_version if stamp is None else
                             self.definition.stamped_v3_resource_version(
                                 event.kind, key, kv.v3_resource_version, stamp),
                             update_type=UpdateType.UPDATED if key in was else UpdateType.NEW)
            for key, kv in new.items()
        ]
        # Deletions carry no revision: Calico's watcher cache sends a deleted key alone.
        updates.extend(
            SerializedUpdate(key, None, "", update_type=UpdateType.DELETED)
            for key in old if key not in new
        )
        if len(new) == 1:
            self._derived[source] = next(iter(new))
        elif new:
            self._derived[source] = tuple(new)
        else:
            self._derived.pop(source, None)
        return updates
