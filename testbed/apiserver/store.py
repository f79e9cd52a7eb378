"""The test bed's etcd: every object of every kind under one revision counter (pure).

Objects are keyed by ``(group, plural)`` then ``(namespace, name)``.  Each write bumps the
store revision, which becomes the object's ``metadata.resourceVersion``, and appends an
:class:`Event` to a bounded history.  The history serves watches that resume from a
revision and lists read *at* a revision (consistent pagination); anything older than the
history is gone, exactly like an etcd compaction, and answers 410.

Calico CRD objects (``crd.projectcalico.org``) are checked against the field types of
Calico's CRD schemas on every write, direct or through the API (:mod:`.crd_schema`): the
store holds only what kube-apiserver would accept for that group.

Stored objects are never mutated in place: a write builds a new top-level dict and a new
``metadata`` dict, sharing the rest with the caller's object.  Callers hand ownership of what
they pass in and must treat returned objects as read-only.  Each version's JSON is encoded
at most once, however many lists and watches send it.
"""

from __future__ import annotations

import gc
import json
import secrets
import time
import uuid
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from . import crd_schema
from .status import (
    ApiError,
    KindLike,
    already_exists,
    conflict,
    invalid,
    not_found,
    too_large_resource_version,
    too_old_resource_version,
)

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
KindKey = tuple[str, str]  # (group, plural)
Predicate = Callable[[Mapping[str, Any]], bool]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # as apiserver's generateName


def encode_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Stored:
    """One version of one object, with its JSON and watch-event lines memoised."""

    __slots__ = ("_item", "_lines", "_raw", "obj", "rev")

    def __init__(self, obj: dict[str, Any], rev: int) -> None:
        self.obj = obj
        self.rev = rev
        self._raw: bytes | None = None
        self._item: bytes | None = None
        self._lines: dict[str, bytes] | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = encode_json(self.obj)
        return self._raw

    @property
    def list_item(self) -> bytes:
        """The JSON without ``apiVersion``/``kind``: how kube-apiserver encodes the items of
        a built-in kind's list (a typed ``PodList`` item carries no TypeMeta)."""
        if self._item is None:
            self._item = encode_json({k: v for k, v in self.obj.items()
                                      if k not in ("apiVersion", "kind")})
        return self._item

    def event_line(self, event_type: str) -> bytes:
        """``{"type":..,"object":..}`` plus newline, encoded once per type."""
        if self._lines is None:
            self._lines = {}
        line = self._lines.get(event_type)
        if line is None:
            line = b'{"type":"%s","object":%s}\n' % (event_type.encode(), self.raw)
            self._lines[event_type] = line
        return line


@dataclass(frozen=True, slots=True)
class Event:
    """One write.  ``obj`` is what watchers are sent: for DELETED, the final state stamped
    with the deletion revision.  ``prev`` is the version before the write (None if ADDED)."""

    rev: int
    kind: KindKey
    key: Key
    type: str
    obj: Stored
    prev: Stored | None


@dataclass(slots=True)
class ListPage:
    items: list[Stored]
    revision: int
    last_key: Key | None  # set when more keys follow: where the next page starts after
    remaining: int | None  # keys after this page, when cheaply known (no filter, no overlay)


def _kind_key(kind: KindLike) -> KindKey:
    return (kind.group, kind.plural)


