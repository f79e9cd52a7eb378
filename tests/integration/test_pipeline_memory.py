"""Memory datastore + syncer pipeline + cache feed, in one trio run (no sockets)."""

from __future__ import annotations

import trio

from testbed.cluster import k8s_namespace
from trio_typha.cache.feed import CacheFeed
from trio_typha.datastore.memory import MemoryDatastore, MemoryStore
from trio_typha.model import kinds as K
from trio_typha.model.kv import SyncStatus, UpdateType
from trio_typha.model.syncers import ConvertedKV, SyncerDefinition
from trio_typha.syncer.pipeline import SyncerPipeline


def convert(kind, obj, *, key=None):
    md = obj["metadata"]
    return [ConvertedKV(f"/{kind.plural}/{md.get('namespace', '')}/{md['name']}",
                        str(obj.get("spec")).encode())]


def ns(name, spec=None):
    return {**k8s_namespace(name), "spec": spec}


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_pipeline_lists_syncs_and_follows_changes() -> None:
    store = MemoryStore()
    store.put(ns("a"))
    store.put(ns("b"))
    feed = CacheFeed("felix")
    definition = SyncerDefinition("felix", (K.NAMESPACE, K.NODE), convert)
    pipeline = SyncerPipeline(definition, MemoryDatastore(store), feed)
    async with trio.open_nursery() as nursery:
        await nursery.start(pipeline.run)
        with trio.fail_after(5):
            await feed.wait_in_sync()
        assert {u.key for u in feed.snapshot_point().snapshot()} == {"/namespaces//a",
                                                                     "/namespaces//b"}
        crumb = feed.latest
        store.put(ns("a", {"x": 1}))
        store.delete(K.NAMESPACE, "", "b")
        store.put(ns("c"))
        seen = []
        with trio.fail_after(5):
            while len(seen) < 3:
                crumb = await feed.wait_next(crumb)
                seen.extend((u.key, u.update_type) for u in crumb.updates)
        assert seen == [("/namespaces//a", UpdateType.UPDATED),
                        ("/namespaces//b", UpdateType.DELETED),
                        ("/namespaces//c", UpdateType.NEW)]
        # Rewriting an object with identical content is a no-op for clients.
        before = feed.latest
        store.put(ns("c"))
        await settle()
        assert feed.latest is before
        nursery.cancel_scope.cancel()


async def test_status_progression() -> None:
    store = MemoryStore()
    feed = CacheFeed("bgp")
    statuses = []
    definition = SyncerDefinition("bgp", (K.NODE,), convert)
    pipeline = SyncerPipeline(definition, MemoryDatastore(store), feed)
    start = feed.latest
    async with trio.open_nursery() as nursery:
        await nursery.start(pipeline.run)
        with trio.fail_after(5):
            await feed.wait_in_sync()
        crumb = start
        while crumb.next is not None:
            crumb = crumb.next
            statuses.append(crumb.status)
        nursery.cancel_scope.cancel()
    assert statuses == [SyncStatus.RESYNC_IN_PROGRESS, SyncStatus.IN_SYNC]


async def test_watcher_behind_the_log_relists_only_differences() -> None:
    store = MemoryStore(history=3)
    for i in range(5):
        store.put(ns(f"n{i}"))
    feed = CacheFeed("felix")
    definition = SyncerDefinition("felix", (K.NAMESPACE,), convert)
    send, recv = trio.open_memory_channel(0)  # unbuffered: the watcher blocks on each send
    events = []
    async with trio.open_nursery() as nursery:
        await nursery.start(MemoryDatastore(store).watch, definition.kinds, send)
        with trio.fail_after(5):
            while len(events) < 6:  # 5 objects + KindSynced
                events.append(await recv.receive())
        # While the watcher is idle, make more changes than the log holds.
        store.put(ns("n0", {"changed": True}))
        for i in range(1, 5):
            store.put(ns(f"new{i}"))
        store.delete(K.NAMESPACE, "", "n4")
        await settle()
        more = []
        with trio.fail_after(5):
            while len(more) < 6:
                more.append(await recv.receive())
        nursery.cancel_scope.cancel()
    names = sorted((e.name, e.deleted) for e in more)
    assert names == [("n0", False), ("n4", True), ("new1", False), ("new2", False),
                     ("new3", False), ("new4", False)]
    assert feed.status is SyncStatus.WAIT_FOR_DATASTORE


class Flaky:
    """A datastore that syncs, then reports an outage and an access denial (for readiness)."""

    name = "flaky"

    def __init__(self) -> None:
        self.send = None

    async def watch(self, kinds, send, *, name="", task_status=trio.TASK_STATUS_IGNORED) -> None:
        from trio_typha.datastore.base import KindSynced
        self.send = send
        task_status.started()
        for kind in kinds:
            await send.send(KindSynced(kind))
        await trio.sleep_forever()


async def test_outage_after_sync_keeps_ready_but_denial_does_not() -> None:
    from trio_typha.datastore.base import Connection
    ds = Flaky()
    feed = CacheFeed("felix")
    pipeline = SyncerPipeline(SyncerDefinition("felix", (K.NAMESPACE,), convert), ds, feed)
    async with trio.open_nursery() as nursery:
        await nursery.start(pipeline.run)
        with trio.fail_after(5):
            await feed.wait_in_sync()
        assert pipeline.ready
        await ds.send.send(Connection(ok=False, reason="cannot reach the API server",
                                      kind=K.NAMESPACE))
        await settle()
        assert pipeline.ready and pipeline.failing  # still serving; the problem is reported
        await ds.send.send(Connection(ok=False, reason="forbidden to watch namespaces",
                                      kind=K.NAMESPACE, denied=True))
        await settle()
        assert not pipeline.ready
        await ds.send.send(Connection(ok=True, kind=K.NAMESPACE))
        await settle()
        assert pipeline.ready and not pipeline.failing
        nursery.cancel_scope.cancel()


