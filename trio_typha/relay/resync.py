"""A new upstream's snapshot, taken as a relist (pure).

When a relay tier connects to an upstream (the first time, or failing over to another),
the upstream's snapshot is the whole state as that upstream has it.  The relay's own
clients already hold the relay's state, so the relay publishes the difference only, as a
datastore watcher does after a relist: keys the snapshot lacks are deleted (no phantom
keys), keys it has with another value are updated, new keys are created, and keys it
has unchanged are not sent at all (nothing is lost, and a failover between two upstreams
in the same state costs the relay's clients nothing).
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Iterable, Mapping

from ..model.kv import SerializedUpdate, UpdateType


def relist_diff(held: Mapping[str, bytes | None], snapshot: Iterable[SerializedUpdate]
                ) -> list[SerializedUpdate]:
    """The updates that turn ``held`` (key -> value, the relay's cache) into ``snapshot``.

    Deletions come last, in key order, so a client never sees a key vanish before the
    state that replaces it (a policy moving between keys) has arrived.
    """
    seen: set[str] = set()
    out: list[SerializedUpdate] = []
    for update in snapshot:
        if update.deleted:
            continue  # a snapshot holds live keys only; an empty value is a deletion
        seen.add(update.key)
        old = held.get(update.key)
        if old == update.value:
            continue
        kind = UpdateType.NEW if old is None else UpdateType.UPDATED
        out.append(update if update.update_type is kind else SerializedUpdate(
            update.key, update.value, update.revision, update.v3_resource_version,
            update.ttl_ns, kind))
    out.extend(SerializedUpdate(key, None, update_type=UpdateType.DELETED)
               for key in sorted(held) if key not in seen and held[key])
    return out