def _api_version(kind: KindLike) -> str:
    return f"{kind.group}/{kind.version}" if kind.group else kind.version


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What ``metadata.generation`` tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Store:
    """In-memory objects, one revision counter, a bounded event history (see module doc).

    ``on_change`` (if set) is called after every write; the trio shell uses it to wake
    watch streams.
    """

    def __init__(self, *, history_size: int = 10_000,
                 now: Callable[[], float] = time.time) -> None:
        if history_size < 1:
            raise ValueError("history_size must be at least 1")
        self.history_size = history_size
        self.on_change: Callable[[], None] | None = None
        self._now = now
        self._rev = 0
        self._compacted = 0  # explicit compactions
        self._history_floor = 0  # events up to here fell out of the bounded history
        self._objects: dict[KindKey, dict[Key, Stored]] = {}
        # Sorted keys per kind, built on the first list and then kept up to date with
        # insort until too many edits make a fresh sort cheaper.
        self._sorted: dict[KindKey, list[Key]] = {}
        self._sorted_edits: dict[KindKey, int] = {}
        self._history: deque[Event] = deque()
        # What kube-apiserver's watch cache of each kind has processed: its own events, and
        # etcd's progress notifications (:meth:`progress`), which reach every kind.
        self._kind_rev: dict[KindKey, int] = {}
        self._progress_rev = 0
        # uids are a random per-store prefix plus the creating revision: unique, and far
        # cheaper than uuid4() per object when seeding a 100k-pod cluster.
        self._uid_prefix = str(uuid.uuid4())[:24]
        self._stamp_second = -1
        self._stamp = ""

    # -- revisions and history -----------------------------------------------------

    @property
    def revision(self) -> int:
        """The revision of the latest write (0 before any)."""
        return self._rev

    @property
    def compacted_revision(self) -> int:
        """New watches and consistent lists must start at or after this revision."""
        return max(self._compacted, self._history_floor)

    def compact(self, revision: int | None = None) -> None:
        """Make revisions before ``revision`` (default: now) answer 410 to new requests,
        like an etcd compaction.  Watches already streaming carry on: a real API server
        feeds them from its watch cache."""
        target = self._rev if revision is None else min(revision, self._rev)
        self._compacted = max(self._compacted, target)

    def kind_revision(self, kind: KindLike) -> int:
        """The revision kube-apiserver's watch cache of ``kind`` has processed, which its
        bookmarks carry: the kind's latest write, or the store's revision at the last
        progress notification if that is later (``storage/cacher/cacher.go``
        ``dispatchEvents``: ``lastProcessedResourceVersion``)."""
        return max(self._kind_rev.get(_kind_key(kind), 0), self._progress_rev)

    def progress(self) -> None:
        """An etcd progress notification: every kind's watch cache has seen the store up to
        now (kube-apiserver watches etcd with progress notifications on; etcd sends them to
        idle watches every 10 minutes by default)."""
        self._progress_rev = self._rev

    def check_revision(self, revision: int) -> None:
        """Raise the 410/504 the real server gives for an unusable revision."""
        oldest = self.compacted_revision
        if revision < oldest:
            raise too_old_resource_version(revision, oldest + 1)
        if revision > self._rev:
            raise too_large_resource_version(revision, self._rev)

    def events_after(self, revision: int, *, resuming: bool = False) -> list[Event]:
        """Every event with a revision above ``revision``, oldest first.

        410 if the history no longer reaches back that far, or (unless ``resuming`` an
        already-running watch) if ``revision`` predates a compaction.
        """
        oldest = self._history_floor if resuming else self.compacted_revision
        if revision < oldest:
            raise too_old_resource_version(revision, oldest + 1)
        out = []
        for event in reversed(self._history):
            if event.rev <= revision:
                break
            out.append(event)
        out.reverse()
        return out

    # -- reads ---------------------------------------------------------------------

    def entry(self, kind: KindLike, namespace: str, name: str) -> Stored | None:
        return self._objects.get(_kind_key(kind), {}).get((namespace or "", name))

    def get(self, kind: KindLike, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.entry(kind, namespace, name)
        return None if found is None else found.obj

    def count(self, kind: KindLike, namespace: str | None = None) -> int:
        objects = self._objects.get(_kind_key(kind), {})
        if namespace is None:
            return len(objects)
        return sum(1 for ns, _ in objects if ns == namespace)

    def objects(self, kind: KindLike, namespace: str | None = None) -> list[dict[str, Any]]:
        """Current objects of a kind in key order (a convenience for tests)."""
        return [s.obj for s in self.list(kind, namespace).items]

    def list(self, kind: KindLike, namespace: str | None = None, *,
             revision: int | None = None, after: Key | None = None, limit: int = 0,
             match: Predicate | None = None) -> ListPage:
        """One page of a kind, in (namespace, name) order, as it was at ``revision``.

        ``after`` is the last key of the previous page.  Reading at an older revision
        overlays the history onto the current state, so every page of a paginated list
        shows the same revision even while writes continue.
        """
        kk = _kind_key(kind)
        current = self._rev
        at = current if revision is None else revision
        self.check_revision(at)
        overlay = self._overlay(kk, at) if at < current else {}
        objects = self._objects.get(kk, {})
        keys = self._sorted_keys(kk)
        lo, hi = 0, len(keys)
        if namespace is not None:
            lo, hi = bisect_left(keys, (namespace,)), bisect_left(keys, (namespace + "\0",))
        if after is not None:
            lo = max(lo, bisect_right(keys, after, lo, hi))
        extra = sorted(k for k in overlay
                       if (namespace is None or k[0] == namespace)
                       and (after is None or k > after))
        items: list[Stored] = []
        more = False
        last: Key | None = None
        i, j = lo, 0
        while True:
            if i < hi and (j >= len(extra) or keys[i] <= extra[j]):
                key = keys[i]
                i += 1
                if j < len(extra) and extra[j] == key:
                    j += 1
            elif j < len(extra):
                key = extra[j]
                j += 1
            else:
                break
            value = overlay[key] if key in overlay else objects[key]
            if value is None:
                continue
            if limit and len(items) >= limit:
                more = True
                break
            if match is not None and not match(value.obj):
                continue
            items.append(value)
            last = key
        remaining = None
        if more and not overlay and match is None:
            remaining = hi - i + 1
        return ListPage(items, at, last if more else None, remaining)

    def _overlay(self, kk: KindKey, revision: int) -> dict[Key, Stored | None]:
        """For each key of ``kk`` written after ``revision``: its version at ``revision``."""
        overlay: dict[Key, Stored | None] = {}
        for event in reversed(self._history):
            if event.rev <= revision:
                break
            if event.kind == kk:
                overlay[event.key] = event.prev  # oldest write after ``revision`` wins
        return overlay

    def _sorted_keys(self, kk: KindKey) -> list[Key]:
        keys = self._sorted.get(kk)
        if keys is None:
            keys = self._sorted[kk] = sorted(self._objects.get(kk, ()))
            self._sorted_edits[kk] = 0
        return keys

    def _index_edit(self, kk: KindKey, key: Key, added: bool) -> None:
        keys = self._sorted.get(kk)
        if keys is None:
            return
        edits = self._sorted_edits[kk] = self._sorted_edits[kk] + 1
        if edits > max(1024, len(keys) // 8):
            del self._sorted[kk]
        elif added:
            insort(keys, key)
        else:
            del keys[bisect_left(keys, key)]

    # -- writes ----------------------------------------------------------------------

    def create(self, kind: KindLike, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store a new object (409 AlreadyExists if the key is taken); returns it."""
        kk = _kind_key(kind)
        objects = self._objects.setdefault(kk, {})
        meta = dict(obj.get("metadata") or {})
        namespace = self._namespace_of(kind, meta)
        name = meta.get("name") or ""
        if not name:
            prefix = meta.get("generateName") or ""
            if not prefix:
                raise invalid(kind, "", "metadata.name",
                              "Required value: name or generateName is required")
            name = self._generate_name(prefix, namespace, objects)
        self._check_name(kind, name)
        key = (namespace, name)
        if key in objects:
            raise already_exists(kind, name)
        rev = self._rev + 1
        meta["name"] = name
        meta["uid"] = f"{self._uid_prefix}{rev:012x}"
        meta["resourceVersion"] = str(rev)
        meta["generation"] = 1
        meta["creationTimestamp"] = self._timestamp()
        stored = Stored(self._assemble(kind, obj, meta), rev)
        crd_schema.check(kind, stored.obj)
        self._commit(kk, key, ADDED, stored, None)
        return stored.obj

    def update(self, kind: KindLike, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an existing object.

        A non-empty ``metadata.resourceVersion`` is a precondition (409 Conflict if stale).
        uid and creationTimestamp are kept; generation goes up when anything but metadata
        and status changed.  An update that changes nothing writes nothing, like the real
        server, and returns the stored object.
        """
        kk = _kind_key(kind)
        meta = dict(obj.get("metadata") or {})
        namespace = self._namespace_of(kind, meta)
        name = meta.get("name") or ""
        old = self._objects.get(kk, {}).get((namespace, name))
        if old is None:
            raise not_found(kind, name)
        old_meta = old.obj["metadata"]
        expected = meta.get("resourceVersion")
        if expected and expected != old_meta["resourceVersion"]:
            raise conflict(kind, name)
        for field in ("uid", "creationTimestamp", "generation"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        candidate = self._assemble(kind, obj, meta)
        if candidate == old.obj:
            return old.obj
        crd_schema.check(kind, candidate)
        rev = self._rev + 1
        if _content(candidate) != _content(old.obj):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        meta["resourceVersion"] = str(rev)
        stored = Stored(candidate, rev)
        self._commit(kk, (namespace, name), MODIFIED, stored, old)
        return stored.obj

    def create_many(self, kind: KindLike, objects: Iterable[Mapping[str, Any]]) -> int:
        """Create many objects (inside :meth:`bulk`); returns how many."""
        with self.bulk():
            count = 0
            for obj in objects:
                self.create(kind, obj)
                count += 1
        return count

    @contextmanager
    def bulk(self) -> Iterator[Store]:
        """Pause Python's cyclic garbage collector while seeding a big cluster.

        Building 100k pods otherwise spends more than half its time in collections that
        find nothing: stored objects hold no reference cycles.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield self
        finally:
            if was_enabled:
                gc.enable()

    def put(self, kind: KindLike, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create, or unconditionally replace (a seeding convenience)."""
        meta = obj.get("metadata") or {}
        if self.entry(kind, meta.get("namespace") or "", meta.get("name") or "") is None:
            return self.create(kind, obj)
        return self.update(kind, {**obj, "metadata": {**meta, "resourceVersion": ""}})

    def delete(self, kind: KindLike, namespace: str, name: str, *,
               uid: str | None = None, resource_version: str | None = None) -> dict[str, Any]:
        """Remove an object, honouring DeleteOptions preconditions; returns its final state."""
        kk = _kind_key(kind)
        key = ((namespace or "") if kind.namespaced else "", name)
        old = self._objects.get(kk, {}).get(key)
        if old is None:
            raise not_found(kind, name)
        old_meta = old.obj["metadata"]
        if uid and uid != old_meta.get("uid"):
            raise conflict(kind, name, f"Precondition failed: UID in precondition: {uid}, "
                                       f"UID in object meta: {old_meta.get('uid')}")
        if resource_version and resource_version != old_meta["resourceVersion"]:
            raise conflict(kind, name,
                           f"Precondition failed: ResourceVersion in precondition: "
                           f"{resource_version}, ResourceVersion in object meta: "
                           f"{old_meta['resourceVersion']}")
        rev = self._rev + 1
        final = {**old.obj, "metadata": {**old_meta, "resourceVersion": str(rev)}}
        self._commit(kk, key, DELETED, Stored(final, rev), old)
        return final

    # -- internals ---------------------------------------------------------------------

    def _commit(self, kk: KindKey, key: Key, event_type: str, stored: Stored,
                prev: Stored | None) -> None:
        self._rev = self._kind_rev[kk] = stored.rev
        objects = self._objects.setdefault(kk, {})
        if event_type == DELETED:
            del objects[key]
            self._index_edit(kk, key, added=False)
        else:
            objects[key] = stored
            if prev is None:
                self._index_edit(kk, key, added=True)
        if len(self._history) >= self.history_size:
            self._history_floor = self._history.popleft().rev
        self._history.append(Event(stored.rev, kk, key, event_type, stored, prev))
        if self.on_change is not None:
            self.on_change()

    @staticmethod
    def _namespace_of(kind: KindLike, meta: dict[str, Any]) -> str:
        if not kind.namespaced:
            meta.pop("namespace", None)
            return ""
        namespace = meta.get("namespace") or ""
        if not namespace:
            raise ApiError(400, "BadRequest",
                           f"a {kind.kind} is namespaced: metadata.namespace is required")
        return namespace

    @staticmethod
    def _check_name(kind: KindLike, name: str) -> None:
        if name in (".", "..") or "/" in name or "%" in name or len(name) > 253:
            raise invalid(kind, name, "metadata.name",
                          f'Invalid value: "{name}": not a valid object name')

    @staticmethod
    def _generate_name(prefix: str, namespace: str, objects: dict[Key, Stored]) -> str:
        while True:
            name = prefix + "".join(secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
            if (namespace, name) not in objects:
                return name

    @staticmethod
    def _assemble(kind: KindLike, obj: Mapping[str, Any],
                  meta: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"apiVersion": _api_version(kind), "kind": kind.kind,
                               "metadata": meta}
        for field, value in obj.items():
            if field not in out:
                out[field] = value
        return out

    def _timestamp(self) -> str:
        now = int(self._now())
        if now != self._stamp_second:
            self._stamp_second = now
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        return self._stamp
