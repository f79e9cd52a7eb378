"""One syncer type's pipeline: datastore → conversion → validation → snapshot cache.

The datastore side and the cache side are joined by a bounded memory channel (Typha's
"decoupler"): a burst from the datastore is drained in one go and folded into breadcrumbs of
at most ``SnapshotCacheMaxBatchSize`` updates, and a slow cache pushes back on the watcher
instead of buffering without bound.

Every event is stamped with trio's clock as the datastore side hands it over, so the age of
the oldest event not yet in the cache is known (:meth:`CacheFeed.staleness`): exported as a
metric, logged past :data:`STALE_WARNING_SECS`, carried into each breadcrumb (``origin``)
and so counted in every client's fall-behind rule.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import cast

import trio

from ..cache.feed import CacheFeed
from ..datastore.base import Connection, Datastore, DatastoreEvent, KindSynced, ResourceEvent
from ..datastore.known import StateError
from ..logs import fields
from ..model.kinds import ResourceKind
from ..model.kv import SerializedUpdate, SyncStatus
from ..model.syncers import SyncerDefinition
from ..observe.health import BEAT_INTERVAL, Heartbeat
from ..observe.metrics import Metrics
from .gcpause import GCPause, GCPauses
from .handover import SyncerState
from .tracker import SourceTracker

log = logging.getLogger(__name__)

Validator = Callable[[list[SerializedUpdate]], list[SerializedUpdate]]

#: Log a warning while the oldest datastore event not yet in the cache is older than this.
STALE_WARNING_SECS = 5.0
#: ... and repeat it at most this often while it stays so.
STALE_LOG_INTERVAL = 30.0
#: Automatic garbage collection stays paused until the cache is in sync (:mod:`.gcpause`),
#: but no longer than this after the pipeline starts.
GC_PAUSE_MAX_SECS = 60.0


class _StampedSender(trio.abc.SendChannel[DatastoreEvent]):
    """The datastore's end of the decoupler: notes when each event was handed over."""

    def __init__(self, inner: trio.MemorySendChannel[DatastoreEvent],
                 stamps: deque[float]) -> None:
        self._inner = inner
        self._stamps = stamps

    async def send(self, value: DatastoreEvent) -> None:
        stamp = trio.current_time()  # before waiting for room: waiting is staleness too
        self._stamps.append(stamp)
        try:
            await self._inner.send(value)
        except BaseException:
            self._stamps.remove(stamp)
            raise

    def send_nowait(self, value: DatastoreEvent) -> None:
        self._inner.send_nowait(value)
        self._stamps.append(trio.current_time())

    def clone(self) -> _StampedSender:
        return _StampedSender(self._inner.clone(), self._stamps)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _no_validation(updates: list[SerializedUpdate]) -> list[SerializedUpdate]:
    return updates


