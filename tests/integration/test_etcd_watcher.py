"""EtcdDatastore against a real etcd: list, watch, restarts, compaction, hangs, TLS.

Every test checks the watcher's view (all events applied to a dict) against etcd's own
contents.  ``fail_after`` only guards against hangs; nothing here asserts on timing.
"""

from __future__ import annotations

import logging
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from testbed.cluster import v3
from tests.etcd_server import EtcdClient, free_port, run_etcd
from tests.fault_proxy import FaultProxy
from trio_typha.datastore.base import Connection, DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.datastore.etcd_config import EtcdConfig
from trio_typha.model import kinds as K

pytestmark = pytest.mark.etcd

GNP = K.calico_kind("GlobalNetworkPolicy")
NP = K.calico_kind("NetworkPolicy")
GNS = K.calico_kind("GlobalNetworkSet")  # between GNP and NP: in the watch span, not watched
KINDS = [GNP, NP]
WAIT = 20  # hang protection only


def gnp(name: str, order: int = 1) -> dict[str, Any]:
    return v3("GlobalNetworkPolicy", name, {"order": order, "selector": "all()"})


def np(ns: str, name: str, order: int = 1) -> dict[str, Any]:
    return v3("NetworkPolicy", name, {"order": order}, namespace=ns)


def gns(name: str) -> dict[str, Any]:
    return v3("GlobalNetworkSet", name, {"nets": ["10.0.0.0/8"]})


class Recorder:
    """Consumes a watcher's events: the applied view, every event, and change wake-ups."""

    def __init__(self) -> None:
        self.view: dict[tuple, Any] = {}
        self.events: list[DatastoreEvent] = []
        self._changed = trio.Event()

    async def consume(self, recv: trio.MemoryReceiveChannel[DatastoreEvent]) -> None:
        async for ev in recv:
            self.events.append(ev)
            if isinstance(ev, ResourceEvent):
                key = (ev.kind, ev.namespace, ev.name)
                if ev.deleted:
                    assert key in self.view, f"deletion of {key} that was never sent"
                    del self.view[key]
                else:
                    assert ev.obj is not None
                    assert ev.obj["apiVersion"] == "projectcalico.org/v3"
                    assert ev.obj["kind"] == ev.kind.kind
                    self.view[key] = ev.obj
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        with trio.fail_after(WAIT):
            while not predicate():
                await self._changed.wait()

    def connections(self) -> list[bool]:
        return [ev.ok for ev in self.events if isinstance(ev, Connection)]

    def resource_events(self, since: int = 0) -> list[ResourceEvent]:
        return [ev for ev in self.events[since:] if isinstance(ev, ResourceEvent)]

    async def wait_synced(self) -> None:
        """Until every kind has listed once (the watch starts right after)."""
        await self.wait_for(lambda: {e.kind for e in self.events
                                     if isinstance(e, KindSynced)} == set(KINDS))

    async def wait_matches(self, client: EtcdClient) -> None:
        """Until the view equals etcd's current contents for KINDS."""
        expected = await client.resources(KINDS)
        await self.wait_for(lambda: self.view == expected)


async def start_watcher(nursery: trio.Nursery, config: EtcdConfig, **kw: Any) -> Recorder:
    kw.setdefault("backoff_initial", 0.05)
    kw.setdefault("backoff_max", 0.5)
    ds = EtcdDatastore(config, rng=random.Random(4), **kw)
    send, recv = trio.open_memory_channel[DatastoreEvent](100)
    rec = Recorder()
    nursery.start_soon(rec.consume, recv)
    await nursery.start(ds.run)  # hosts the connection the watch shares
    await nursery.start(ds.watch, KINDS, send)
    return rec


async def test_list_then_watch(tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        for i in range(7):
            await c.put_resource(gnp(f"g{i}", i))
        for i in range(4):
            await c.put_resource(np("prod", f"n{i}"))
        await c.put_resource(gns("skip-me"))
        await c.put("/calico/resources/v3/projectcalico.org/globalnetworkpolicies/broken",
                    b"{not json")
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, etcd.config, page_size=3)  # several pages
            await rec.wait_for(lambda: sum(isinstance(e, KindSynced) for e in rec.events) == 2)
            assert len(rec.view) == 11
            await rec.wait_matches(c)
            await rec.wait_for(lambda: rec.connections() == [True])
            listed = rec.resource_events()
            assert {e.revision for e in listed} == {
                str(r) for r in range(2, 13)}, "revision = mod_revision"

            mark = len(rec.events)
            await c.put_resource(gnp("g0", 100))
            await c.delete_resource(GNP, "", "g1")
            await c.put_resource(np("dev", "new"))
            await c.put_resource(gns("still-skipped"))
            await c.delete_resource(NP, "prod", "n0")
            await rec.wait_matches(c)
            assert [(e.name, e.deleted) for e in rec.resource_events(mark)] == [
                ("g0", False), ("g1", True), ("new", False), ("n0", True)]
            assert rec.view[(GNP, "", "g0")]["spec"]["order"] == 100
            nursery.cancel_scope.cancel()


