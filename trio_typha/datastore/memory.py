"""The embedded datastore (``TYPHA_DATASTORETYPE=memory``) for demos and tests.

:class:`MemoryStore` holds Kubernetes and ``projectcalico.org/v3`` objects the way an API
server would (uid, resourceVersion from one increasing revision, creationTimestamp) and keeps
a bounded change log.  :class:`MemoryDatastore` list-watches it like a real datastore: list at
a revision, then follow the log; a watcher that falls off the end of the log relists and
sends only the differences.  Writes are synchronous, so a churn generator or a test can
change the store without awaiting anybody.

Each object is kept serialized, as an API server or etcd keeps it (pickled, so every Python
value comes back exactly as it was put): pickled, a pod takes about a fifth of what it takes
as nested dicts, which would otherwise be most of the process's memory in a large cluster.
Every read decodes a fresh
copy, so no reader can change what the store holds; the watcher decodes each object just
before it hands it downstream.
"""

from __future__ import annotations

import datetime
import logging
import pickle
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import trio

from ..model.kinds import ResourceKind, kind_for
from .base import Datastore, DatastoreEvent, KindSynced, hand_over
from .known import KnownObjects

log = logging.getLogger(__name__)

ObjKey = tuple[ResourceKind, str, str]
#: An object as stored: its resourceVersion and its pickled form.
Stored = tuple[str, bytes]


