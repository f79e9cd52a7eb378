"""What one kind's list-watch loop knows, and the events each list or watch event implies.

Pure state (the trio loop in ``k8s_watch`` does the I/O): the objects already sent downstream
(through :class:`~trio_typha.datastore.known.KnownObjects`, so a relist sends only
differences), the resourceVersion to resume a watch from, and whether the kind has synced.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from ..model.kinds import ResourceKind
from .events import DatastoreEvent, KindSynced, ResourceEvent
from .k8s_errors import MalformedResponse, StatusInfo
from .k8s_profile_watch import ProfileStamps, is_profile_source
from .k8s_stream import WatchEvent
from .known import KnownObjects, StateError

_Obj = TypeVar("_Obj", bound=Mapping[str, Any])


class WatchErrorEvent(Exception):
    """The watch stream carried an ``ERROR`` event (a ``metav1.Status``)."""

    def __init__(self, status: StatusInfo) -> None:
        super().__init__(f"watch error {status.code} {status.reason}: {status.message}")
        self.status = status


class KindReflector:
    """List-watch state of one resource kind (pure)."""

    def __init__(self, kind: ResourceKind, *, profile: ProfileStamps | None = None) -> None:
        self.kind = kind
        self.known = KnownObjects(kind)
        self.resume_rv: str | None = None  # None: list before watching
        #: Calico's profile watcher state, shared by the Namespace and ServiceAccount
        #: reflectors of one watch (None: this kind's watch events carry no stamp)
        self.profile = profile if profile is not None and is_profile_source(kind) else None
        self._fresh_list_rv = "" if is_profile_source(kind) else "0"
        #: the resourceVersion a (re)list asks for, NotOlderThan: "0" (anything) at first
        #: and after a 410, otherwise the last one seen, as Calico's watcher cache does;
        #: "" (a consistent read) instead of "0" for Calico's profile sources
        self.list_rv = self._fresh_list_rv
        self.synced = False

    def export(self) -> dict[str, Any]:
        """Where this kind's list-watch stands, as data (a warm start's, see
        :mod:`trio_typha.warm`): what was sent, where to resume, whether it synced.  The
        profile stamps are not in it: every watch starts them afresh."""
        return {"resume_rv": self.resume_rv, "list_rv": self.list_rv, "synced": self.synced,
                "known": self.known.export()}

    def restore(self, state: object) -> None:
        """Take over a sibling's :meth:`export` of the same kind: the next step is then a
        watch from its resume point (a list only where it had none)."""
        if not isinstance(state, dict):
            raise StateError(f"watch state of {self.kind}: not an object")
        resume, list_rv, synced = (state.get("resume_rv"), state.get("list_rv"),
                                   state.get("synced"))
        if (not isinstance(resume, str | None) or not isinstance(list_rv, str)
                or not isinstance(synced, bool)):
            raise StateError(f"watch state of {self.kind}: bad resume_rv, list_rv or synced")
        self.known.restore(state.get("known"))
        self.resume_rv = resume or None
        self.list_rv = list_rv
        self.synced = synced

    def listed(self, items: Iterable[Mapping[str, Any]], list_rv: str) -> list[DatastoreEvent]:
        """A complete list arrived: the differences from what was sent, then KindSynced once."""
        return list(self.take_listed(list(items), list_rv))

    def stream_listed(self, items: Iterable[Mapping[str, Any]], list_rv: str
                      ) -> Iterator[DatastoreEvent]:
        """:meth:`listed` for objects that arrive one at a time (decoded as they are
        reached): each is checked as it comes, so a bad one ends the iteration with
        :class:`MalformedResponse` after the events before it; the caller then lists again
        (which sends only the differences from what was sent) and ``KindSynced`` comes only
        after a complete list."""
        self.resume_rv = list_rv or None

        def rows() -> Iterator[tuple[str, str, Mapping[str, Any], str]]:
            for obj in items:
                ns, name, rev = self._identify(obj)
                yield ns, name, self.complete(obj), rev

        def events() -> Iterator[DatastoreEvent]:
            yield from self.known.reconcile(rows(), "")
            yield from self._mark_synced()

        return events()

    def take_listed(self, items: list[_Obj], list_rv: str
                    ) -> Iterator[DatastoreEvent]:
        """:meth:`listed`, one event at a time, emptying ``items`` as it goes: each object
        is referenced only by its event once it is reached, so a 100k-pod list is freed
        while it is converted rather than after.  Every object is checked first
        (:class:`MalformedResponse` before any event, as from :meth:`listed`)."""
        ids = [self._identify(obj) for obj in items]
        self.resume_rv = list_rv or None
        items.reverse()
        ids.reverse()

        def rows() -> Iterator[tuple[str, str, Mapping[str, Any], str]]:
            while items:
                ns, name, rev = ids.pop()
                yield ns, name, self.complete(items.pop()), rev

        def events() -> Iterator[DatastoreEvent]:
            yield from self.known.reconcile(rows(), "")
            yield from self._mark_synced()

        return events()

    def absent(self) -> list[DatastoreEvent]:
        """The kind is not served (its CRD is not installed): it is synced.  What was
        sent stays (Calico's watcher cache keeps it too); the list that finds the kind
        served again sends the differences."""
        self.resume_rv = None
        return self._mark_synced()

    def expire(self, *, gone: bool = True) -> None:
        """The next step is a full list: the resume point is gone (410, ``gone``), or the
        watch keeps failing there (the list then asks for no older state than it)."""
        self.list_rv = (self._fresh_list_rv if gone or self.resume_rv is None
                        else self.resume_rv)
        self.resume_rv = None

    def relist(self) -> None:
        """The next step is a consistent list (its differences from what was sent are what
        the watch failed to deliver), and the watch resumes from the list's revision."""
        self.list_rv = ""
        self.resume_rv = None

    def watch_started(self) -> None:
        """A watch stream of this kind was accepted: for a profile source, Calico's profile
        watcher starts afresh (either of its streams ending restarts both)."""
        if self.profile is not None:
            self.profile.restart()

    def watched(self, event: WatchEvent) -> list[DatastoreEvent]:
        """Apply one watch event; raises :class:`WatchErrorEvent` for ``ERROR``."""
        if event.type == "ERROR":
            raise WatchErrorEvent(StatusInfo.from_object(event.object))
        if event.type == "BOOKMARK":
            if self.profile is not None:
                self.profile.bookmark(self.kind, event.resource_version)
            # Nothing changed for us up to this revision: resume from here.
            if event.resource_version:
                self.resume_rv = event.resource_version
            return []
        ns, name, rev = self._identify(event.object)
        # Calico's profile watcher stamps every event, even one its cache then drops.
        stamp = None if self.profile is None else self.profile.stamp(self.kind)
        if event.type == "DELETED":
            ev: ResourceEvent | None = self.known.delete(ns, name, rev)
        else:
            ev = self.known.upsert(ns, name, self.complete(event.object), rev,
                                   profile_stamp=stamp)
        self.resume_rv = rev
        return [] if ev is None else [ev]

    def complete(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """``obj`` with this kind's ``apiVersion`` and ``kind`` (list items omit them)."""
        if obj.get("apiVersion") == self.kind.api_version and obj.get("kind") == self.kind.kind:
            return obj
        return {"apiVersion": self.kind.api_version, "kind": self.kind.kind,
                **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}}

    def _identify(self, obj: Mapping[str, Any]) -> tuple[str, str, str]:
        if not isinstance(obj, Mapping):
            raise MalformedResponse(f"list of {self.kind}: an item is not an object")
        md = obj.get("metadata")
        name = md.get("name") if isinstance(md, dict) else None
        rev = md.get("resourceVersion") if isinstance(md, dict) else None
        if (not isinstance(md, dict) or not isinstance(name, str) or not name
                or not isinstance(rev, str) or not rev):
            raise MalformedResponse(f"{self.kind} object without metadata.name/resourceVersion")
        ns = md.get("namespace") or ""
        if not isinstance(ns, str):
            raise MalformedResponse(f"{self.kind} {name}: metadata.namespace is not a string")
        return ns, name, rev

    def _mark_synced(self) -> list[DatastoreEvent]:
        if self.synced:
            return []
        self.synced = True
        return [KindSynced(self.kind)]
