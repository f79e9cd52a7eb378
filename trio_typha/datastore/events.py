"""What a datastore sends a syncer pipeline (pure data; see :mod:`.base` for the contract).

A datastore sends every object it lists (``ResourceEvent``), ``KindSynced`` once a kind's
initial list is complete, then changes; ``Connection`` events report reachability.  Kept apart
from :mod:`.base` so the pure source tracker can use them without importing trio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.kinds import ResourceKind


@dataclass(frozen=True, slots=True)
class ResourceEvent:
    kind: ResourceKind
    namespace: str
    name: str
    obj: Mapping[str, Any] | None  # None: the object is gone
    revision: str
    #: it came from a watch event rather than a list (KDD profiles differ, see
    #: :meth:`~trio_typha.model.syncers.SyncerDefinition.watched_v3_resource_version`)
    watched: bool = False

    @property
    def deleted(self) -> bool:
        return self.obj is None


@dataclass(frozen=True, slots=True)
class KindSynced:
    kind: ResourceKind


@dataclass(frozen=True, slots=True)
class Connection:
    """Reachability of the datastore for one kind (or all kinds when ``kind`` is None).

    ``denied`` marks an access failure (401/403): that makes the server not ready, while a
    mere outage after the first sync does not (Typha keeps serving its cache).
    """

    ok: bool
    reason: str = ""
    kind: ResourceKind | None = None
    denied: bool = False


DatastoreEvent = ResourceEvent | KindSynced | Connection
