"""What a sync client has received: the KV set, the status, and progress counters.

Both protocol clients feed one of these, so the CLI, the test bed's fleet and the tests
compare the two protocols on equal terms.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..cache.digest import KeyTree
from ..model.kv import SerializedUpdate, SyncStatus


@dataclass
class SyncView:
    kvs: dict[str, SerializedUpdate] = field(default_factory=dict)
    status: SyncStatus = SyncStatus.WAIT_FOR_DATASTORE
    snapshot_done: bool = False
    snapshot_size: int = 0
    updates_received: int = 0
    pings: int = 0
    #: Kept by a client that resumes (gRPC): the hash tree of ``kvs`` and the position
    #: (server epoch, breadcrumb seq) reached.
    tree: KeyTree | None = None
    epoch: int = 0
    seq: int = 0
    server_epoch: int = 0

    def apply(self, updates: Iterable[SerializedUpdate]) -> None:
        tree = self.tree
        for u in updates:
            self.updates_received += 1
            if u.deleted:
                self.kvs.pop(u.key, None)
            else:
                self.kvs[u.key] = u
            if tree is not None:
                tree.put(u.key, u.value, u.revision)

    def restart(self) -> None:
        """A snapshot follows: it replaces the copy (in a new map: whoever holds the old
        one keeps the state it had)."""
        self.kvs = {}
        self.snapshot_done = False
        if self.tree is not None:
            self.tree = KeyTree()

    @property
    def in_sync(self) -> bool:
        return self.status is SyncStatus.IN_SYNC

    def as_dict(self) -> dict[str, bytes]:
        return {k: v.value or b"" for k, v in self.kvs.items()}
