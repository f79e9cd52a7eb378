"""Reconnecting without a snapshot: our gRPC client against real daemons over loopback,
two replicas on one datastore (resume by position on the same replica, by digest on the
other and on one started after the outage), and the snapshot fallback."""

from __future__ import annotations

import copy
import logging

import httpx
import pytest
import trio

from tests.integration.test_daemon import config
from trio_typha.cache.digest import KeyTree
from trio_typha.client import grpc as g
from trio_typha.client.view import SyncView
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate

HANG = 20


async def follow(port: int, view: SyncView, *, resume: g.Resume | None = None,
                 until: int = 0) -> tuple[g.Header, int]:
    """One stream until its start is complete, the view in sync and at breadcrumb
    ``until`` at least: the header and the bytes the client received."""
    received = 0
    header: g.Header | None = None
    stream = await g.open_stream("127.0.0.1", port)
    async with stream:
        counting = g.CountingStream(stream)
        finished = False
        async for ev in g.sync(counting, "felix", hostname="resumer", resume=resume):
            g.apply_event(view, ev)
            if isinstance(ev, g.Header):
                header = ev
            finished = finished or isinstance(ev, g.Finished)
            if finished and view.in_sync and view.seq >= until:
                break
        received = counting.received
    assert header is not None
    return header, received


def churn(store: MemoryStore, n: int, tag: str) -> None:
    """``n`` writes: new namespaces, relabelled ones and one deletion."""
    for i in range(n):
        store.put({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": f"{tag}-{i % 7}", "labels": {"round": f"{tag}{i}"}}})


async def settle(*daemons: Daemon) -> None:
    """Until the daemons' felix caches have taken every write (no change for 0.3 s)."""
    def seqs() -> list[int]:
        return [d.pipelines["felix"].feed.latest.seq for d in daemons]
    with trio.fail_after(HANG):
        last = seqs()
        while True:
            await trio.sleep(0.3)
            if (now := seqs()) == last:
                return
            last = now


@pytest.fixture
async def replicas(nursery):
    store = MemoryStore()
    store.put_all(generate("tiny"))
    daemons = []
    for _ in range(2):
        d = Daemon(config(), store=store, listen_port=0)
        await nursery.start(d.run)
        with trio.fail_after(HANG):
            await d.wait_in_sync()
        daemons.append(d)
    yield store, daemons
    for d in daemons:
        d.shutdown()


def content(daemon: Daemon) -> dict[str, bytes | None]:
    return daemon.pipelines["felix"].feed.cache.values_by_key()


async def test_position_on_the_same_replica_digest_on_the_other(replicas, caplog) -> None:
    caplog.set_level(logging.INFO, "trio_typha.protocols")
    store, (a, b) = replicas
    view = SyncView(tree=KeyTree())
    header, snapshot_bytes = await follow(a.ports["server"], view)
    assert header.resume == "snapshot" and view.as_dict() == content(a)
    assert view.tree is not None and view.tree.root == a.pipelines["felix"].feed.cache.tree.root

    churn(store, 3, "outage")  # written while the client is away
    await settle(a, b)
    kept = copy.deepcopy(view)

    header, position_bytes = await follow(a.ports["server"], view, resume=g.resume_of(view))
    assert header.resume == "position"
    assert view.as_dict() == content(a)

    header, digest_bytes = await follow(b.ports["server"], kept, resume=g.resume_of(kept))
    assert header.resume == "digest"
    assert kept.as_dict() == content(b) == content(a)
    assert kept.tree is not None and kept.tree.root == b.pipelines["felix"].feed.cache.tree.root

    # Both resumes cost a fraction of the snapshot.
    assert position_bytes < snapshot_bytes / 4 and digest_bytes < snapshot_bytes / 4
    hellos = [getattr(r, "typha_fields", {}).get("start") for r in caplog.records
              if "Received Hello" in r.getMessage()]
    assert hellos[:3] == ["snapshot", "position", "digest (another epoch)"]

    async with httpx.AsyncClient() as http:
        body = (await http.get(f"http://127.0.0.1:{b.ports['metrics']}/metrics")).text
    assert 'typha_resume_total{syncer="felix",method="digest"} 1.0' in body


async def test_unchanged_copy_resumes_by_digest_with_nothing_to_send(replicas) -> None:
    _, (a, b) = replicas
    view = SyncView(tree=KeyTree())
    await follow(a.ports["server"], view)
    before = dict(view.kvs)
    header, nbytes = await follow(b.ports["server"], view, resume=g.resume_of(view))
    assert header.resume == "digest" and view.kvs == before and nbytes < 2000


async def test_a_replica_started_after_the_outage_resumes_by_digest(replicas, nursery) -> None:
    store, (a, _) = replicas
    view = SyncView(tree=KeyTree())
    await follow(a.ports["server"], view)
    churn(store, 30, "cold")
    await settle(a)
    cold = Daemon(config(), store=store, listen_port=0)
    await nursery.start(cold.run)
    with trio.fail_after(HANG):
        await cold.wait_in_sync()
    header, _ = await follow(cold.ports["server"], view, resume=g.resume_of(view))
    assert header.resume == "digest"
    assert view.as_dict() == content(cold)
    cold.shutdown()


async def test_wrong_epoch_or_evicted_history_without_a_tree_gets_a_snapshot(nursery) -> None:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    d = Daemon(config(ResumeHistoryUpdates="5"), store=store, listen_port=0)
    await nursery.start(d.run)
    with trio.fail_after(HANG):
        await d.wait_in_sync()
    port = d.ports["server"]
    view = SyncView()  # no tree: position only
    await follow(port, view)
    header, _ = await follow(port, view, resume=g.Resume(view.epoch ^ 2, view.seq, None))
    assert header.resume == "snapshot" and view.as_dict() == content(d)
    kept = g.resume_of(view)
    churn(store, 20, "evict")  # more than the history holds
    await settle(d)
    header, _ = await follow(port, view, resume=kept, until=d.pipelines["felix"].feed.latest.seq)
    assert header.resume == "snapshot" and view.as_dict() == content(d)
    d.shutdown()
