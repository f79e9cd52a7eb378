"""Pure core of the snapshot cache (no I/O, no event loop).

The cache keeps the current key/value map of one syncer type and publishes every change
as a *breadcrumb*: a sequence number, a timestamp, the batch of updates since the previous
breadcrumb and the sync status after it.  Breadcrumbs form a singly linked list that points
forwards only: the cache holds the newest one, each client holds the one it has reached,
so a breadcrumb that no client needs any more is simply garbage.

A client starts from a breadcrumb *with a snapshot* (the full, sorted KV set as of that
breadcrumb) and then follows ``next``.  Snapshots are materialized on demand, once per
breadcrumb, and so are the protocol encodings hung off a breadcrumb (``memo``): that is what
lets every client that connects at the same point share the same bytes.

For clients that come back with a copy of their own the cache also keeps a bounded
*history* (the newest breadcrumbs, by update count and age: a client whose position is in
it resumes from there) and a hash tree over its content (:mod:`.digest`: a client whose
copy differs in a few keys is repaired with those keys only).  Both are updated once per
published breadcrumb, never per client.
"""

from __future__ import annotations

__sans_io__ = True

import bisect
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..model.kv import SerializedUpdate, SyncStatus
from .digest import KeyTree

T = TypeVar("T")


#: Encodings built through :meth:`Breadcrumb.memo`, by memo key: what "encode once" costs
#: (a ServerWorkers worker builds none of the per-breadcrumb encodings the primary ships;
#: ``/metrics`` shows them).  The daemon owns one for all its caches.
MemoBuilds = Counter[Any]


class SnapshotUnavailable(RuntimeError):
    """Raised when a snapshot is asked of a breadcrumb that is no longer the newest."""


class Breadcrumb:
    """One published step of the cache; immutable once published except for ``next``."""

    __slots__ = ("seq", "timestamp", "origin", "updates", "status", "next", "_kvs", "_snapshot",
                 "_memo", "_builds", "__weakref__")

    def __init__(self, seq: int, timestamp: float, updates: tuple[SerializedUpdate, ...],
                 status: SyncStatus, kvs: dict[str, SerializedUpdate] | None,
                 origin: float | None = None, *, builds: MemoBuilds) -> None:
        self.seq = seq
        self.timestamp = timestamp
        #: When the oldest datastore event behind these updates was received (<= timestamp):
        #: how stale a client is that has not got this breadcrumb yet.
        self.origin = timestamp if origin is None else min(origin, timestamp)
        self.updates = updates
        self.status = status
        self.next: Breadcrumb | None = None
        # Live reference to the cache's map while this is the newest breadcrumb; dropped when
        # the next one is published unless a snapshot was taken in time.
        self._kvs = kvs
        self._snapshot: tuple[SerializedUpdate, ...] | None = None
        self._memo: dict[Any, Any] = {}
        self._builds = builds

    def __repr__(self) -> str:
        return (f"<Breadcrumb seq={self.seq} updates={len(self.updates)} "
                f"status={self.status.name}>")

    def snapshot(self) -> tuple[SerializedUpdate, ...]:
        """The full KV set as of this breadcrumb, sorted by key, every entry New."""
        if self._snapshot is None:
            if self._kvs is None:
                raise SnapshotUnavailable(f"breadcrumb {self.seq} is no longer the newest")
            self._snapshot = tuple(self._kvs[k] for k in sorted(self._kvs))
        return self._snapshot

    def memo(self, key: Any, build: Callable[[Breadcrumb], T]) -> T:
        """Build ``key``'s encoding of this breadcrumb once; later callers share the result."""
        try:
            value: T = self._memo[key]
            return value
        except KeyError:
            value = self._memo[key] = build(self)
            self._builds[key] += 1
            return value