def _encode(obj: Mapping[str, Any]) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _decode(blob: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = pickle.loads(blob)  # our own bytes, never a peer's
    return obj


class StoreError(ValueError):
    """An object cannot be stored (missing name, unknown kind, ...)."""


class MemoryStore:
    """Objects by kind, one global revision, and a change log of at most ``history`` entries."""

    def __init__(self, *, history: int = 100_000) -> None:
        self.revision = 0
        self._objects: dict[ResourceKind, dict[tuple[str, str], Stored]] = {}
        self._log: deque[tuple[int, ResourceKind, str, str, bytes | None]] = deque(
            maxlen=history)
        self._changed = trio.Event()

    # -- writes ---------------------------------------------------------------------------

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace an object (identified by apiVersion, kind, namespace, name)."""
        try:
            kind = kind_for(obj["apiVersion"], obj["kind"])
        except KeyError as exc:
            raise StoreError(f"cannot store object: {exc}") from None
        stored = dict(obj)
        md = stored["metadata"] = dict(stored.get("metadata", {}))
        name = md.get("name")
        if not name:
            raise StoreError(f"{kind.kind} without metadata.name")
        ns = md.get("namespace", "") if kind.namespaced else ""
        if kind.namespaced:
            if not ns:
                ns = md["namespace"] = "default"
        else:
            md.pop("namespace", None)
        objects = self._objects.setdefault(kind, {})
        old = objects.get((ns, name))
        self.revision += 1
        if old is not None:
            old_md = _decode(old[1])["metadata"]
            md.setdefault("uid", old_md["uid"])
            md.setdefault("creationTimestamp", old_md["creationTimestamp"])
        else:
            md.setdefault("uid", str(uuid.uuid4()))
            md.setdefault("creationTimestamp", _now())
        md["resourceVersion"] = rv = str(self.revision)
        blob = _encode(stored)
        objects[(ns, name)] = (rv, blob)
        self._record(kind, ns, name, blob)
        return _decode(blob)

    def put_all(self, objs: Iterable[Mapping[str, Any]]) -> int:
        n = 0
        for obj in objs:
            self.put(obj)
            n += 1
        return n

    def delete(self, kind: ResourceKind, namespace: str, name: str) -> bool:
        objects = self._objects.get(kind, {})
        if objects.pop((namespace, name), None) is None:
            return False
        self.revision += 1
        self._record(kind, namespace, name, None)
        return True

    def _record(self, kind: ResourceKind, ns: str, name: str, blob: bytes | None) -> None:
        self._log.append((self.revision, kind, ns, name, blob))
        self._changed.set()
        self._changed = trio.Event()

    # -- reads ----------------------------------------------------------------------------

    def get(self, kind: ResourceKind, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the object, or None."""
        stored = self._objects.get(kind, {}).get((namespace, name))
        return None if stored is None else _decode(stored[1])

    def objects(self, kind: ResourceKind) -> list[tuple[str, str, dict[str, Any]]]:
        """Copies of every object of ``kind``."""
        return [(ns, name, _decode(blob))
                for (ns, name), (_, blob) in self._objects.get(kind, {}).items()]

    def stored(self, kind: ResourceKind) -> list[tuple[str, str, str, bytes]]:
        """``(namespace, name, resourceVersion, encoded object)`` of every object of
        ``kind``, as of now (decode with :func:`decode`)."""
        return [(ns, name, rv, blob)
                for (ns, name), (rv, blob) in self._objects.get(kind, {}).items()]

    def count(self, kind: ResourceKind | None = None) -> int:
        if kind is not None:
            return len(self._objects.get(kind, {}))
        return sum(len(v) for v in self._objects.values())

    def changes_since(self, revision: int
                      ) -> list[tuple[int, ResourceKind, str, str, bytes | None]] | None:
        """Log entries after ``revision`` (objects encoded, None for a deletion); None if the
        log no longer reaches back that far."""
        if revision >= self.revision:
            return []
        if not self._log or self._log[0][0] > revision + 1:
            return None
        # The log is ordered by revision; skip what the caller has already seen.
        start = len(self._log) - (self.revision - revision)
        return list(self._log)[max(start, 0):]

    async def wait_changed(self, revision: int) -> None:
        while self.revision <= revision:
            await self._changed.wait()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MemoryDatastore(Datastore):
    """List-watches a :class:`MemoryStore` for a pipeline."""

    name = "memory"

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def watch(self, kinds: Sequence[ResourceKind],
                    send: trio.MemorySendChannel[DatastoreEvent], *, name: str = "",
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        wanted = set(kinds)
        known = {k: KnownObjects(k) for k in kinds}
        task_status.started()
        revision = await self._relist(known, send, first=True)
        while True:
            await self.store.wait_changed(revision)
            changes = self.store.changes_since(revision)
            if changes is None:
                log.info("Memory datastore watcher fell behind the change log; relisting")
                revision = await self._relist(known, send, first=False)
                continue
            revision = changes[-1][0] if changes else revision
            await hand_over(send, _changed(known, wanted, changes))

    async def _relist(self, known: Mapping[ResourceKind, KnownObjects],
                      send: trio.MemorySendChannel[DatastoreEvent], *, first: bool) -> int:
        # Take every kind's list before the first await: the store can change while we send,
        # and the log replay that follows must start exactly at this revision.
        revision = self.store.revision
        listed = {kind: self.store.stored(kind) for kind in known}
        for kind, entries in listed.items():
            # Each object is decoded as its event is sent, not all of them up front.
            await hand_over(send, known[kind].reconcile(_decoded(known[kind], entries), ""))
            if first:
                await hand_over(send, (KindSynced(kind),))
        return revision


def _changed(known: Mapping[ResourceKind, KnownObjects], wanted: set[ResourceKind],
             changes: list[tuple[int, ResourceKind, str, str, bytes | None]]
             ) -> Iterator[DatastoreEvent]:
    """The events for ``changes`` (log entries) of the ``wanted`` kinds."""
    for rev, kind, ns, name, blob in changes:
        if kind in wanted:
            k = known[kind]
            ev = (k.upsert(ns, name, _decode(blob), str(rev)) if blob is not None
                  else k.delete(ns, name, str(rev)))
            if ev is not None:
                yield ev


def _decoded(known: KnownObjects, entries: list[tuple[str, str, str, bytes]]
             ) -> Iterator[tuple[str, str, Mapping[str, Any], str]]:
    """``KnownObjects.reconcile`` items; unchanged objects are not decoded (None)."""
    for ns, name, rv, blob in entries:
        yield ns, name, (_UNCHANGED if known.revision(ns, name) == rv else _decode(blob)), rv


_UNCHANGED: Mapping[str, Any] = {}  # never sent on: upsert skips a known revision
