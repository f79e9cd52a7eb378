"""The cluster the e2e suite runs against: a real one, or the embedded test bed.

:func:`open_cluster` gives the tests one interface over both:

* **real** (``TRIO_TYPHA_E2E_KUBECONFIG`` is set, or the current kube-context is
  ``kind-trio-typha``, as ``just kind-up`` leaves it): trio-typha runs as the
  ``calico-typha`` Deployment, the agents are the real calico-node pods (one per node), and
  replicas are reached through ``kubectl port-forward`` and ``kubectl exec``;
* **embedded** (otherwise, e.g. in CI): the test bed's Kubernetes API server in this process,
  ``trio-typha serve`` replica *processes* on it (the Deployment's ``TYPHA_*`` settings, on
  loopback ports) published in the ``calico-typha`` EndpointSlices, and node agents that
  find and use them as calico-node does (:class:`Agent`).

Either way the datastore is read with the official ``kubernetes`` client, and the state each
replica and agent must converge to comes from :mod:`testbed.invariant`.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import trio

from testbed import churn as ch
from testbed import invariant as inv
from testbed.apiserver import ApiServer, open_apiserver
from trio_typha.client.discovery import Connector, EndpointSliceDiscovery, ReconnectPolicy
from trio_typha.client.typha import Disconnected, SyncStatusReceived, TyphaClient
from trio_typha.datastore.k8s_api import KubeApi
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.model import kinds as K
from trio_typha.model.endpoint_slices import SERVICE_NAME_LABEL
from trio_typha.model.kv import SYNCER_TYPES, SyncStatus

KUBECONFIG_ENV = "TRIO_TYPHA_E2E_KUBECONFIG"
KIND_CONTEXT = "kind-trio-typha"
NAMESPACE = "kube-system"
TYPHA_SELECTOR = "k8s-app=calico-typha"
#: Hang protection only (a kind cluster reschedules a deleted pod in seconds).
PATIENCE = 120.0


def real_kubeconfig() -> tuple[str | None, str | None] | None:
    """(kubeconfig path, context) of a real cluster to test, or None for the embedded one."""
    explicit = os.environ.get(KUBECONFIG_ENV)
    if explicit:
        return explicit, None
    paths = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        _, active = kubernetes.config.list_kube_config_contexts(
            config_file=paths.split(os.pathsep)[0])
    except (kubernetes.config.ConfigException, OSError):
        return None
    if active and active.get("name") == KIND_CONTEXT:
        return None, KIND_CONTEXT
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    name: str
    address: str  # host:port where this test reaches its sync port
    process: trio.Process | None = None  # embedded mode
    health: str = ""  # embedded mode: host:port of /connections


@dataclass
class Agent:
    """A node agent that finds and uses Typha as calico-node does: the ``calico-typha``
    Service's EndpointSlices (replicas on its own node first), one felix connection, and on
    losing it a short random delay, then a replica it has not tried yet
    (``trio_typha.client.discovery.Connector``)."""

    name: str
    connector: Connector | None = None  # None: a real calico-node, watched from outside
    client: TyphaClient | None = None
    replica: str = ""
    connects: int = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        assert self.connector is not None
        started = False
        while True:
            address = await self.connector.next_address()
            client = TyphaClient(address.addr, syncer_type="felix", hostname=self.name,
                                 info="trio-typha e2e agent", dial_timeout=5.0)
            synced = False
            async with client:
                async for event in client:
                    if isinstance(event, SyncStatusReceived) and \
                            event.status is SyncStatus.IN_SYNC and not synced:
                        synced = True
                        self.connector.connected()
                        self.client, self.replica = client, address.addr
                        self.connects += 1
                        if not started:
                            started = True
                            task_status.started()
                    elif isinstance(event, Disconnected):
                        break
            self.client, self.replica = None, ""
            if synced:
                self.connector.dropped()
            else:
                self.connector.failed()


class Cluster:
    """What the tests use; see the module docstring."""

    real: bool = False

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.api = api
        self.replicas: list[Replica] = []
        self.agents: list[Agent] = []

    def read(self) -> inv.DatastoreContents:
        return inv.read_kubernetes(self.api)

    @property
    def agent_names(self) -> set[str]:
        return {a.name for a in self.agents}

    async def connections(self) -> dict[str, set[str]]:
        """Replica name -> hostnames of its felix clients (from its /connections)."""
        out = {}
        for r in list(self.replicas):
            doc = await self._connections_document(r)
            out[r.name] = {row["hostname"] for row in doc["connections"]
                           if row.get("syncer_type") == "felix" and row.get("hostname")}
        return out

    async def _connections_document(self, replica: Replica) -> dict[str, Any]:
        raise NotImplementedError

    async def delete_replica(self, replica: Replica) -> None:
        raise NotImplementedError

    def churn(self, **config: Any) -> ch.Churn:
        return ch.Churn(self.api, ch.ChurnConfig(**config))

    def agent_holders(self) -> list[tuple[str, str, Any]]:
        """Agents whose state this test can see (embedded: all; real: none, calico-node's
        state is inside Felix)."""
        return [(f"agent {a.name}", "felix", a.client) for a in self.agents
                if a.client is not None]

    @asynccontextmanager
    async def followers(self) -> AsyncIterator[Callable[[], list[tuple[str, str, Any]]]]:
        """One gob client per syncer type on every replica (a fresh client's snapshot is the
        replica's cache); yields the holders for :func:`testbed.invariant.check`."""
        holders: dict[tuple[str, str], TyphaClient] = {}

        async def follow(r: Replica, syncer: str, *, task_status: trio.TaskStatus[None]) -> None:
            async with TyphaClient(r.address, syncer_type=syncer,
                                   hostname=f"e2e-follower-{syncer}") as client:
                holders[(r.name, syncer)] = client
                await client.wait_for_status()
                task_status.started()
                async for _ in client:
                    pass

        async with trio.open_nursery() as nursery:
            for r in list(self.replicas):
                for syncer in SYNCER_TYPES:
                    await nursery.start(follow, r, syncer)
            yield lambda: [(f"replica {name} {syncer}", syncer, c)
                           for (name, syncer), c in holders.items()
                           if any(r.name == name for r in self.replicas)]
            nursery.cancel_scope.cancel()


# --- embedded: test bed API server + trio-typha processes -------------------------------------

class EmbeddedCluster(Cluster):
    def __init__(self, api: kubernetes.client.ApiClient, srv: ApiServer, kubeconfig: Path
                 ) -> None:
        super().__init__(api)
        self.srv = srv
        self.kubeconfig = kubeconfig
        self.discovery = kubernetes.client.DiscoveryV1Api(api)

    async def start_replica(self, nursery: trio.Nursery, index: int) -> Replica:
        port, health = free_port(), free_port()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "CALICO_API_GROUP": f"{K.CALICO_CRD_GROUP}/v1",
               # As the Deployment sets them, but on loopback ports of this machine.
               "TYPHA_DATASTORETYPE": "kubernetes", "TYPHA_HEALTHENABLED": "true",
               "TYPHA_LOGFILEPATH": "none", "TYPHA_LOGSEVERITYSYS": "none",
               "TYPHA_LOGSEVERITYSCREEN": "warning",
               "TYPHA_SERVERHOST": "127.0.0.1", "TYPHA_SERVERPORT": str(port),
               "TYPHA_HEALTHHOST": "127.0.0.1", "TYPHA_HEALTHPORT": str(health),
               "TYPHA_SHUTDOWNTIMEOUTSECS": "5",
               "TYPHA_SHUTDOWNCONNECTIONDROPINTERVALMAXSECS": "0.05",
               "TYPHA_SERVERPINGINTERVALSECS": "1"}
        process = await nursery.start(partial_process(
            [sys.executable, "-m", "trio_typha", "serve"], env))
        replica = Replica(f"replica-{index}", f"127.0.0.1:{port}", process,
                          f"127.0.0.1:{health}")
        await _wait_ready(replica)
        # Ready: published as the endpoints controller would, on "its" node.
        await trio.to_thread.run_sync(
            self.discovery.create_namespaced_endpoint_slice, NAMESPACE,
            _endpoint_slice(replica.name, port, f"node-{index}"))
        return replica

    async def _connections_document(self, replica: Replica) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=10) as http:
            resp = await http.get(f"http://{replica.health}/connections")
        resp.raise_for_status()
        return resp.json()  # type: ignore[no-any-return]

    async def delete_replica(self, replica: Replica) -> None:
        """As a pod is deleted: out of the EndpointSlices, SIGTERM (graceful drain), exit."""
        self.replicas.remove(replica)
        await trio.to_thread.run_sync(
            self.discovery.delete_namespaced_endpoint_slice, replica.name, NAMESPACE)
        assert replica.process is not None
        replica.process.send_signal(signal.SIGTERM)
        with trio.fail_after(PATIENCE):
            await replica.process.wait()