async def test_survives_sigkill_and_restart(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trio_typha.datastore")
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        for i in range(5):
            await c.put_resource(gnp(f"g{i}"))
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, etcd.config,
                                      request_timeout=2.0)
            await rec.wait_synced()
            await rec.wait_matches(c)

            # Writers race the kill: the watcher must end up with exactly what etcd kept.
            async def writes(prefix: str, n: int) -> None:
                for i in range(n):
                    await c.put_resource(np("ns", f"{prefix}{i}", i))
                    await c.put_resource(gnp(f"g{i}", 10 + i))

            await writes("before", 3)
            await c.delete_resource(GNP, "", "g4")
            await etcd.kill()
            await rec.wait_for(lambda: rec.connections()[-1:] == [False])
            await etcd.start()
            # Immediately, probably while the watcher is still backing off.
            await writes("after", 6)
            await c.delete_resource(NP, "ns", "before0")
            await rec.wait_matches(c)
            await rec.wait_for(lambda: rec.connections()[-1:] == [True])
            assert rec.connections() == [True, False, True]

            await c.put_resource(gnp("late"))
            await rec.wait_matches(c)
            assert (GNP, "", "late") in rec.view
            # Same etcd, history intact: the watch resumed where it stopped, no relist.
            assert sum("Listed" in r.getMessage() for r in caplog.records) == 1
            nursery.cancel_scope.cancel()


