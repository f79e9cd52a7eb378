"""The third stall shape: the datastore's watch hub wedged - every watch silent, new ones
too, while reads still work.  The watcher lists in the silent stream's place every deadline
(the diff sends the updates and deletions the watch would have), readiness names the
stream, and once a watch delivers again it goes back to watching without relisting.

KDD runs in virtual time: the test bed API server on in-memory streams (its
``wedge_watches`` switch), the real HTTP/2 client and watcher, kube-apiserver's timings (a
30 s deadline, bookmarks every minute).  etcd runs against a real etcd behind
:mod:`tests.h2_stream_proxy`, which drops the DATA of its Watch streams; real time there, so
its figures are printed, and the bounds it asserts are loose.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from testbed.apiserver import ApiServer
from testbed.cluster import k8s_pod
from tests.e2e.harness import HANG
from tests.etcd_server import run_etcd
from tests.h2_stream_proxy import open_h2_stream_proxy
from tests.stall_harness import GNP_KEY, deletion_arrives, felix_daemon, gnp, warnings
from trio_typha.datastore import k8s_h2
from trio_typha.datastore.base import DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.datastore.etcd_config import EtcdConfig
from trio_typha.datastore.k8s_api import KubeApi
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import KubernetesDatastore
from trio_typha.model import kinds as K
from trio_typha.model.kinds import ResourceKind

DEADLINE = 30.0
BOOKMARKS = 60.0  # kube-apiserver's period
SLACK = 3.0  # StallCheck.bookmark_slack for a minute's bookmarks


@asynccontextmanager
async def in_memory_server(server: ApiServer, monkeypatch: pytest.MonkeyPatch
                           ) -> AsyncIterator[None]:
    """Every TCP connection the HTTP/2 client opens is an in-memory stream to ``server``
    (so the whole exchange runs in virtual time)."""
    async with trio.open_nursery() as nursery:

        async def connect(host: str, port: int) -> trio.abc.Stream:
            client, served = trio.testing.memory_stream_pair()
            nursery.start_soon(server.handle_connection, served)
            return client

        monkeypatch.setattr(k8s_h2.trio, "open_tcp_stream", connect)
        yield
        nursery.cancel_scope.cancel()


class Seen:
    """The events a watcher sent, with the virtual time each arrived."""

    def __init__(self) -> None:
        self.events: list[tuple[float, DatastoreEvent]] = []
        self._changed = trio.Event()

    async def collect(self, recv: trio.MemoryReceiveChannel[DatastoreEvent]) -> None:
        async for event in recv:
            self.events.append((trio.current_time(), event))
            self._changed.set()
            self._changed = trio.Event()

    async def until(self, kind: ResourceKind, name: str, *, deleted: bool) -> float:
        """When ``kind``/``name`` was (or, waiting, is) set or deleted."""
        while True:
            for at, event in self.events:
                if (isinstance(event, ResourceEvent) and event.kind == kind
                        and event.name == name and event.deleted == deleted):
                    return at
            await self._changed.wait()

    def synced(self) -> int:
        return sum(isinstance(e, KindSynced) for _, e in self.events)


def lists(server: ApiServer) -> int:
    """Requests other than watches (this test sends only lists and watches)."""
    return server.traffic.requests - server.traffic.watches


async def test_kdd_wedged_hub_lists_in_its_place_until_the_watches_deliver(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "trio_typha.datastore")
    server = ApiServer(bookmark_interval=BOOKMARKS)
    for name in ("stays", "doomed", "later"):
        server.store.create(K.NAMESPACE, {"metadata": {"name": name}})
    kinds: Sequence[ResourceKind] = (K.NAMESPACE, K.POD)
    tuning = WatchTuning(stall_deadline=DEADLINE, bookmark_interval=BOOKMARKS)
    cfg = KubeClientConfig(server="http://apiserver.test:80", source="test")
    seen = Seen()
    send, recv = trio.open_memory_channel[DatastoreEvent](1000)
    async with in_memory_server(server, monkeypatch), \
            KubeApi(cfg, stall_deadline=DEADLINE) as api, trio.open_nursery() as nursery:
        ds = KubernetesDatastore(api, calico_group=K.CALICO_CRD_GROUP, tuning=tuning,
                                 random=random.Random(4).random)
        nursery.start_soon(seen.collect, recv)
        await nursery.start(partial(ds.watch, name="felix"), kinds, send)
        await server.wait_for_watches(lambda n: n == len(kinds))
        # A write, then etcd's progress notification: every kind's watch cache is past
        # its watch's start, so every stream gets its bookmark each minute from now on.
        server.store.create(K.POD, k8s_pod("p", "stays"))
        server.store.progress()
        await trio.sleep(10 * BOOKMARKS)
        # Healthy and quiet: the bookmarks keep every stream current; nothing is probed
        # or listed again, and the streams are the first two.
        assert lists(server) == len(kinds) and server.traffic.watches == len(kinds)
        assert not any(s.stale for s in ds.watches.states())

        server.wedge_watches()
        wedged_at = trio.current_time()
        server.store.delete(K.NAMESPACE, "", "doomed")
        gone = await seen.until(K.NAMESPACE, "doomed", deleted=True) - wedged_at
        # Noticed by the bookmark that did not come (the last one came at most a minute
        # before the wedge), then one list.
        assert gone <= BOOKMARKS + SLACK + 1.0, gone
        (warning,) = [w for w in warnings(caplog.records, "wedged")
                      if w.startswith("Watch of namespaces.core/v1 (felix/namespaces) "
                                      "wedged: silent for")]
        assert "no bookmark for" in warning and "listing namespaces in its place every 30s" \
            in warning
        # Readiness names the stream.
        states = {s.name: s for s in ds.watches.states()}
        assert states["felix/namespaces"].stale
        assert "listing it every 30s instead" in states["felix/namespaces"].describe()

        # While wedged, a deletion is in the cache within a deadline plus one list.
        listed = lists(server)
        server.store.delete(K.NAMESPACE, "", "later")
        deleted_at = trio.current_time()
        later = await seen.until(K.NAMESPACE, "later", deleted=True) - deleted_at
        assert later <= DEADLINE + 1.0, later
        await trio.sleep(4 * DEADLINE)
        # One list per kind per deadline, no storm.
        per_kind = (lists(server) - listed) / len(kinds)
        print(f"kdd wedged: first deletion after {gone:.1f}s (bookmarks every "
              f"{BOOKMARKS:g}s), the next after {later:.1f}s (deadline {DEADLINE:g}s); "
              f"{per_kind:.1f} lists per kind in {later + 4 * DEADLINE:.0f}s")
        assert per_kind <= (later + 4 * DEADLINE) / DEADLINE + 1

        server.unwedge_watches()
        await trio.sleep(2.5 * DEADLINE)  # (half-way between two lists)
        # Quiet watches opened after a list are owed nothing, so nothing shows the hub
        # works again: the lists go on (on kube-apiserver, etcd's progress notifications
        # make every watch owe its bookmarks within ten minutes)...
        assert all(s.stale for s in ds.watches.states())
        # ...until anything is delivered: a write to one kind ends both fallbacks.
        server.store.create(K.POD, k8s_pod("q", "stays"))
        await seen.until(K.POD, "q", deleted=False)
        await trio.sleep(DEADLINE / 3)  # (the namespaces watcher looks a quarter interval on)
        assert not any(s.stale for s in ds.watches.states())
        assert len([r for r in caplog.records if "back to streaming" in r.getMessage()]) == 2
        listed = lists(server)
        await trio.sleep(10 * BOOKMARKS)  # back to watching: no more lists
        assert lists(server) == listed
        assert not any(s.stale for s in ds.watches.states())
        assert (await seen.until(K.NAMESPACE, "stays", deleted=False)) < wedged_at
        assert not [e for _, e in seen.events
                    if isinstance(e, ResourceEvent) and e.deleted and e.name == "stays"]
        nursery.cancel_scope.cancel()


WATCH = "/etcdserverpb.Watch/Watch"
RANGE = "/etcdserverpb.KV/Range"


@pytest.mark.etcd
async def test_etcd_wedged_hub_lists_in_its_place_until_the_watch_delivers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A real etcd whose Watch streams the proxy silences (ranges and PINGs pass): the
    stalled stream is resumed on a new one, which gets nothing either, so the pipeline
    lists in its place; the deletion arrives through that list, readiness names the
    watch, and once watches deliver again the next one carries on with no relist."""
    caplog.set_level(logging.INFO, "trio_typha.datastore")
    deadline = 3.0
    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            open_h2_stream_proxy(etcd.client_port) as proxy:
        for name in ("stays", "doomed", "later"):
            await c.put_resource(gnp(name))
        ds = EtcdDatastore(EtcdConfig(endpoints=(f"http://127.0.0.1:{proxy.port}/",)),
                           stall_deadline=deadline, backoff_initial=0.05, backoff_max=0.5)
        async with felix_daemon(ds) as (daemon, client):
            proxy.wedge(WATCH)
            started = time.monotonic()
            await c.delete_resource(K.calico_kind("GlobalNetworkPolicy"), "", "doomed")
            took = await deletion_arrives(client, GNP_KEY.format("doomed"), started)
            (stall,) = warnings(caplog.records, "stalled")
            assert stall.startswith("etcd watch felix/etcd stalled: nothing delivered for")
            assert "the connection answers PINGs: resuming from revision" in stall
            (wedged,) = warnings(caplog.records, "wedged")
            assert wedged.startswith("etcd watch felix/etcd wedged: silent for")
            assert "got no reply either" in wedged and "every 3s" in wedged
            (state,) = daemon.watch_states("felix/")
            assert state.stale and "listing it every 3s instead" in state.describe()
            started = time.monotonic()
            await c.delete_resource(K.calico_kind("GlobalNetworkPolicy"), "", "later")
            later = await deletion_arrives(client, GNP_KEY.format("later"), started)
            print(f"etcd wedged: deletion after {took:.2f}s, the next after {later:.2f}s "
                  f"(deadline {deadline}s); {proxy.silenced} watch streams silenced, "
                  f"{proxy.credit_returned} bytes of flow-control credit returned")
            assert proxy.silenced >= 2  # the first stream and the one resumed after it
            assert GNP_KEY.format("stays") in client.kvs
            assert proxy.accepted == 1  # one connection throughout; only streams change

            proxy.unwedge(WATCH)
            with trio.fail_after(HANG):  # (polled, as readiness would be)
                while True:
                    if not daemon.watch_states("felix/")[0].stale:
                        break
                    await trio.sleep(0.1)
            assert [r for r in caplog.records if "back to streaming" in r.getMessage()]
            ranges = len(proxy.matching(RANGE))
            await c.put_resource(gnp("after"))
            with trio.fail_after(HANG):
                await client.wait_until(lambda: GNP_KEY.format("after") in client.kvs)
            await trio.sleep(3 * deadline)
            assert len(proxy.matching(RANGE)) == ranges  # watching again: no list since
