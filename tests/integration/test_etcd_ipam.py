"""etcd mode end to end for IPAM: blocks and affinities written at their v1 keys, as Calico's
IPAM stores them, reach the felix and BGP caches with Typha's keys, values and revisions
(real etcd, the etcd datastore, the syncer pipelines with Typha's validation filter).

``fail_after`` only guards against hangs; nothing here asserts on timing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from tests.etcd_server import run_etcd
from trio_typha.cache.core import Breadcrumb
from trio_typha.cache.feed import CacheFeed
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.model import validation
from trio_typha.model.kv import UpdateType
from trio_typha.model.syncers import DatastoreMode, syncer_definition
from trio_typha.syncer.pipeline import SyncerPipeline

pytestmark = pytest.mark.etcd

WAIT = 20  # hang protection only

B1 = "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26"
B2 = "/calico/ipam/v2/assignment/ipv6/block/fd00:1::-122"
# Stored at a path with host bits set; Calico reads (and Typha sends) the masked key.
B3_STORED_AT = "/calico/ipam/v2/assignment/ipv4/block/10.244.2.5-26"
B3 = "/calico/ipam/v2/assignment/ipv4/block/10.244.2.0-26"
A1 = "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26"
A2 = "/calico/ipam/v2/host/node-2/ipv4/block/10.244.2.0-26"
HANDLE = "/calico/ipam/v2/handle/k8s-pod-network.abc"
POOL_KEY = "/calico/v1/ipam/v4/pool/10.244.0.0-16"

# Values as Calico's IPAM writes them: Typha sends them back unchanged.
BLOCK1 = (b'{"cidr":"10.244.1.0/26","affinity":"host:node-1",'
          b'"affinity_claim_time":"2024-05-01T10:00:00Z","allocations":[0,null,1],'
          b'"unallocated":[1,3,4],"attributes":[{"handle_id":"ipip-tunnel-addr-node-1",'
          b'"secondary":{"node":"node-1","type":"ipipTunnelAddress"}},'
          b'{"handle_id":"k8s-pod-network.abc","secondary":{"namespace":"prod",'
          b'"node":"node-1","pod":"web-1"}}],"sequenceNumber":%d,'
          b'"sequenceNumberForAllocation":{"0":5,"2":6},"deleted":false}')
BLOCK2 = (b'{"cidr":"fd00:1::/122","affinity":"host:node-2","allocations":[null],'
          b'"unallocated":[0],"attributes":[],"sequenceNumber":0,'
          b'"sequenceNumberForAllocation":{},"deleted":false}')
# Hand-written: spaces, a field the struct lacks.  Expected bytes from Calico v3.32.1.
BLOCK3_STORED = (b'{ "cidr": "10.244.2.0/26", "affinity": "host:node-2", '
                 b'"allocations": [null, 0], "unallocated": [0], "attributes": '
                 b'[{"handle_id": "k8s-pod-network.x", "secondary": {"pod": "a<b"}}], '
                 b'"sequenceNumber": 1, "note": "not in the struct" }')
BLOCK3_SENT = (b'{"cidr":"10.244.2.0/26","affinity":"host:node-2","allocations":[null,0],'
               b'"unallocated":[0],"attributes":[{"handle_id":"k8s-pod-network.x",'
               b'"secondary":{"pod":"a\\u003cb"}}],"sequenceNumber":1,'
               b'"sequenceNumberForAllocation":null,"deleted":false}')
CONFIRMED = b'{"state":"confirmed","deleted":false}'

POOL = {"apiVersion": "projectcalico.org/v3", "kind": "IPPool",
        "metadata": {"name": "default-ipv4"},
        "spec": {"cidr": "10.244.0.0/16", "ipipMode": "Always", "natOutgoing": True}}


def ipam_view(feed: CacheFeed) -> dict[str, tuple[bytes | None, str]]:
    """The IPAM keys of a cache, with value and revision."""
    out = {}
    for key in feed.cache.values_by_key():
        if key.startswith("/calico/ipam/"):
            upd = feed.cache.get(key)
            assert upd is not None
            out[key] = (upd.value, upd.revision)
    return out


def ipam_updates(since: Breadcrumb) -> list[tuple[str, UpdateType, str]]:
    """The IPAM updates published after ``since``: key, type, revision."""
    out = []
    crumb = since
    while crumb.next is not None:
        crumb = crumb.next
        out += [(u.key, u.update_type, u.revision) for u in crumb.updates
                if u.key.startswith("/calico/ipam/")]
    return out


async def wait_for(feed: CacheFeed, predicate: Callable[[], bool]) -> None:
    crumb = feed.latest
    with trio.fail_after(WAIT):
        while not predicate():
            crumb = await feed.wait_next(crumb)


async def test_blocks_and_affinities_reach_felix_and_bgp(tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        rev = {B1: await c.put(B1, BLOCK1 % 7), B2: await c.put(B2, BLOCK2),
               A1: await c.put(A1, CONFIRMED),
               A2: await c.put(A2, b"")}  # affinities used to be stored without a value
        await c.put(HANDLE, b'{"block":{"10.244.1.0/26":1},"deleted":false}')
        await c.put("/calico/ipam/v2/assignment/ipv4/block/not-a-cidr", b"{}")
        await c.put_resource(POOL)

        ds = EtcdDatastore(etcd.config, backoff_initial=0.05, backoff_max=0.5)
        feeds = {t: CacheFeed(t) for t in ("felix", "bgp")}
        async with trio.open_nursery() as nursery:
            await nursery.start(ds.run)
            for syncer, feed in feeds.items():
                pipeline = SyncerPipeline(syncer_definition(syncer, DatastoreMode.ETCD), ds,
                                          feed, validator=validation.ValidationFilter())
                await nursery.start(pipeline.run)
            with trio.fail_after(WAIT):
                for feed in feeds.values():
                    await feed.wait_in_sync()
            felix, bgp = feeds["felix"], feeds["bgp"]

            # The initial list: revisions are the entries' mod_revisions.
            assert ipam_view(felix) == {B1: (BLOCK1 % 7, str(rev[B1])),
                                        B2: (BLOCK2, str(rev[B2]))}
            assert ipam_view(bgp) == {
                A1: (CONFIRMED, str(rev[A1])),
                A2: (b'{"state":"","deleted":false}', str(rev[A2]))}
            for feed in feeds.values():  # v3 resources still arrive beside them
                assert POOL_KEY in feed.cache.values_by_key()

            # Watched changes: updates, a new entry at a non-canonical path, deletions, and
            # IPAM handle churn that neither syncer reads.
            marks = {t: feed.latest for t, feed in feeds.items()}
            rev[B1] = await c.put(B1, BLOCK1 % 8)
            rev[B3] = await c.put(B3_STORED_AT, BLOCK3_STORED)
            await c.delete(B2)
            await c.put(HANDLE, b'{"block":{},"deleted":true}')
            rev[A1] = await c.put(A1, b'{"state":"pendingDeletion","deleted":true}')
            a2_confirmed = await c.put(A2, b'{"state":"confirmed"}')
            await c.delete(A2)

            expected_felix = {B1: (BLOCK1 % 8, str(rev[B1])), B3: (BLOCK3_SENT, str(rev[B3]))}
            expected_bgp = {A1: (b'{"state":"pendingDeletion","deleted":true}', str(rev[A1]))}
            await wait_for(felix, lambda: ipam_view(felix) == expected_felix)
            await wait_for(bgp, lambda: ipam_view(bgp) == expected_bgp)
            # A deletion carries no revision: Go Typha sends DELETED "" (Calico's watcher
            # cache sends the deleted key alone).
            assert ipam_updates(marks["felix"]) == [
                (B1, UpdateType.UPDATED, str(rev[B1])), (B3, UpdateType.NEW, str(rev[B3])),
                (B2, UpdateType.DELETED, "")]
            assert ipam_updates(marks["bgp"]) == [
                (A1, UpdateType.UPDATED, str(rev[A1])),
                (A2, UpdateType.UPDATED, str(a2_confirmed)),
                (A2, UpdateType.DELETED, "")]
            nursery.cancel_scope.cancel()