class SnapshotCache:
    """Current KV map of one syncer type plus the newest breadcrumb.

    ``apply`` takes the updates that came out of validation, drops no-op updates (same value,
    only the revision changed) and publishes what is left in breadcrumbs of at most
    ``max_batch_size`` updates.  Time is passed in (the trio shell reads trio's clock).
    """

    def __init__(self, *, max_batch_size: int = 100, now: float = 0.0,
                 memo_builds: MemoBuilds | None = None, history_updates: int = 0,
                 history_age: float = 0.0, epoch: int | None = None) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        #: Names this cache's breadcrumb numbering: a position is only valid with it.
        self.epoch = epoch if epoch is not None else random.SystemRandom().getrandbits(63) | 1
        self.tree = KeyTree()
        self.history_updates = history_updates
        self.history_age = history_age
        # The newest breadcrumbs, oldest first, holding at most history_updates updates
        # (the newest is always there); history_held counts them.
        self._history: deque[Breadcrumb] = deque()
        self.history_held = 0
        self.history_bytes = 0
        self.positions_valid = True
        self.max_batch_size = max_batch_size
        #: Counts the encodings built of this cache's breadcrumbs (shared when given).
        self.memo_builds: MemoBuilds = Counter() if memo_builds is None else memo_builds
        self._kvs: dict[str, SerializedUpdate] = {}
        self.status = SyncStatus.WAIT_FOR_DATASTORE
        self.latest = Breadcrumb(0, now, (), self.status, self._kvs, builds=self.memo_builds)
        self._history.append(self.latest)
        # Newest breadcrumb that has a materialized snapshot; lets a storm of connecting
        # clients share one snapshot instead of materializing one per breadcrumb.
        self._last_snapshot: Breadcrumb | None = None
        self._snapshot_max_age = 0.0
        self.dropped_noops = 0

    def __len__(self) -> int:
        return len(self._kvs)

    def get(self, key: str) -> SerializedUpdate | None:
        return self._kvs.get(key)

    def count_prefix(self, prefix: str) -> int:
        """How many current keys start with ``prefix`` (e.g. Node resources, for the
        connection limit)."""
        return sum(1 for k in self._kvs if k.startswith(prefix))

    def values_by_key(self) -> dict[str, bytes | None]:
        """A copy of the current key -> value map (for checks and introspection)."""
        return {k: u.value for k, u in self._kvs.items()}

    def apply(self, updates: Iterable[SerializedUpdate], now: float,
              origin: float | None = None) -> list[Breadcrumb]:
        """Apply a batch of updates; return the breadcrumbs published (possibly none).

        ``origin`` is when the oldest datastore event behind them was received.
        """
        kept: list[SerializedUpdate] = []
        kvs = self._kvs
        tree = self.tree
        for upd in updates:
            old = kvs.get(upd.key)
            if upd.deleted:
                # Deletions pass even for keys we never had: the client may have them.
                if old is not None:
                    del kvs[upd.key]
                    tree.put(upd.key, None, "")
                kept.append(upd)
            elif old is not None and old.value == upd.value:
                self.dropped_noops += 1
            else:
                kvs[upd.key] = upd.as_new()
                tree.put(upd.key, upd.value, upd.revision)
                kept.append(upd)
        published = []
        for i in range(0, len(kept), self.max_batch_size):
            published.append(self._publish(tuple(kept[i:i + self.max_batch_size]), now,
                                           origin))
        return published

    def append(self, updates: tuple[SerializedUpdate, ...], status: SyncStatus, now: float,
               origin: float | None = None, memo: dict[Any, Any] | None = None,
               seq: int | None = None) -> Breadcrumb:
        """Publish exactly one breadcrumb as given: ``updates`` (not re-batched, no no-op
        dropped), then ``status``; ``memo`` pre-fills its encodings; ``seq`` (greater
        than the newest's) numbers it.

        A ServerWorkers worker mirrors the primary's breadcrumbs with it, so the
        encodings the primary made of a breadcrumb (which carry its number) fit the
        worker's copy byte for byte.
        """
        kvs = self._kvs
        tree = self.tree
        for upd in updates:
            if upd.deleted:
                kvs.pop(upd.key, None)
            else:
                kvs[upd.key] = upd.as_new()
            tree.put(upd.key, upd.value, upd.revision)
        self.status = status
        crumb = self._publish(updates, now, origin, seq)
        if memo:
            crumb._memo.update(memo)
        return crumb

    def set_status(self, status: SyncStatus, now: float) -> Breadcrumb | None:
        """Record a sync-status change as a breadcrumb of its own (none if unchanged)."""
        if status == self.status:
            return None
        self.status = status
        return self._publish((), now)

    def snapshot_point(self, now: float, max_age: float = 0.0) -> Breadcrumb:
        """The breadcrumb a new client should start from, with its snapshot materialized.

        Reuses the newest already-materialized snapshot if it is at most ``max_age`` old,
        otherwise materializes one at the newest breadcrumb.
        """
        self._snapshot_max_age = max_age
        last = self._last_snapshot
        if last is not None and (last is self.latest or now - last.timestamp <= max_age):
            return last
        self.latest.snapshot()
        self._last_snapshot = self.latest
        return self.latest

    def _publish(self, updates: tuple[SerializedUpdate, ...], now: float,
                 origin: float | None = None, seq: int | None = None) -> Breadcrumb:
        last = self._last_snapshot
        if last is not None and now - last.timestamp > self._snapshot_max_age:
            # Too old to reuse: let it (and the chain after it) go once clients are done.
            self._last_snapshot = None
        prev = self.latest
        if seq is None or seq <= prev.seq:
            # A mirror whose numbering cannot follow the primary's any more: the numbers in
            # its encodings are not its own, so no position can be trusted here.
            self.positions_valid = self.positions_valid and seq is None
            seq = prev.seq + 1
        crumb = Breadcrumb(seq, now, updates, self.status, self._kvs, origin,
                           builds=self.memo_builds)
        prev._kvs = None
        prev.next = crumb
        self.latest = crumb
        self._remember(crumb, now)
        return crumb

    # ---- resume by position

    def _remember(self, crumb: Breadcrumb, now: float) -> None:
        history = self._history
        history.append(crumb)
        self.history_held += len(crumb.updates)
        self.history_bytes += _size(crumb.updates)
        while len(history) > 1 and (self.history_held > self.history_updates
                                    or now - history[1].timestamp > self.history_age):
            old = history.popleft()
            self.history_held -= len(old.updates)
            self.history_bytes -= _size(old.updates)

    def position(self, epoch: int, seq: int) -> Breadcrumb | None:
        """The breadcrumb numbered ``seq`` if this cache (``epoch``) still holds it: a client
        that got everything up to it continues from its ``next``."""
        history = self._history
        if epoch != self.epoch or not self.positions_valid:
            return None
        # Numbers run on by one, except where a mirror jumped to the primary's (append).
        index = bisect.bisect_left(history, seq, key=_seq_of)
        if index < len(history) and history[index].seq == seq:
            return history[index]
        return None

    @property
    def history_first_seq(self) -> int:
        return self._history[0].seq


def _seq_of(crumb: Breadcrumb) -> int:
    return crumb.seq


def _size(updates: tuple[SerializedUpdate, ...]) -> int:
    return sum(len(u.key) + len(u.value or b"") for u in updates)
