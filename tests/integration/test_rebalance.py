"""ConnectionRebalancingMode=kubernetes against the test bed API server.

The replica count comes from the ``calico-typha`` Service's EndpointSlices and the node
count from the Nodes the felix cache holds, as in Typha; the targets are worked examples of
Typha's formula (``typha/pkg/k8s/rebalance.go``).  With the limit below the connection count, the governor sheds one
connection per ConnectionDropIntervalSecs: gob clients are disconnected, gRPC clients get
GOAWAY and UNAVAILABLE.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

from testbed.apiserver import ApiServer, open_apiserver
from testbed.cluster import Replica, k8s_node, typha_endpoint_slice
from tests.e2e.harness import HANG, daemon_config, running_daemon
from trio_typha.client import grpc as g
from trio_typha.client.typha import TyphaClient, TyphaDisconnected
from trio_typha.config import Config
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.logs import TyphaFormatter
from trio_typha.model import kinds as K
from trio_typha.model.kv import SyncStatus

NODE_PREFIX = "/calico/resources/v3/projectcalico.org/nodes/"


def node(i: int) -> dict[str, Any]:
    return k8s_node(f"node-{i:04d}")


def typha_slice(name: str, addresses: list[str], *, service: str = "calico-typha",
                port_name: str = "calico-typha", unready: int = 0) -> dict[str, Any]:
    """An EndpointSlice as the controller writes it; the last ``unready`` are not ready."""
    return typha_endpoint_slice(
        [Replica(f"typha-{i}", a, 5473, f"node-{i:04d}", ready=i < len(addresses) - unready)
         for i, a in enumerate(addresses)], name=name, service=service, port_name=port_name)


def set_slices(srv: ApiServer, *slices: dict[str, Any]) -> None:
    for old in srv.store.objects(K.ENDPOINT_SLICE, "kube-system"):
        srv.store.delete(K.ENDPOINT_SLICE, "kube-system", old["metadata"]["name"])
    for s in slices:
        srv.store.create(K.ENDPOINT_SLICE, s)


def replicas(n: int, *, unready: int = 0) -> dict[str, Any]:
    return typha_slice("calico-typha-abcde", [f"10.0.0.{i + 1}" for i in range(n)],
                       unready=unready)


# Slices Typha must not count: another Service, and a slice without the named port.
DISTRACTIONS = (typha_slice("kube-dns-xyz", ["10.0.9.1"], service="kube-dns"),
                typha_slice("calico-typha-metrics", ["10.0.8.1"], port_name="metrics"))


async def test_worked_examples_from_nodes_and_endpointslices(tmp_path: Path) -> None:
    async with open_apiserver() as srv:
        srv.store.create_many(K.NODE, (node(i) for i in range(100)))
        # Three replicas, one of them not ready: Typha counts it all the same.
        set_slices(srv, replicas(3, unready=1), *DISTRACTIONS)
        config = load_kube_client_config(Config(kubeconfig=str(srv.kubeconfig_path(tmp_path))))
        async with open_kubernetes_datastore(config) as ds:
            cfg = daemon_config(DatastoreType="kubernetes",
                                ConnectionRebalancingMode="kubernetes",
                                K8sServicePollIntervalSecs="3600")
            async with running_daemon(cfg, datastore=ds) as daemon:
                with trio.fail_after(HANG):
                    await daemon.wait_in_sync()
                poller = daemon.rebalancer
                assert poller is not None and daemon.governor is not None
                assert poller.count_nodes() == 100
                assert await poller.poll_once() == (400, "configured lower limit")
                set_slices(srv, replicas(2), *DISTRACTIONS)
                assert await poller.poll_once() == (484, "fraction+20%")
                assert daemon.governor.limit == 484

                srv.store.create_many(K.NODE, (node(i) for i in range(100, 1000)))
                felix = daemon.pipelines["felix"].feed
                with trio.fail_after(HANG):
                    while felix.cache.count_prefix(NODE_PREFIX) < 1000:  # noqa: ASYNC110
                        await trio.sleep(0.02)
                set_slices(srv, replicas(3), *DISTRACTIONS)
                assert await poller.poll_once() == (2404, "fraction+20%")
                set_slices(srv, replicas(1), *DISTRACTIONS)
                assert await poller.poll_once() == (10000, "lone typha")
                set_slices(srv)
                assert await poller.poll_once() == (10000, "lone typha")
                assert daemon.governor.limit == 10000


async def run_grpc(port: int, name: str, outcomes: dict[str, str],
                   task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    stream = await g.open_stream("127.0.0.1", port)
    async with stream:
        events = g.sync(stream, "felix", hostname=name)
        try:
            async for ev in events:
                if isinstance(ev, g.Finished):
                    task_status.started()
        except g.GrpcError as exc:
            outcomes[name] = f"{exc.code.name}: {exc}"


async def run_gob(port: int, name: str, outcomes: dict[str, str],
                  task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    client = TyphaClient("127.0.0.1", port, syncer_type="felix", hostname=name)
    try:
        await client.wait_for_status(SyncStatus.IN_SYNC)
        task_status.started()
        async for _ in client.batches():
            pass
    except TyphaDisconnected as exc:
        outcomes[name] = f"disconnected: {exc}"
    finally:
        await client.aclose()


async def test_sheds_one_per_interval_down_to_the_target_grpc_with_goaway(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with open_apiserver() as srv:
        set_slices(srv, replicas(3))
        store = MemoryStore()
        store.put_all(generate("tiny"))  # 3 nodes: 4 * (1 + (3*120 // 2) // 100) = 8
        # Not the KDD datastore: the poller finds the API server through KUBECONFIG in the
        # environment, as Typha's does with etcd.
        cfg = daemon_config({"KUBECONFIG": str(srv.kubeconfig_path(tmp_path))},
                            DatastoreType="memory", ConnectionRebalancingMode="kubernetes",
                            K8sServicePollIntervalSecs="0.5", ConnectionDropIntervalSecs="0.3",
                            MaxConnectionsLowerLimit="1", MaxConnectionsUpperLimit="100")
        from trio_typha.datastore.memory import MemoryDatastore
        async with running_daemon(cfg, datastore=MemoryDatastore(store)) as daemon:
            with trio.fail_after(HANG):
                await daemon.wait_in_sync()
            port = daemon.ports["server"]
            outcomes: dict[str, str] = {}
            async with trio.open_nursery() as clients:
                with trio.fail_after(HANG):
                    for i in range(5):
                        await clients.start(run_grpc, port, f"grpc-{i}", outcomes)
                        await clients.start(run_gob, port, f"gob-{i}", outcomes)
                assert daemon.connections.load == 10
                with trio.fail_after(HANG):
                    while daemon.connections.load > 8:  # noqa: ASYNC110
                        await trio.sleep(0.02)
                    while len(outcomes) < 2:  # noqa: ASYNC110
                        await trio.sleep(0.02)
                # Three more drop intervals: nobody else goes.
                await trio.sleep(1.0)
                assert daemon.connections.load == 8 and len(outcomes) == 2
                assert daemon.rebalancer is not None
                assert daemon.rebalancer.active_target == daemon.governor.limit == 8
                clients.cancel_scope.cancel()
    drops = [r for r in caplog.records if r.name == "trio_typha.sessions.connections"
             and "re-balance load" in r.getMessage()]
    assert len(drops) == 2
    assert drops[1].created - drops[0].created >= 0.29
    lines = "\n".join(TyphaFormatter().format(r) for r in caplog.records)
    assert ": Calculated new connection limit. newLimit=8 numNodes=3 numSyncerTypes=4 " \
           'numTyphas=3 reason="fraction+20%"' in lines
    for name, outcome in outcomes.items():
        if name.startswith("grpc"):
            assert outcome.startswith("UNAVAILABLE") and "GOAWAY" in outcome, outcome
        else:
            assert outcome.startswith("disconnected"), outcome
    assert daemon.metrics.connections_dropped._value.get() == 2
