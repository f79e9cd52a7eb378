"""What a watcher has already reported for one kind, so a relist sends only differences.

After a dropped watch, a ``410 Gone`` or an etcd compaction the watcher lists again; feeding
that list through :meth:`KnownObjects.relist` yields only the objects that are new, changed
(by revision) or gone, so clients see no storm of updates when nothing changed.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..model.kinds import ResourceKind
from .events import ResourceEvent

ObjectKey = tuple[str, str]  # (namespace, name)


class StateError(ValueError):
    """Exported watch state that cannot be restored (malformed, or of other kinds)."""


class KnownObjects:
    """Revisions of the objects of one kind that were sent downstream (pure)."""

    def __init__(self, kind: ResourceKind) -> None:
        self.kind = kind
        self._revisions: dict[ObjectKey, str] = {}

    def __len__(self) -> int:
        return len(self._revisions)

    def __contains__(self, key: ObjectKey) -> bool:
        return key in self._revisions

    def export(self) -> list[list[str]]:
        """What was sent, as ``[namespace, name, revision]`` rows (for a warm start)."""
        return [[ns, name, rev] for (ns, name), rev in self._revisions.items()]

    def restore(self, rows: object) -> None:
        """Take over :meth:`export`'s rows (a sibling's): as if they had been sent here."""
        if not isinstance(rows, list):
            raise StateError(f"known objects of {self.kind}: not a list")
        revisions: dict[ObjectKey, str] = {}
        for row in rows:
            if (not isinstance(row, list) or len(row) != 3
                    or not all(isinstance(x, str) for x in row)):
                raise StateError(f"known objects of {self.kind}: bad row {row!r:.80}")
            revisions[(row[0], row[1])] = row[2]
        self._revisions = revisions

    def revision(self, namespace: str, name: str) -> str | None:
        """The revision an object was last sent at; None if it was not sent."""
        return self._revisions.get((namespace, name))

    def upsert(self, namespace: str, name: str, obj: Mapping[str, Any],
               revision: str, *, profile_stamp: str | None = None) -> ResourceEvent | None:
        """An object was listed or watched; None if it was already sent at this revision."""
        key = (namespace, name)
        if self._revisions.get(key) == revision:
            return None
        self._revisions[key] = revision
        return ResourceEvent(self.kind, namespace, name, obj, revision, profile_stamp)

    def delete(self, namespace: str, name: str, revision: str) -> ResourceEvent | None:
        """An object is gone; None if we never sent it."""
        if self._revisions.pop((namespace, name), None) is None:
            return None
        return ResourceEvent(self.kind, namespace, name, None, revision)

    def relist(self, items: Iterable[tuple[str, str, Mapping[str, Any], str]],
               revision: str) -> list[ResourceEvent]:
        """Reconcile with a complete fresh list of ``(namespace, name, obj, revision)``.

        ``revision`` goes on the deletions the list implies; Calico's watcher cache sends
        those with an empty revision, so callers pass ``""``.
        """
        return list(self.reconcile(items, revision))

    def reconcile(self, items: Iterable[tuple[str, str, Mapping[str, Any], str]],
                  revision: str) -> Iterator[ResourceEvent]:
        """:meth:`relist`, one event at a time (the deletions once ``items`` is exhausted),
        so a caller can hand each on before the next object is even looked at."""
        relisting = Relisting(self)
        yield from relisting.page(items)
        yield from relisting.finish(revision)


class Relisting:
    """One relist of a :class:`KnownObjects` fed page by page, so each page's events can go
    downstream while the next page is still being fetched: :meth:`page` for each page of
    the fresh list (in any order, each object once), then :meth:`finish` for the deletions
    the whole list implies.  A relist abandoned half-way is simply dropped: what its pages
    sent is recorded in the known objects, so the next relist sends only what differs."""

    __slots__ = ("known", "_seen")

    def __init__(self, known: KnownObjects) -> None:
        self.known = known
        self._seen: set[ObjectKey] = set()

    def page(self, items: Iterable[tuple[str, str, Mapping[str, Any], str]]
             ) -> Iterator[ResourceEvent]:
        seen, upsert = self._seen, self.known.upsert
        for namespace, name, obj, rev in items:
            seen.add((namespace, name))
            ev = upsert(namespace, name, obj, rev)
            if ev is not None:
                yield ev

    def finish(self, revision: str) -> Iterator[ResourceEvent]:
        """The deletions: every known object no page listed (``revision`` on each)."""
        known = self.known
        for key in [k for k in known._revisions if k not in self._seen]:
            ev = known.delete(key[0], key[1], revision)
            if ev is not None:
                yield ev