async def test_events_waiting_for_the_cache_count_as_staleness(autojump_clock, caplog) -> None:
    """Events held upstream of the cache are measured, logged, and carried into the
    breadcrumbs, so a client's fall-behind age includes them."""
    from trio_typha.syncer.pipeline import STALE_WARNING_SECS, _StampedSender

    store = MemoryStore()
    store.put(ns("a"))
    store.put(ns("b"))
    feed = CacheFeed("felix")
    definition = SyncerDefinition("felix", (K.NAMESPACE,), convert)
    datastore = MemoryDatastore(store)
    pipeline = SyncerPipeline(definition, datastore, feed)
    inner, recv = trio.open_memory_channel(10)
    async with trio.open_nursery() as nursery:
        await nursery.start(pipeline._watch_staleness)
        t0 = trio.current_time()
        stamped = _StampedSender(inner, pipeline._stamps)
        await nursery.start(datastore.watch, definition.kinds, stamped)
        await settle()
        assert feed.staleness(trio.current_time()) == 0.0  # just handed over
        # Nobody takes them into the cache for a while (a starved pipeline).
        await trio.sleep(STALE_WARNING_SECS + 2)
        now = trio.current_time()
        assert feed.staleness(now) == now - t0
        assert any("not yet in the cache" in r.getMessage() for r in caplog.records)
        before = feed.latest
        nursery.start_soon(pipeline._consume, recv)
        await trio.sleep(1)  # past the initial list's gathering window
        now = trio.current_time()
        assert feed.staleness(now) == 0.0
        assert {u.key for u in feed.snapshot_point().snapshot()} == {"/namespaces//a",
                                                                     "/namespaces//b"}
        crumb = before.next
        while crumb is not None and not crumb.updates:  # a status breadcrumb first
            crumb = crumb.next
        assert crumb is not None
        # A client that has not got these yet is as stale as the events in them.
        assert crumb.origin == t0 and feed.client_age(crumb, now) == now - t0
        nursery.cancel_scope.cancel()


async def test_a_conversion_bug_stops_the_pipeline_instead_of_hiding_the_object() -> None:
    """A bug (here a TypeError) in a conversion is not "an invalid object": the pipeline
    fails with the traceback instead of treating the object as absent."""
    import pytest

    def buggy(kind, obj, *, key=None):
        if obj["metadata"]["name"] == "bad":
            return len(None)  # a plain bug
        return convert(kind, obj, key=key)

    store = MemoryStore()
    store.put(ns("bad"))
    store.put(ns("a"))
    feed = CacheFeed("felix")
    pipeline = SyncerPipeline(SyncerDefinition("felix", (K.NAMESPACE,), buggy),
                              MemoryDatastore(store), feed)
    with pytest.RaisesGroup(pytest.RaisesExc(TypeError, match="NoneType"),
                            flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            with trio.fail_after(5):
                await nursery.start(pipeline.run)
                await trio.sleep_forever()
    # Clients were never told the cache is complete while an object was missing from it.
    assert feed.status is not SyncStatus.IN_SYNC


async def test_collection_is_paused_until_in_sync_and_resumes_after(autojump_clock) -> None:
    import gc

    from trio_typha.syncer.gcpause import GCPauses
    from trio_typha.syncer.pipeline import GC_PAUSE_MAX_SECS

    gc.enable()
    pauses = GCPauses(gc)
    store = MemoryStore()
    store.put(ns("a"))
    feed = CacheFeed("felix")
    # NODE is never listed by this datastore stand-in below until we let it: the pipeline
    # stays out of sync, so the pause lasts until GC_PAUSE_MAX_SECS.
    gate = trio.Event()

    class GatedDatastore(MemoryDatastore):
        async def watch(self, kinds, send, *, name="", task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            await gate.wait()
            await super().watch(kinds, send, name=name)

    pipeline = SyncerPipeline(SyncerDefinition("felix", (K.NAMESPACE,), convert),
                              GatedDatastore(store), feed, gc_pauses=pauses)
    async with trio.open_nursery() as nursery:
        await nursery.start(pipeline.run)
        assert not gc.isenabled() and pauses.holders == 1
        gate.set()
        await feed.wait_in_sync()
        assert gc.isenabled() and pauses.holders == 0
        nursery.cancel_scope.cancel()

    # Never in sync: collection resumes after GC_PAUSE_MAX_SECS anyway ...
    stuck = SyncerPipeline(SyncerDefinition("felix", (K.NAMESPACE,), convert),
                           GatedDatastore(store), CacheFeed("felix"), gc_pauses=pauses)
    gate = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(stuck.run)
        await trio.sleep(GC_PAUSE_MAX_SECS - 1)
        assert not gc.isenabled()
        await trio.sleep(20)  # the next heartbeat tick notices
        assert gc.isenabled() and pauses.holders == 0
        nursery.cancel_scope.cancel()

    # ... and a pipeline cancelled before it syncs lets go of its pause.
    gate = trio.Event()
    cancelled = SyncerPipeline(SyncerDefinition("felix", (K.NAMESPACE,), convert),
                               GatedDatastore(store), CacheFeed("felix"), gc_pauses=pauses)
    async with trio.open_nursery() as nursery:
        await nursery.start(cancelled.run)
        assert not gc.isenabled()
        nursery.cancel_scope.cancel()
    assert gc.isenabled() and pauses.holders == 0