class SyncerPipeline:
    """Runs the list-watch of one syncer type and keeps its :class:`CacheFeed` current.

    Sync status follows libcalico-go's watcher syncer: WaitForDatastore until the datastore
    first answers, ResyncInProgress until every kind has listed once, then InSync (it never
    goes back).  Datastore problems are tracked in ``failing`` (kind → reason) so health can
    say which and why; readiness drops for access denials (RBAC 401/403) at any time, but
    an outage after InSync leaves the pipeline ready: clients keep the cache, as with Typha.
    """

    def __init__(self, definition: SyncerDefinition, datastore: Datastore, feed: CacheFeed, *,
                 validator: Validator = _no_validation, metrics: Metrics | None = None,
                 gc_pauses: GCPauses | None = None, channel_size: int = 1000,
                 drain_limit: int = 10000, resync_batch_window: float = 0.05) -> None:
        self.definition = definition
        self.syncer_type = definition.syncer_type
        self.datastore = datastore
        self.feed = feed
        self.tracker = SourceTracker(definition)
        self.validator = validator
        self.metrics = metrics
        self.channel_size = channel_size
        self.drain_limit = drain_limit
        self.resync_batch_window = resync_batch_window
        self.pending_kinds: set[ResourceKind] = set(definition.kinds)
        self.failing: dict[ResourceKind | None, str] = {}
        self.denied: set[ResourceKind | None] = set()
        self.heartbeat = Heartbeat()
        # Its hold on automatic garbage collection until in sync (none: leave it alone).
        self._gc_pause: GCPause | None = gc_pauses.pause() if gc_pauses is not None else None
        self._gc_pause_until = float("inf")
        # When each event still in the decoupler (or being sent into it) was handed over.
        self._stamps: deque[float] = deque()
        feed.pending_since = lambda: self._stamps[0] if self._stamps else None
        #: set (and replaced) each time the pipeline has applied every event handed over
        self._drained = trio.Event()
        #: where the cache's state came from: "" (the datastore) or a sibling's address
        self.restored_from = ""

    # -- a warm start (:mod:`trio_typha.warm`) ----------------------------------------------

    def export(self) -> SyncerState:
        """Everything a sibling needs to carry on from here, captured at once: the cache's
        KV set, the tracker's derived keys and the datastore watch's resume state.

        Only exact while no event is pending (handed over by the datastore but not yet
        applied: the watch state is already past it, the cache not yet): wait with
        :meth:`wait_drained` first and call this without a checkpoint in between."""
        if self._stamps:
            raise RuntimeError(f"syncer {self.syncer_type}: {len(self._stamps)} events pending")
        watch = self.datastore.export_watch(self.syncer_type)
        if watch is None:
            raise StateError(f"syncer {self.syncer_type}: the {self.datastore.name} "
                             f"datastore's watch cannot be exported")
        return SyncerState(self.syncer_type, self.feed.status, self.feed.latest.snapshot(),
                           self.tracker.export(), watch)

    async def wait_drained(self) -> None:
        """Return once no datastore event is pending (at once when none is)."""
        while self._stamps:
            await self._drained.wait()

    def restore(self, state: SyncerState, source: str) -> None:
        """Before :meth:`run`: start from a sibling's :meth:`export` (from ``source``) in
        place of a first list; :class:`StateError` (nothing changed) if it does not fit."""
        if state.syncer_type != self.syncer_type or state.status is not SyncStatus.IN_SYNC:
            raise StateError(f"state of {state.syncer_type} in {state.status.name}, wanted "
                             f"{self.syncer_type} in sync")
        tracker = SourceTracker(self.definition)
        tracker.restore(state.tracker)
        self.datastore.restore_watch(self.syncer_type, self.definition.kinds, state.watch)
        self.tracker = tracker
        self.feed.append(state.updates, SyncStatus.IN_SYNC)
        self.pending_kinds.clear()
        self.restored_from = source

    def _release_gc(self) -> None:
        if self._gc_pause is not None:
            self._gc_pause.release()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        inner, recv = trio.open_memory_channel[DatastoreEvent](self.channel_size)
        # Datastores only call send() on it; typed as the memory channel they expect.
        send = cast(trio.MemorySendChannel[DatastoreEvent],
                    _StampedSender(inner, self._stamps))
        log.info("Starting syncer pipeline", extra=fields(
            syncerType=self.syncer_type, kinds=len(self.definition.kinds),
            datastore=self.datastore.name))
        self._publish(self.tracker.static_updates())
        if self._gc_pause is not None and self.feed.status is not SyncStatus.IN_SYNC:
            self._gc_pause.hold()
            self._gc_pause_until = trio.current_time() + GC_PAUSE_MAX_SECS
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._watch_staleness)
                await nursery.start(partial(self.datastore.watch, name=self.syncer_type),
                                    self.definition.kinds, send)
                log.info("Started syncer pipeline", extra=fields(syncerType=self.syncer_type))
                task_status.started()
                async with recv:
                    await self._consume(recv)
        finally:
            self._release_gc()

    async def _consume(self, recv: trio.MemoryReceiveChannel[DatastoreEvent]) -> None:
        while True:
            # Beat at least every BEAT_INTERVAL while idle (Typha's cache loop ticks too):
            # a wedged loop stops beating and liveness says so.
            self.heartbeat.beat()
            with trio.move_on_after(BEAT_INTERVAL) as idle:
                try:
                    first = await recv.receive()
                except trio.EndOfChannel:
                    return
            if self._gc_pause is not None and self._gc_pause.held \
                    and trio.current_time() >= self._gc_pause_until:
                log.info("Syncer %s not in sync after %gs; resuming garbage collection",
                         self.syncer_type, GC_PAUSE_MAX_SECS)
                self._release_gc()
            if idle.cancelled_caught:
                continue
            batch = [first]
            if self.feed.status is not SyncStatus.IN_SYNC:
                # The initial list arrives as a stream of single events: gather them for a
                # moment so they make few, full breadcrumbs (nobody waits on latency yet),
                # until the last kind still listing says it is synced: then the cache can
                # be in sync at once, not a window later (every start's readiness).
                unsynced = set(self.pending_kinds)
                _synced(first, unsynced)
                with trio.move_on_after(self.resync_batch_window), \
                        contextlib.suppress(trio.EndOfChannel):
                    while len(batch) < self.drain_limit and unsynced:
                        ev = await recv.receive()
                        batch.append(ev)
                        _synced(ev, unsynced)
            # Then drain whatever is already queued, without waiting.
            while len(batch) < self.drain_limit:
                try:
                    batch.append(recv.receive_nowait())
                except trio.WouldBlock:
                    break
            origin = None
            for _ in range(min(len(batch), len(self._stamps))):
                stamp = self._stamps.popleft()
                origin = stamp if origin is None else min(origin, stamp)
            self.handle(batch, origin)
            if not self._stamps:
                self._drained.set()
                self._drained = trio.Event()

    async def _watch_staleness(self, *,
                               task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                               ) -> None:
        """Log while the oldest event not yet in the cache is older than the threshold."""
        task_status.started()
        logged_at = -float("inf")
        while True:
            await trio.sleep(1.0)
            now = trio.current_time()
            age = self.feed.staleness(now)
            if age > STALE_WARNING_SECS and now - logged_at >= STALE_LOG_INTERVAL:
                logged_at = now
                log.warning("Syncer %s: the oldest datastore event not yet in the cache "
                            "was received %.1fs ago (%d events pending); clients are at "
                            "least that stale", self.syncer_type, age, len(self._stamps))
            elif age <= STALE_WARNING_SECS and logged_at > -float("inf"):
                logged_at = -float("inf")
                log.info("Syncer %s: the cache caught up with the datastore",
                         self.syncer_type)

    def handle(self, events: list[DatastoreEvent], origin: float | None = None) -> None:
        """Apply one batch of datastore events (synchronous: the pipeline's pure step).

        ``origin``: when the oldest of them was received from the datastore.
        """
        updates: list[SerializedUpdate] = []
        became_synced = False
        for ev in events:
            if isinstance(ev, ResourceEvent):
                updates.extend(self.tracker.apply(ev))
            elif isinstance(ev, KindSynced):
                if ev.kind in self.pending_kinds:
                    self.pending_kinds.discard(ev.kind)
                    became_synced = not self.pending_kinds
            elif isinstance(ev, Connection):
                self._connection(ev)
        if self.feed.status is SyncStatus.WAIT_FOR_DATASTORE:
            self.feed.set_status(SyncStatus.RESYNC_IN_PROGRESS)
        self._publish(updates, origin)
        if became_synced and self.feed.status is not SyncStatus.IN_SYNC:
            log.info("Received status update message from datastore.", extra=fields(
                syncerType=self.syncer_type, status="in-sync", keys=len(self.feed.cache)))
            self.feed.set_status(SyncStatus.IN_SYNC)
            self._release_gc()

    def _connection(self, ev: Connection) -> None:
        if ev.ok:
            self.denied.discard(ev.kind)
            if self.failing.pop(ev.kind, None) is not None:
                log.info("Datastore recovered", extra=fields(
                    syncerType=self.syncer_type, kind=ev.kind or "all"))
        elif self.failing.get(ev.kind) != ev.reason:
            self.failing[ev.kind] = ev.reason
            if ev.denied:
                self.denied.add(ev.kind)
            else:
                self.denied.discard(ev.kind)
            log.warning("Datastore problem: %s", ev.reason, extra=fields(
                syncerType=self.syncer_type, kind=ev.kind or "all"))

    def _publish(self, updates: list[SerializedUpdate], origin: float | None = None) -> None:
        if not updates:
            return
        valid = self.validator(updates)
        before = self.feed.cache.dropped_noops
        crumbs = self.feed.apply(valid, origin)
        m = self.metrics
        if m is not None:
            m.updates_total.labels(syncer=self.syncer_type).inc(len(valid))
            m.updates_skipped.labels(syncer=self.syncer_type).inc(
                self.feed.cache.dropped_noops - before)
            m.cache_size.labels(syncer=self.syncer_type).set(len(self.feed.cache))
            m.breadcrumb_seq_number.labels(syncer=self.syncer_type).set(self.feed.latest.seq)
            for crumb in crumbs:
                m.breadcrumb_size.labels(syncer=self.syncer_type).observe(len(crumb.updates))

    @property
    def pending_events(self) -> int:
        """Datastore events handed over but not in the cache yet."""
        return len(self._stamps)

    @property
    def ready(self) -> bool:
        return self.feed.status is SyncStatus.IN_SYNC and not self.denied


def _synced(ev: DatastoreEvent, unsynced: set[ResourceKind]) -> None:
    """Strike ``ev``'s kind off ``unsynced`` when it is the kind's :class:`KindSynced`."""
    if isinstance(ev, KindSynced):
        unsynced.discard(ev.kind)