def partial_process(cmd: list[str], env: dict[str, str]
                    ) -> Callable[..., Any]:
    async def run(*, task_status: trio.TaskStatus[trio.Process]) -> None:
        await trio.run_process(cmd, env=env, task_status=task_status, check=False)
    return run


async def _wait_ready(replica: Replica) -> None:
    with trio.fail_after(PATIENCE):
        while True:
            if replica.process is not None and replica.process.returncode is not None:
                raise RuntimeError(f"{replica.name} exited with {replica.process.returncode}")
            try:
                async with httpx.AsyncClient(timeout=2) as http:
                    if (await http.get(f"http://{replica.health}/readiness")).status_code == 200:
                        return
            except httpx.HTTPError:
                pass
            await trio.sleep(0.1)


NODES = 4  # as kind-config.yaml: a control plane and three workers
#: Agents reconnect after uniform(0, this) seconds (calico-node's spread, kept short here).
RECONNECT_SPREAD = 0.5


def _endpoint_slice(name: str, port: int, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {SERVICE_NAME_LABEL: "calico-typha"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True},
                           "nodeName": node}],
            "ports": [{"name": "calico-typha", "port": port, "protocol": "TCP"}]}


def _node(i: int) -> dict[str, Any]:
    name = f"node-{i}"
    ip = f"10.0.0.{10 + i}"
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {"projectcalico.org/IPv4Address": f"{ip}/24"}},
            "spec": {"podCIDR": f"192.168.{i}.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}


@asynccontextmanager
async def embedded_cluster(tmp_path: Path, *, replicas: int = 3, agents: int = 6
                           ) -> AsyncIterator[EmbeddedCluster]:
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as srv, \
            AsyncExitStack() as stack:
        kubeconfig = srv.kubeconfig_path(tmp_path)
        api = stack.enter_context(ch.api_client(kubeconfig))
        core = kubernetes.client.CoreV1Api(api)
        for i in range(NODES):
            await trio.to_thread.run_sync(core.create_node, _node(i))
        cluster = EmbeddedCluster(api, srv, kubeconfig)
        nursery = await stack.enter_async_context(trio.open_nursery())
        async with trio.open_nursery() as starting:
            async def start(i: int) -> None:
                cluster.replicas.append(await cluster.start_replica(nursery, i))
            for i in range(replicas):
                starting.start_soon(start, i)
        cluster.replicas.sort(key=lambda r: r.name)
        kube = await stack.enter_async_context(
            KubeApi(load_kube_client_config({"KUBECONFIG": str(kubeconfig)})))
        policy = ReconnectPolicy(reconnect_delay_max=RECONNECT_SPREAD, backoff_initial=0.1,
                                 backoff_max=1.0)
        for i in range(agents):
            name = f"node-{i}"
            connector = Connector(EndpointSliceDiscovery(kube, node_name=name), policy,
                                  random.Random(i))
            agent = Agent(name, connector)
            cluster.agents.append(agent)
            await nursery.start(agent.run)
        try:
            yield cluster
        finally:
            for r in cluster.replicas:
                if r.process is not None and r.process.returncode is None:
                    r.process.send_signal(signal.SIGTERM)
            nursery.cancel_scope.cancel()


# --- real: a kind (or any) cluster with trio-typha as its calico-typha ------------------------

class RealCluster(Cluster):
    real = True

    def __init__(self, api: kubernetes.client.ApiClient, kubectl: list[str]) -> None:
        super().__init__(api)
        self.kubectl = kubectl  # kubectl with --kubeconfig / --context
        self.core = kubernetes.client.CoreV1Api(api)
        self._forwards: dict[str, subprocess.Popen[str]] = {}

    async def refresh(self) -> None:
        """Replicas = Ready calico-typha pods, each through a port-forward; agents = nodes."""
        pods = await trio.to_thread.run_sync(partial_call(
            self.core.list_namespaced_pod, NAMESPACE, label_selector=TYPHA_SELECTOR))
        ready = [p for p in pods.items if p.metadata.deletion_timestamp is None and any(
            c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        replicas = []
        for p in sorted(ready, key=lambda p: p.metadata.name):
            if p.metadata.name not in self._forwards:
                self._forwards[p.metadata.name] = await trio.to_thread.run_sync(
                    self._port_forward, p.metadata.name)
            proc = self._forwards[p.metadata.name]
            replicas.append(Replica(p.metadata.name, proc.address))  # type: ignore[attr-defined]
        for gone in set(self._forwards) - {r.name for r in replicas}:
            proc = self._forwards.pop(gone)
            proc.kill()
            proc.wait()
        self.replicas = replicas
        nodes = await trio.to_thread.run_sync(self.core.list_node)
        self.agents = [Agent(n.metadata.name) for n in nodes.items]

    def _port_forward(self, pod: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([*self.kubectl, "-n", NAMESPACE, "port-forward", f"pod/{pod}",
                                 ":5473"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 5473"
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        if found is None:
            proc.kill()
            raise RuntimeError(f"kubectl port-forward {pod}: {line!r}")
        proc.address = f"127.0.0.1:{found[1]}"  # type: ignore[attr-defined]
        return proc

    async def connections(self) -> dict[str, set[str]]:
        # Pods come and go (a deleted replica's successor, rebalancing): look again each time.
        await self.refresh()
        return await super().connections()

    async def _connections_document(self, replica: Replica) -> dict[str, Any]:
        script = ("import urllib.request as u; print(u.urlopen("
                  "'http://localhost:9098/connections', timeout=10).read().decode())")
        out = await trio.run_process([*self.kubectl, "-n", NAMESPACE, "exec", replica.name,
                                      "--", "python", "-c", script], capture_stdout=True)
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    async def delete_replica(self, replica: Replica) -> None:
        await trio.to_thread.run_sync(self.core.delete_namespaced_pod, replica.name, NAMESPACE)
        self.replicas = [r for r in self.replicas if r.name != replica.name]
        forward = self._forwards.pop(replica.name, None)
        if forward is not None:
            forward.kill()
            forward.wait()

    def close(self) -> None:
        for proc in self._forwards.values():
            proc.kill()
            proc.wait()
        self._forwards.clear()


def partial_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    return lambda: fn(*args, **kwargs)


@asynccontextmanager
async def real_cluster(kubeconfig: str | None, context: str | None
                       ) -> AsyncIterator[RealCluster]:
    kubectl = ["kubectl"]
    if kubeconfig:
        kubectl += ["--kubeconfig", kubeconfig]
    if context:
        kubectl += ["--context", context]
    with ch.api_client(kubeconfig, context) as api:
        cluster = RealCluster(api, kubectl)
        try:
            await cluster.refresh()
            yield cluster
        finally:
            cluster.close()


@asynccontextmanager
async def open_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    target = real_kubeconfig()
    if target is not None:
        async with real_cluster(*target) as real:
            yield real
    else:
        async with embedded_cluster(tmp_path) as embedded:
            yield embedded
