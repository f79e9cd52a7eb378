"""What one watch stream sends next, computed from the store's history (pure).

A :class:`WatchCursor` holds a watch's filter and position.  The trio shell asks it for the
initial lines, then polls it whenever the store changes and asks for a bookmark on its
timer; all encoding of objects goes through the store's per-version memo, so an event sent
to a hundred watchers is encoded once.
"""

from __future__ import annotations

from .resources import ServedKind
from .status import ApiError
from .store import ADDED, DELETED, MODIFIED, Event, Predicate, Store, encode_json

BOOKMARK = "BOOKMARK"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def error_line(error: ApiError) -> bytes:
    """The ERROR event a real server sends in-stream (e.g. 410 for a too-old revision)."""
    return encode_json({"type": "ERROR", "object": error.status()}) + b"\n"


class WatchCursor:
    """Position and filter of one watch on one kind.

    ``start`` None means "no resourceVersion": begin with synthetic ADDED events for the
    current state.  ``initial_events`` forces those events even with a start revision
    (``sendInitialEvents=true``); they are then closed by a bookmark carrying the
    ``k8s.io/initial-events-end`` annotation, as the streaming-list protocol expects.
    """

    def __init__(self, store: Store, kind: ServedKind, *, namespace: str | None = None,
                 match: Predicate | None = None, start: int | None = None,
                 initial_events: bool = False) -> None:
        self.store = store
        self.kind = kind
        self.namespace = namespace
        self.match = match
        self.start = start
        self.initial_events = initial_events
        self.position = store.revision if start is None else start
        #: the revision the watch starts from: periodic bookmarks go out only past it
        self.floor = self.position
        self._kk = kind.key

    def initial_lines(self) -> list[bytes]:
        """Lines to send before any change (raises ApiError 410 if ``start`` is forgotten)."""
        if self.start is None or self.initial_events:
            page = self.store.list(self.kind, self.namespace, match=self.match)
            self.position = self.floor = page.revision
            lines = [s.event_line(ADDED) for s in page.items]
            if self.initial_events:
                lines.append(self.bookmark_line(initial_events_end=True))
            return lines
        self.store.events_after(self.start)  # validates the start revision
        return []

    def poll(self) -> list[bytes]:
        """Lines for every matching event since the last poll (ApiError 410 if forgotten)."""
        lines = []
        for event in self.store.events_after(self.position, resuming=True):
            line = self._line(event)
            if line is not None:
                lines.append(line)
        self.position = self.store.revision
        return lines

    def periodic_bookmark(self) -> bytes | None:
        """The bookmark kube-apiserver's timer sends this watch now, if any.

        It carries the revision the kind's watch cache has processed
        (:meth:`~.store.Store.kind_revision`), which writes of other kinds do not move,
        and goes out only once that is past the revision the watch started from
        (``storage/cacher/cache_watcher.go``: ``event.ResourceVersion > resourceVersion``).
        """
        revision = self.store.kind_revision(self.kind)
        return self.bookmark_line(revision) if revision > self.floor else None

    def bookmark_line(self, revision: int | None = None, *,
                      initial_events_end: bool = False) -> bytes:
        """A BOOKMARK at ``revision`` (default: the position reached)."""
        at = self.position if revision is None else revision
        metadata: dict[str, object] = {"resourceVersion": str(at)}
        if initial_events_end:
            metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
        return encode_json({"type": BOOKMARK,
                            "object": {"kind": self.kind.kind,
                                       "apiVersion": self.kind.api_version,
                                       "metadata": metadata}}) + b"\n"

    def _line(self, event: Event) -> bytes | None:
        if event.kind != self._kk:
            return None
        if self.namespace is not None and event.key[0] != self.namespace:
            return None
        match = self.match
        if match is None:
            return event.obj.event_line(event.type)
        # With a selector, an object moving into or out of it is added or deleted.
        if event.type == ADDED:
            return event.obj.event_line(ADDED) if match(event.obj.obj) else None
        if event.type == DELETED:
            return event.obj.event_line(DELETED) if match(event.obj.obj) else None
        now = match(event.obj.obj)
        before = event.prev is not None and match(event.prev.obj)
        if now:
            return event.obj.event_line(MODIFIED if before else ADDED)
        return event.obj.event_line(DELETED) if before else None
