"""What an etcd watcher has told its pipeline, and where it can resume (pure).

:class:`EtcdSyncState` turns range pages and watch messages into datastore events.  It keeps
one :class:`KnownObjects` per kind, so a relist (first start, compaction, a replaced etcd)
sends only differences, and the revision up to which every change has been delivered, so a
reconnect to the same etcd replays just the gap.
"""

from __future__ import annotations

__sans_io__ = True

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..model.kinds import ResourceKind
from .etcd_layout import KeyParser, decode_value
from .etcd_rpc import Header, KeyValue, WatchResponse
from .events import DatastoreEvent, KindSynced, ResourceEvent
from .known import KnownObjects, Relisting, StateError

log = logging.getLogger(__name__)


class EtcdSyncState:
    """Per-watch bookkeeping: sent objects per kind, delivered revision, cluster identity."""

    def __init__(self, kinds: Sequence[ResourceKind]) -> None:
        self.kinds = tuple(dict.fromkeys(kinds))
        self._parser = KeyParser(self.kinds)
        self._known = {k: KnownObjects(k) for k in self.kinds}
        self._synced: set[ResourceKind] = set()
        self._relisting: dict[ResourceKind, Relisting] = {}  # kinds part-way through a list
        #: every change up to this revision has been turned into events (0: never listed)
        self.revision = 0
        self.cluster_id = ""
        self._stale = True

    def __len__(self) -> int:
        return sum(len(k) for k in self._known.values())

    # -- a warm start (:mod:`trio_typha.warm`) --------------------------------------------

    def export(self) -> dict[str, Any]:
        """Where this watch stands, as data: what was sent per kind, the revision every
        change up to which was delivered, and the etcd cluster it came from."""
        return {"revision": self.revision, "cluster_id": self.cluster_id,
                "stale": self._stale, "synced": sorted(str(k) for k in self._synced),
                "known": {str(k): known.export() for k, known in self._known.items()}}

    def restore(self, state: object) -> None:
        """Take over a sibling's :meth:`export` for the same kinds: the next session
        watches from its revision, against the same cluster, unless etcd compacted past
        it (then it lists, sending only differences, as after any compaction)."""
        if not isinstance(state, dict):
            raise StateError("etcd watch state: not an object")
        revision, cluster, stale = (state.get("revision"), state.get("cluster_id"),
                                    state.get("stale"))
        known, synced = state.get("known"), state.get("synced")
        if (not isinstance(revision, int) or isinstance(revision, bool) or revision < 0
                or not isinstance(cluster, str) or not isinstance(stale, bool)
                or not isinstance(known, dict) or not isinstance(synced, list)):
            raise StateError("etcd watch state: bad revision, cluster_id, stale, known or "
                             "synced")
        by_name = {str(k): k for k in self.kinds}
        if set(known) != set(by_name) or not set(synced) <= set(by_name):
            raise StateError(f"etcd watch state of kinds {sorted(known)}, not "
                             f"{sorted(by_name)}")
        for name, rows in known.items():
            self._known[by_name[name]].restore(rows)
        self._synced = {by_name[n] for n in synced}
        self.revision, self.cluster_id, self._stale = revision, cluster, stale

    # -- deciding how to (re)start --------------------------------------------------------

    def needs_relist(self, current: Header) -> bool:
        """Whether a session against an etcd whose status is ``current`` must list first.

        Resuming the watch is only sound against the same cluster whose history still
        reaches our revision; a different cluster id, or a revision behind ours (a wiped or
        restored etcd) means our revision means nothing there.  (A member that merely lags
        its peers also looks rewound; the relist that follows is harmless, as it sends only
        differences.)
        """
        if self._stale:
            return True
        if current.cluster_id != self.cluster_id or current.revision < self.revision:
            log.warning("etcd changed identity (cluster %s rev %d, was cluster %s rev %d); "
                        "relisting", current.cluster_id, current.revision, self.cluster_id,
                        self.revision)
            return True
        return False

    def compacted(self, compact_revision: int) -> None:
        """The watch cannot resume: history before ``compact_revision`` is gone."""
        log.info("etcd compacted to revision %d past our revision %d; relisting",
                 compact_revision, self.revision)
        self._stale = True

    # -- listing --------------------------------------------------------------------------

    def begin_list(self) -> None:
        """A list of every kind starts (again): any list left part-way is abandoned."""
        self._relisting.clear()

    def listed(self, kind: ResourceKind, kvs: Iterable[KeyValue],
               header: Header) -> list[DatastoreEvent]:
        """A complete range of ``kind`` at ``header.revision``: the differences, then (the
        first time only, as Calico's watcher caches do) ``KindSynced``."""
        return [*self.listed_page(kind, kvs), *self.kind_listed(kind)]

    def listed_page(self, kind: ResourceKind, kvs: Iterable[KeyValue]
                    ) -> list[DatastoreEvent]:
        """One page of ``kind``'s range: the objects in it that are new or changed."""
        relisting = self._relisting.get(kind)
        if relisting is None:
            relisting = self._relisting[kind] = Relisting(self._known[kind])
        return list(relisting.page(self._decoded(kind, kvs)))

    def kind_listed(self, kind: ResourceKind) -> list[DatastoreEvent]:
        """``kind``'s range is complete: the deletions it implies, then (the first time
        only, as Calico's watcher caches do) ``KindSynced``."""
        relisting = self._relisting.pop(kind, None) or Relisting(self._known[kind])
        # Deletions a relist implies carry no revision, as Calico's watcher cache sends them.
        events: list[DatastoreEvent] = list(relisting.finish(""))
        if kind not in self._synced:
            self._synced.add(kind)
            events.append(KindSynced(kind))
        return events

    def _decoded(self, kind: ResourceKind, kvs: Iterable[KeyValue]
                 ) -> Iterator[tuple[str, str, dict[str, Any], str]]:
        parse = self._parser.parse
        for kv in kvs:
            parsed = parse(kv.key)
            if parsed is None or parsed[0] != kind:
                log.warning("Skipping unparsable etcd key %r", kv.key)
                continue
            _, ns, name = parsed
            try:
                obj = decode_value(kind, name, kv.value)
            except ValueError as exc:
                log.warning("Skipping etcd key %s: %s", kv.key.decode(errors="replace"), exc)
                continue
            yield ns, name, obj, str(kv.mod_revision)

    def list_complete(self, header: Header) -> None:
        """Every kind has been listed at ``header.revision``: watch from the next one."""
        self.revision = header.revision
        self.cluster_id = header.cluster_id
        self._stale = False

    # -- watching -------------------------------------------------------------------------

    def watched(self, msg: WatchResponse) -> list[ResourceEvent]:
        """Events for one watch message, and advance the delivered revision."""
        out: list[ResourceEvent] = []
        for ev in msg.events:
            self.revision = max(self.revision, ev.kv.mod_revision)
            parsed = self._parser.parse(ev.kv.key)
            if parsed is None:
                continue  # another kind inside the watched span
            kind, ns, name = parsed
            known = self._known[kind]
            rev = str(ev.kv.mod_revision)
            if ev.deleted:
                # Calico reports a deletion with the deleted entry's last revision (the
                # watch's previous KV), which is the one we sent it at.
                got = known.delete(ns, name, known.revision(ns, name) or rev)
            else:
                try:
                    got = known.upsert(ns, name, decode_value(kind, name, ev.kv.value), rev)
                except ValueError as exc:
                    # A relist would leave this key out, so treat it the same way here: the
                    # pipeline's view must not depend on how we learned about the key.
                    log.warning("Skipping etcd key %s: %s", ev.kv.key.decode(errors="replace"),
                                exc)
                    got = known.delete(ns, name, rev)
            if got is not None:
                out.append(got)
        if msg.progress_notify:
            self.revision = max(self.revision, msg.header.revision)
        return out
