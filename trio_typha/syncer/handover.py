"""One syncer type's state as a sibling hands it over for a warm start (pure data).

What a starting replica needs to carry on where a running one is, without listing: the
cache's KV set, the tracker's derived keys per source object (so later events become the
right New / Updated / Deleted updates) and the datastore watch's resume state (what was
sent per kind and the revision to watch from), all captured at one instant
(:meth:`~trio_typha.syncer.pipeline.SyncerPipeline.export`).  The tracker and watch state
are plain data (lists, dicts, strings) so that any transport can carry them; they are
checked where they are restored.
"""

from __future__ import annotations

__sans_io__ = True

from dataclasses import dataclass
from typing import Any

from ..model.kv import SerializedUpdate, SyncStatus


@dataclass(frozen=True, slots=True)
class SyncerState:
    syncer_type: str
    status: SyncStatus
    updates: tuple[SerializedUpdate, ...]  # the cache's KV set, every entry New
    tracker: list[list[Any]]  # SourceTracker.export()
    watch: dict[str, Any]  # Datastore.export_watch()
