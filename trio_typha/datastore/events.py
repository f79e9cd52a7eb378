"""What a datastore sends a syncer pipeline (pure data; see :mod:`.base` for the contract).

A datastore sends every object it lists (``ResourceEvent``), ``KindSynced`` once a kind's
initial list is complete, then changes; ``Connection`` events report reachability.  Kept apart
from :mod:`.base` so the pure source tracker can use them without importing trio.
"""

from __future__ import annotations

__sans_io__ = True

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
    #: the resourceVersion Calico's KDD profile watcher writes into the v3 Profile it
    #: derives from this watched Namespace or ServiceAccount (:mod:`.k8s_profile_watch`);
    #: None for everything else, listed objects included
    profile_stamp: str | None = None

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