async def test_compaction_in_the_middle_of_the_list_lists_again_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The pinned revision is compacted while the pages are still being fetched: the list
    starts again at a new revision, objects the first attempt already sent are not sent
    twice, a change made meanwhile arrives, and every kind is synced once."""
    caplog.set_level(logging.INFO, logger="trio_typha.datastore.etcd")
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        for i in range(10):
            await c.put_resource(gnp(f"g{i}"))
        await c.put_resource(np("ns", "n"))
        ds = EtcdDatastore(etcd.config, rng=random.Random(4), page_size=1,
                           backoff_initial=0.05, backoff_max=0.5)
        # No buffer: the watcher waits on its first object until it is read here, and its
        # page fetcher can be at most a page or two ahead of that (one page per object).
        send, recv = trio.open_memory_channel[DatastoreEvent](0)
        async with trio.open_nursery() as nursery:
            await nursery.start(ds.run)  # hosts the connection the watch shares
            await nursery.start(ds.watch, KINDS, send)
            with trio.fail_after(WAIT):
                first = await recv.receive()
            assert isinstance(first, ResourceEvent) and first.name == "g0"
            await c.put_resource(gnp("g9", 5))  # changed after the pinned revision
            await c.compact(await c.revision())
            rec = Recorder()
            rec.view[(first.kind, first.namespace, first.name)] = first.obj
            rec.events.append(first)
            nursery.start_soon(rec.consume, recv)
            await rec.wait_matches(c)
            await rec.wait_for(lambda: rec.connections() == [True])
            names = [(e.name, e.revision) for e in rec.resource_events()]
            assert len(names) == len(set(names)), f"an object was sent twice: {names}"
            # The first attempt got no further than a few pages, so g9 comes once, changed.
            assert sorted(n for n, _ in names) == sorted([f"g{i}" for i in range(10)] + ["n"])
            assert sum(isinstance(e, KindSynced) for e in rec.events) == 2
            assert "compacted during the list" in caplog.text
            nursery.cancel_scope.cancel()


async def test_compaction_past_the_watcher_relists_only_differences(tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        for i in range(6):
            await c.put_resource(gnp(f"g{i}"))
            await c.put_resource(np("ns", f"n{i}"))
        async with trio.open_nursery() as nursery:
            proxy = FaultProxy(etcd.client_port)
            await nursery.start(proxy.serve)
            config = EtcdConfig(endpoints=(f"http://127.0.0.1:{proxy.port}/",))
            rec = await start_watcher(nursery, config)
            await rec.wait_synced()
            await rec.wait_matches(c)
            old_revision = await c.revision()

            proxy.cut()
            await rec.wait_for(lambda: rec.connections()[-1:] == [False])
            mark = len(rec.events)
            await c.put_resource(gnp("g0", 7))          # changed
            await c.delete_resource(GNP, "", "g1")       # deleted
            await c.put_resource(np("ns", "fresh"))      # added
            await c.put_resource(np("ns", "n2", 9))      # changed, then ...
            await c.put_resource(np("ns", "n2", 10))     # ... changed again
            await c.put_resource(gns("other-kind"))      # not watched
            await c.put_resource(gnp("flash"))           # added and removed again:
            await c.delete_resource(GNP, "", "flash")    # nothing to say
            await c.compact(await c.revision())
            assert await c.revision() > old_revision + 1
            proxy.heal()

            await rec.wait_matches(c)
            await rec.wait_for(lambda: rec.connections()[-1:] == [True])
            changed = sorted((e.kind.kind, e.name, e.deleted) for e in rec.resource_events(mark))
            assert changed == [("GlobalNetworkPolicy", "g0", False),
                               ("GlobalNetworkPolicy", "g1", True),
                               ("NetworkPolicy", "fresh", False),
                               ("NetworkPolicy", "n2", False)]

            # And the watch carries on from the relist's revision.
            mark = len(rec.events)
            await c.put_resource(gnp("after"))
            await rec.wait_matches(c)
            assert [e.name for e in rec.resource_events(mark)] == ["after"]
            nursery.cancel_scope.cancel()


async def test_frozen_etcd_is_noticed_by_the_ping_keepalive(tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        await c.put_resource(gnp("a"))
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, etcd.config, stall_deadline=0.5,
                                      request_timeout=0.5)
            await rec.wait_synced()
            await c.put_resource(gnp("seen-by-the-watch"))
            await rec.wait_matches(c)  # so the watch stream is up when etcd freezes
            etcd.freeze()  # sockets stay open, nothing answers: only the PING can tell
            try:
                await rec.wait_for(lambda: rec.connections()[-1:] == [False])
            finally:
                etcd.thaw()
            await rec.wait_for(lambda: rec.connections()[-1:] == [True])
            await c.put_resource(gnp("b"))
            await rec.wait_matches(c)
            nursery.cancel_scope.cancel()


async def test_replaced_etcd_is_relisted(tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    # A wiped etcd at the same address has a new cluster id and an older revision; the
    # watcher's resume point means nothing there, so it lists again.
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        for i in range(5):
            await c.put_resource(gnp(f"g{i}"))
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, etcd.config)
            await rec.wait_synced()
            await rec.wait_matches(c)
            await etcd.stop()
            await rec.wait_for(lambda: rec.connections()[-1:] == [False])
            shutil.rmtree(etcd.data_dir)
            await etcd.start()
            await c.put_resource(gnp("g1", 5))
            await c.put_resource(np("ns", "new"))
            await rec.wait_matches(c)
            assert set(rec.view) == {(GNP, "", "g1"), (NP, "ns", "new")}
            assert any("changed identity" in r.getMessage() for r in caplog.records)
            nursery.cancel_scope.cancel()


async def test_falls_over_to_the_next_endpoint(tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        await c.put_resource(np("ns", "x"))
        dead = f"http://127.0.0.1:{free_port()}/"
        config = EtcdConfig(endpoints=(dead, etcd.config.endpoints[0]))
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, config)
            await rec.wait_matches(c)
            await rec.wait_for(lambda: rec.connections() == [False, True])
            nursery.cancel_scope.cancel()


async def test_tls_with_client_certificates(tmp_path: Path) -> None:
    async with run_etcd(tmp_path, tls=True) as etcd, etcd.client() as c:
        await c.put_resource(gnp("secure"))
        async with trio.open_nursery() as nursery:
            rec = await start_watcher(nursery, etcd.config)
            await rec.wait_matches(c)
            await c.put_resource(np("ns", "watched-over-tls"))
            await rec.wait_matches(c)
            assert len(rec.view) == 2

            # Without the client certificate etcd refuses the handshake.
            no_cert = EtcdConfig(endpoints=etcd.config.endpoints, ca_file=etcd.config.ca_file)
            rec2 = await start_watcher(nursery, no_cert)
            await rec2.wait_for(lambda: rec2.connections()[:1] == [False])
            assert rec2.view == {}
            nursery.cancel_scope.cancel()


async def test_rejects_kinds_etcd_does_not_store() -> None:
    ds = EtcdDatastore(EtcdConfig())
    send, _ = trio.open_memory_channel[DatastoreEvent](1)
    with pytest.raises(ValueError, match="not stored in etcd"):
        await ds.watch([GNP, K.POD], send)
