"""The memory datastore's store keeps objects serialized: reads are copies, values come
back exactly, the change log and relists carry what was put."""

from __future__ import annotations

import datetime

import trio

from testbed.cluster import k8s_pod
from trio_typha.datastore.events import KindSynced, ResourceEvent
from trio_typha.datastore.memory import MemoryDatastore, MemoryStore
from trio_typha.model import kinds as K


def pod(name: str, **extra: object) -> dict:
    return k8s_pod(name, "ns", labels={"a": "1"}, node="n1", **extra)


def test_reads_are_copies_and_values_come_back_exactly() -> None:
    store = MemoryStore()
    odd = {"when": datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC), "big": 1 << 80,
           "pair": (1, 2), "nan": float("inf")}
    given = pod("p", extra=odd)
    stored = store.put(given)
    assert given["metadata"] == {"name": "p", "namespace": "ns", "labels": {"a": "1"}}
    md = stored["metadata"]
    assert md["resourceVersion"] == "1" and md["uid"] and md["creationTimestamp"]
    got = store.get(K.POD, "ns", "p")
    assert got == stored and got is not stored
    assert got["spec"]["extra"] == odd  # datetime, big int, tuple: exactly as put
    got["metadata"]["labels"]["a"] = "changed"  # a reader cannot change the store
    stored["spec"]["nodeName"] = "elsewhere"
    assert store.get(K.POD, "ns", "p") == store.objects(K.POD)[0][2]
    assert store.get(K.POD, "ns", "p")["metadata"]["labels"] == {"a": "1"}
    assert store.get(K.POD, "ns", "p")["spec"]["nodeName"] == "n1"
    # An update keeps uid and creationTimestamp.
    again = store.put(pod("p"))
    assert (again["metadata"]["uid"], again["metadata"]["creationTimestamp"]) == (
        md["uid"], md["creationTimestamp"])
    assert again["metadata"]["resourceVersion"] == "2"


async def test_relist_and_log_replay_send_what_was_put() -> None:
    store = MemoryStore()
    store.put(pod("a"))
    store.put(pod("b"))
    send, recv = trio.open_memory_channel(100)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(MemoryDatastore(store).watch, [K.POD], send)
        first = [await recv.receive() for _ in range(3)]
        assert [type(e) for e in first] == [ResourceEvent, ResourceEvent, KindSynced]
        assert [e.obj for e in first[:2]] == [store.get(K.POD, "ns", "a"),
                                              store.get(K.POD, "ns", "b")]
        store.put(pod("a", hostNetwork=False))
        store.delete(K.POD, "ns", "b")
        changed, gone = await recv.receive(), await recv.receive()
        assert changed.obj == store.get(K.POD, "ns", "a") and changed.revision == "3"
        assert (gone.name, gone.obj) == ("b", None)
        nursery.cancel_scope.cancel()
