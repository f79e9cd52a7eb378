"""An object must convert to the same keys and values whether it was listed or watched.

kube-apiserver (and so the test bed) encodes a built-in kind's list items without
``apiVersion``/``kind`` and its watch event objects with them; custom resources carry them
both ways.  Go Typha's values never depend on the path: client-go's typed decoders clear
TypeMeta, and Calico stamps its own resources.  Here every object of the all-kinds seed
reaches one KDD watcher through its watch and another through its initial list, and each
syncer's conversion of the two must be byte-identical.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from testbed.apiserver import ApiServer, open_apiserver
from trio_typha.datastore.base import DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.k8s_api import KubeApi, resource_path
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import KubernetesDatastore
from trio_typha.datastore.seed import load_seed_file
from trio_typha.model import kinds as K
from trio_typha.model.kinds import ResourceKind, kind_for
from trio_typha.model.kv import SYNCER_TYPES
from trio_typha.model.syncers import DatastoreMode, syncer_definition

SEED = Path(__file__).parents[2] / "testbed" / "seeds" / "all-kinds.yaml"
FAST = WatchTuning(min_watch_interval=0.001, backoff_initial=0.01, backoff_max=0.05)
Objects = dict[tuple[ResourceKind, str, str], dict[str, Any]]


class Seen:
    """The latest object a KDD watcher reported per key, and the kinds it has synced."""

    def __init__(self) -> None:
        self.objects: Objects = {}
        self.synced: set[ResourceKind] = set()
        self._changed = trio.Event()

    async def consume(self, recv: trio.MemoryReceiveChannel[DatastoreEvent]) -> None:
        async for ev in recv:
            if isinstance(ev, ResourceEvent):
                assert ev.obj is not None
                self.objects[(ev.kind, ev.namespace, ev.name)] = dict(ev.obj)
            elif isinstance(ev, KindSynced):
                self.synced.add(ev.kind)
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        with trio.fail_after(30):  # hang protection only
            while not condition():
                await self._changed.wait()


@asynccontextmanager
async def objects_seen(server: ApiServer, kinds: Sequence[ResourceKind]) -> AsyncIterator[Seen]:
    """A KDD watcher of ``kinds``, synced, for the ``async with``."""
    seen = Seen()
    send, recv = trio.open_memory_channel[DatastoreEvent](10_000)
    async with KubeApi(KubeClientConfig(server=server.url, source="test")) as api, \
            trio.open_nursery() as nursery:
        ds = KubernetesDatastore(api, calico_group=K.CALICO_V3_GROUP, tuning=FAST,
                                 random=random.Random(1).random)
        nursery.start_soon(seen.consume, recv)
        await nursery.start(ds.watch, kinds, send)
        await seen.wait_for(lambda: seen.synced == set(kinds))
        yield seen
        nursery.cancel_scope.cancel()


async def test_list_items_carry_no_type_for_builtin_kinds_only() -> None:
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as server:
        server.store.create(K.NAMESPACE, {"metadata": {"name": "prod"}})
        pool = {"metadata": {"name": "p1"}, "spec": {"cidr": "10.0.0.0/16"}}
        server.store.create(K.calico_kind("IPPool", K.CALICO_CRD_GROUP), pool)
        async with httpx.AsyncClient(base_url=server.url) as http:
            ns_list = (await http.get(resource_path(K.NAMESPACE))).json()
            crd_path = resource_path(K.calico_kind("IPPool", K.CALICO_CRD_GROUP))
            crd_list = (await http.get(crd_path)).json()
            async with http.stream("GET", resource_path(K.NAMESPACE),
                                   params={"watch": "true", "resourceVersion": "0",
                                           "timeoutSeconds": "1"}) as resp:
                first = json.loads(await resp.aiter_lines().__anext__())
    assert (ns_list["kind"], ns_list["apiVersion"]) == ("NamespaceList", "v1")
    assert {"kind", "apiVersion"}.isdisjoint(ns_list["items"][0])  # typed list item
    assert crd_list["items"][0]["kind"] == "IPPool"  # unstructured: kept
    assert (first["object"]["kind"], first["object"]["apiVersion"]) == ("Namespace", "v1")


async def test_every_syncer_converts_listed_and_watched_objects_identically() -> None:
    definitions = {t: syncer_definition(t, DatastoreMode.KDD, calico_group=K.CALICO_V3_GROUP)
                   for t in SYNCER_TYPES}
    kinds = list(dict.fromkeys(k for d in definitions.values() for k in d.kinds))
    seed = [(kind_for(o["apiVersion"], o["kind"]), o) for o in load_seed_file(str(SEED))]
    seed = [(kind, obj) for kind, obj in seed if kind in kinds]
    async with open_apiserver(calico_groups=(K.CALICO_V3_GROUP,), enforce_namespaces=False,
                              cluster_network_policy=True, kubevirt=True) as server, \
            objects_seen(server, kinds) as watcher:  # all empty: the rest arrives by watch
        for kind, obj in seed:
            server.store.create(kind, obj)
        # (The watcher also listed the server's default namespaces: wait for the seed's keys.)
        wanted = {(kind, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
                  for kind, obj in seed}
        await watcher.wait_for(lambda: wanted <= watcher.objects.keys())
        async with objects_seen(server, kinds) as lister:
            listed, watched = lister.objects, watcher.objects
    assert listed.keys() == watched.keys()
    compared = passthrough = 0
    for key, obj in listed.items():
        for definition in definitions.values():
            if key[0] not in definition.kinds:
                continue
            via_list = definition.convert(key[0], obj)
            via_watch = definition.convert(key[0], watched[key])
            assert via_list == via_watch, (key, obj, watched[key])
            compared += len(via_list)
            for kv in via_list:
                if "/kubernetesservice/" in kv.key or "/kubernetesendpointslices/" in kv.key:
                    passthrough += 1
                    assert {"kind", "apiVersion"}.isdisjoint(json.loads(kv.value)), kv.key
    assert passthrough >= 2 and compared > len(seed)
    # The seed covers both paths' interesting case: built-in kinds, whose list items lack
    # apiVersion/kind on the wire.
    assert any(urlsplit(resource_path(k)).path.startswith("/api/v1") for k, _, _ in listed)
