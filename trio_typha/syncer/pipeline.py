"""One syncer type's pipeline: datastore → conversion → validation → snapshot cache.

The datastore side and the cache side are joined by a bounded memory channel (Typha's
"decoupler"): a burst from the datastore is drained in one go and folded into breadcrumbs of
at most ``SnapshotCacheMaxBatchSize`` updates, and a slow cache pushes back on the watcher
instead of buffering without bound.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import trio

from ..cache import CacheFeed
from ..datastore.base import Connection, Datastore, DatastoreEvent, KindSynced, ResourceEvent
from ..model.kinds import ResourceKind
from ..model.kv import SerializedUpdate, SyncStatus
from ..model.syncers import SyncerDefinition
from ..observe.metrics import Metrics
from .tracker import SourceTracker

log = logging.getLogger(__name__)

Validator = Callable[[list[SerializedUpdate]], list[SerializedUpdate]]


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
                 channel_size: int = 1000, drain_limit: int = 10000,
                 resync_batch_window: float = 0.05) -> None:
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

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        send, recv = trio.open_memory_channel[DatastoreEvent](self.channel_size)
        log.info("Starting syncer pipeline syncerType=%s kinds=%d datastore=%s",
                 self.syncer_type, len(self.definition.kinds), self.datastore.name)
        self._publish(self.tracker.static_updates())
        async with trio.open_nursery() as nursery:
            await nursery.start(self.datastore.watch, self.definition.kinds, send)
            log.info("Started syncer pipeline syncerType=%s", self.syncer_type)
            task_status.started()
            async with recv:
                await self._consume(recv)

    async def _consume(self, recv: trio.MemoryReceiveChannel[DatastoreEvent]) -> None:
        async for first in recv:
            batch = [first]
            if self.feed.status is not SyncStatus.IN_SYNC:
                # The initial list arrives as a stream of single events: gather them for a
                # moment so they make few, full breadcrumbs (nobody waits on latency yet).
                with trio.move_on_after(self.resync_batch_window), \
                        contextlib.suppress(trio.EndOfChannel):
                    while len(batch) < self.drain_limit:
                        batch.append(await recv.receive())
            # Then drain whatever is already queued, without waiting.
            while len(batch) < self.drain_limit:
                try:
                    batch.append(recv.receive_nowait())
                except trio.WouldBlock:
                    break
            self.handle(batch)

    def handle(self, events: list[DatastoreEvent]) -> None:
        """Apply one batch of datastore events (synchronous: the pipeline's pure step)."""
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
        self._publish(updates)
        if became_synced and self.feed.status is not SyncStatus.IN_SYNC:
            log.info("Received status update message from datastore. syncerType=%s "
                     "status=in-sync keys=%d", self.syncer_type, len(self.feed.cache))
            self.feed.set_status(SyncStatus.IN_SYNC)

    def _connection(self, ev: Connection) -> None:
        if ev.ok:
            self.denied.discard(ev.kind)
            if self.failing.pop(ev.kind, None) is not None:
                log.info("Datastore recovered syncerType=%s kind=%s", self.syncer_type,
                         ev.kind or "all")
        elif self.failing.get(ev.kind) != ev.reason:
            self.failing[ev.kind] = ev.reason
            if ev.denied:
                self.denied.add(ev.kind)
            else:
                self.denied.discard(ev.kind)
            log.warning("Datastore problem syncerType=%s kind=%s: %s", self.syncer_type,
                        ev.kind or "all", ev.reason)

    def _publish(self, updates: list[SerializedUpdate]) -> None:
        if not updates:
            return
        valid = self.validator(updates)
        before = self.feed.cache.dropped_noops
        crumbs = self.feed.apply(valid)
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
    def ready(self) -> bool:
        return self.feed.status is SyncStatus.IN_SYNC and not self.denied
