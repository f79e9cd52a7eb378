"""The unit that flows from conversion to every client: one serialized key/value update.

Keys and values are serialized exactly once, when they leave the conversion layer; from
there on every protocol frames the same bytes.
"""

from __future__ import annotations

__sans_io__ = True

import enum
from dataclasses import dataclass


class UpdateType(enum.IntEnum):
    """libcalico-go's api.UpdateType (uint8 on the wire)."""

    UNKNOWN = 0
    NEW = 1
    UPDATED = 2
    DELETED = 3


class SyncStatus(enum.IntEnum):
    """libcalico-go's api.SyncStatus (uint8 on the wire)."""

    WAIT_FOR_DATASTORE = 0
    RESYNC_IN_PROGRESS = 1
    IN_SYNC = 2


SYNCER_TYPES: tuple[str, ...] = ("felix", "bgp", "tunnel-ip-allocation", "node-status")


@dataclass(frozen=True, slots=True)
class SerializedUpdate:
    """One update as Typha sends it (syncproto.SerializedUpdate).

    ``value`` is ``None`` for a deletion: gob cannot tell nil from empty, so an empty
    value is a deletion too, and we never produce one for a live key.
    """

    key: str
    value: bytes | None
    revision: str = ""
    v3_resource_version: str = ""
    ttl_ns: int = 0
    update_type: UpdateType = UpdateType.NEW

    @property
    def deleted(self) -> bool:
        return not self.value

    def as_new(self) -> SerializedUpdate:
        """The form a snapshot entry takes: every snapshot entry is sent as New."""
        if self.update_type is UpdateType.NEW:
            return self
        return SerializedUpdate(
            self.key, self.value, self.revision, self.v3_resource_version, self.ttl_ns,
            UpdateType.NEW,
        )
