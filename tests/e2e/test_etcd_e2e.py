"""End to end on etcd: v3 resources written to a real etcd -> trio-typha -> grpcio clients.

Resources are stored as libcalico's etcdv3 backend stores them (``put_resource``); one real
grpcio client per syncer type must receive what its syncer derives from them, then the
updates and deletions, and end up holding exactly the daemon's cache.
"""

from __future__ import annotations

import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio

from testbed.cluster import v3, wep_name
from tests.e2e.harness import HANG, converge, daemon_config, running_daemon, wait_readiness
from tests.etcd_server import run_etcd
from tests.grpcio_sync import GrpcioSync, grpcio_sync
from trio_typha.daemon import Daemon
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES

pytestmark = pytest.mark.etcd

V3_ROOT = "/calico/resources/v3/projectcalico.org"


NODE = v3("Node", "node-1", {"bgp": {"ipv4Address": "10.0.0.11/24"},
                             "orchRefs": [{"nodeName": "node-1", "orchestrator": "k8s"}]})
WEP = v3("WorkloadEndpoint", wep_name("node-1", "web-1"),
         {"orchestrator": "k8s", "node": "node-1", "workload": "", "pod": "web-1",
          "endpoint": "eth0", "interfaceName": "cali0123456789a",
          "ipNetworks": ["10.244.1.5/32"], "profiles": ["kns.prod"]},
         namespace="prod", labels={"app": "web", "projectcalico.org/namespace": "prod",
                                   "projectcalico.org/orchestrator": "k8s"})
PROFILE = v3("Profile", "kns.prod",
             {"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}],
              "labelsToApply": {"pcns.team": "a"}})
NP = v3("NetworkPolicy", "np1",
        {"tier": "default", "order": 100, "selector": "app == 'web'", "types": ["Ingress"],
         "ingress": [{"action": "Allow", "protocol": "TCP",
                      "destination": {"ports": [8080]}}]}, namespace="prod")
GNP = v3("GlobalNetworkPolicy", "gnp1",
         {"tier": "default", "order": 10, "selector": "all()", "types": ["Egress"],
          "egress": [{"action": "Deny", "destination": {"nets": ["169.254.169.254/32"]}}]})
POOL = v3("IPPool", "pool1", {"cidr": "10.244.0.0/16", "ipipMode": "Always",
                              "natOutgoing": True, "blockSize": 26, "nodeSelector": "all()"})
PEER = v3("BGPPeer", "peer1", {"peerIP": "192.0.2.1", "asNumber": 64513})
STATUS = v3("CalicoNodeStatus", "status1",
            {"node": "node-1", "classes": ["Agent", "BGP"], "updatePeriodSeconds": 10})

WEP_KEY = "/calico/v1/host/node-1/workload/k8s/prod%2fweb-1/endpoint/eth0"
NODE_V3_KEY = f"{V3_ROOT}/nodes/node-1"
POOL_KEY = "/calico/v1/ipam/v4/pool/10.244.0.0-16"
PEER_KEY = f"{V3_ROOT}/bgppeers/peer1"
NP_KEY = "/calico/v1/policy/NetworkPolicy/prod/np1"
GNP_KEY = "/calico/v1/policy/GlobalNetworkPolicy//gnp1"
PROFILE_KEYS = ("/calico/v1/policy/profile/kns.prod/rules",
                "/calico/v1/policy/profile/kns.prod/labels",
                f"{V3_ROOT}/profiles/kns.prod")
STATUS_KEY = f"{V3_ROOT}/caliconodestatuses/status1"

# What each syncer derives from the objects above (a subset: the rest is compared with the
# daemon's caches).
EXPECTED: dict[str, tuple[str, ...]] = {
    "felix": (WEP_KEY, "/calico/v1/host/node-1/bird_ip", NODE_V3_KEY, *PROFILE_KEYS, NP_KEY,
              GNP_KEY, POOL_KEY, PEER_KEY),
    "bgp": (NODE_V3_KEY, POOL_KEY, PEER_KEY),
    "tunnel-ip-allocation": (NODE_V3_KEY, POOL_KEY),
    "node-status": (STATUS_KEY,),
}
# Keys a syncer must not get (what the others are for).
NOT_EXPECTED: dict[str, tuple[str, ...]] = {
    "felix": (STATUS_KEY,),
    "bgp": (WEP_KEY, GNP_KEY, STATUS_KEY),
    "tunnel-ip-allocation": (WEP_KEY, PEER_KEY, STATUS_KEY),
    "node-status": (WEP_KEY, NODE_V3_KEY, POOL_KEY),
}


def decoded(client: GrpcioSync, key: str) -> Any:
    return json.loads(client.kvs[key].value)


async def clients(stack: AsyncExitStack, daemon: Daemon) -> dict[str, GrpcioSync]:
    out = {}
    for syncer in SYNCER_TYPES:
        out[syncer] = await stack.enter_async_context(
            grpcio_sync(daemon.ports["server"], syncer))
    return out


@pytest.mark.parametrize("injected", [pytest.param(True, id="injected-datastore"),
                                      pytest.param(False, id="from-config")])
