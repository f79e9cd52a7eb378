"""SyncerPipeline gathers the initial list into few breadcrumbs, but not past the last
KindSynced: the cache is in sync as soon as the list is in (trio time, autojump_clock)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from trio_typha.cache.feed import CacheFeed
from trio_typha.datastore.base import DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.memory import MemoryDatastore, MemoryStore
from trio_typha.model.kv import SyncStatus
from trio_typha.model.syncers import DatastoreMode, syncer_definition
from trio_typha.syncer.pipeline import SyncerPipeline

WINDOW = 5.0  # long, so a wait for it shows in trio time


def _pipeline() -> SyncerPipeline:
    definition = syncer_definition("node-status", mode=DatastoreMode.ETCD)
    return SyncerPipeline(definition, MemoryDatastore(MemoryStore()),
                          CacheFeed("node-status"), resync_batch_window=WINDOW)


def _status(kind: Any, name: str) -> ResourceEvent:
    obj = {"apiVersion": "projectcalico.org/v3", "kind": "CalicoNodeStatus",
           "metadata": {"name": name}, "spec": {"node": name}}
    return ResourceEvent(kind, "", name, obj, "1")


async def test_the_last_kind_synced_ends_the_gathering(autojump_clock: Any) -> None:
    pipeline = _pipeline()
    (kind,) = pipeline.definition.kinds
    send, recv = trio.open_memory_channel[DatastoreEvent](10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipeline._consume, recv)
        start = trio.current_time()
        for name in ("a", "b"):
            send.send_nowait(_status(kind, name))
        send.send_nowait(KindSynced(kind))
        await pipeline.feed.wait_in_sync()
        assert trio.current_time() == start  # no window waited out
        assert pipeline.feed.status is SyncStatus.IN_SYNC
        assert len(pipeline.feed.cache) == 2
        nursery.cancel_scope.cancel()


async def test_before_the_last_kind_synced_events_are_gathered_for_the_window(
        autojump_clock: Any) -> None:
    pipeline = _pipeline()
    (kind,) = pipeline.definition.kinds
    send, recv = trio.open_memory_channel[DatastoreEvent](10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipeline._consume, recv)
        seq = pipeline.feed.latest.seq
        send.send_nowait(_status(kind, "a"))
        await trio.sleep(WINDOW / 2)
        send.send_nowait(_status(kind, "b"))  # the window is still open: the same batch
        await trio.testing.wait_all_tasks_blocked()
        assert pipeline.feed.latest.seq == seq  # still gathering
        await trio.sleep(WINDOW)
        assert [u.key for u in pipeline.feed.latest.updates] == [
            "/calico/resources/v3/projectcalico.org/caliconodestatuses/a",
            "/calico/resources/v3/projectcalico.org/caliconodestatuses/b"]
        assert pipeline.feed.status is not SyncStatus.IN_SYNC
        nursery.cancel_scope.cancel()