async def test_v3_resources_updates_and_deletes_reach_each_syncers_client(
        tmp_path: Path, injected: bool) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        # Some objects exist before the daemon starts (they come with the snapshot)...
        for obj in (NODE, POOL, PROFILE):
            await c.put_resource(obj)
        if injected:
            cfg = daemon_config(DatastoreType="etcdv3")
            ds: EtcdDatastore | None = EtcdDatastore(
                etcd.config, backoff_initial=0.05, backoff_max=0.5)
        else:
            cfg = daemon_config({"TYPHA_DATASTORETYPE": "etcdv3",
                                 "TYPHA_ETCDENDPOINTS": etcd.url})
            ds = None
        async with running_daemon(cfg, datastore=ds) as d, AsyncExitStack() as stack:
            assert d.datastore.name == "etcdv3"
            with trio.fail_after(HANG):
                await d.wait_in_sync()
            await wait_readiness(d, 200)
            syncers = await clients(stack, d)
            with trio.fail_after(HANG):
                for client in syncers.values():
                    await client.wait_until(lambda client=client: client.in_sync)
            assert NODE_V3_KEY in syncers["felix"].kvs and POOL_KEY in syncers["bgp"].kvs

            # ...the rest arrive as live updates.
            t_wep = time.monotonic()
            revisions = {obj["kind"]: await c.put_resource(obj)
                         for obj in (WEP, NP, GNP, PEER, STATUS)}
            await all_have(syncers, EXPECTED)
            # Reported, not asserted (speed belongs in bench/): run with -s to see it.
            print(f"\netcd: WorkloadEndpoint put -> felix client "
                  f"{(syncers['felix'].kvs[WEP_KEY].at - t_wep) * 1e3:.1f} ms")
            await all_converge(syncers, d)
            for syncer, keys in NOT_EXPECTED.items():
                assert not any(k in syncers[syncer].kvs for k in keys), syncer
            wep = decoded(syncers["felix"], WEP_KEY)
            assert wep["ipv4_nets"] == ["10.244.1.5/32"] and wep["profile_ids"] == ["kns.prod"]
            assert decoded(syncers["felix"], PROFILE_KEYS[1]) == {"pcns.team": "a"}
            assert decoded(syncers["felix"], GNP_KEY)["order"] == 10
            assert decoded(syncers["tunnel-ip-allocation"], POOL_KEY)["cidr"] == "10.244.0.0/16"
            assert decoded(syncers["node-status"], STATUS_KEY)["spec"]["node"] == "node-1"
            assert syncers["felix"].kvs["/calico/v1/host/node-1/bird_ip"].value == b"10.0.0.11"
            # etcd mode: a KV's revision is the etcd ModRevision of its object.
            assert syncers["bgp"].kvs[PEER_KEY].revision == str(revisions["BGPPeer"])
            assert syncers["felix"].kvs[WEP_KEY].revision == str(revisions["WorkloadEndpoint"])

            # Updates.
            await c.put_resource(with_spec(GNP, order=20))
            await c.put_resource(with_spec(WEP, ipNetworks=["10.244.1.6/32"]))
            await c.put_resource(with_spec(PEER, asNumber=64599))
            await c.put_resource(with_spec(STATUS, updatePeriodSeconds=30))
            with trio.fail_after(HANG):
                await syncers["felix"].wait_until(lambda: (
                    decoded(syncers["felix"], GNP_KEY)["order"] == 20
                    and decoded(syncers["felix"], WEP_KEY)["ipv4_nets"] == ["10.244.1.6/32"]))
                for syncer in ("felix", "bgp"):
                    await syncers[syncer].wait_until(lambda s=syncers[syncer]: (
                        decoded(s, PEER_KEY)["spec"]["asNumber"] == 64599))
                await syncers["node-status"].wait_until(lambda: decoded(
                    syncers["node-status"], STATUS_KEY)["spec"]["updatePeriodSeconds"] == 30)
            await all_converge(syncers, d)

            # Deletions.
            for obj in (WEP, NP, GNP, PEER, STATUS, POOL, PROFILE):
                md = obj["metadata"]
                await c.delete_resource(K.calico_kind(obj["kind"]), md.get("namespace", ""),
                                        md["name"])
            gone = {"felix": (WEP_KEY, NP_KEY, GNP_KEY, PEER_KEY, POOL_KEY, *PROFILE_KEYS),
                    "bgp": (PEER_KEY, POOL_KEY), "tunnel-ip-allocation": (POOL_KEY,),
                    "node-status": (STATUS_KEY,)}
            with trio.fail_after(HANG):
                for syncer, keys in gone.items():
                    await syncers[syncer].wait_until(
                        lambda s=syncers[syncer], keys=keys: not any(k in s.kvs for k in keys))
            assert NODE_V3_KEY in syncers["tunnel-ip-allocation"].kvs  # the node stays
            assert not syncers["node-status"].kvs
            await all_converge(syncers, d)
            with trio.fail_after(HANG):
                await syncers["felix"].wait_until(lambda: syncers["felix"].pings >= 3)
            assert all(s.end is None for s in syncers.values())


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**obj, "spec": {**obj["spec"], **spec}}


async def all_have(syncers: dict[str, GrpcioSync], expected: dict[str, tuple[str, ...]]
                   ) -> None:
    with trio.fail_after(HANG):
        for syncer, keys in expected.items():
            s = syncers[syncer]
            await s.wait_until(lambda s=s, keys=keys: all(k in s.kvs for k in keys))


async def all_converge(syncers: dict[str, GrpcioSync], daemon: Daemon) -> None:
    for client in syncers.values():
        await converge(client, daemon)
