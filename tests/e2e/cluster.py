"""The cluster the e2e suite runs against: a real one, or the embedded test bed.

:func:`open_cluster` gives the tests one interface over both:

* **real** (``TRIO_TYPHA_E2E_CONTEXT`` names a kube-context, ``TRIO_TYPHA_E2E_KUBECONFIG``
  names a kubeconfig with context ``kind-trio-typha``, or the current kube-context is
  ``kind-trio-typha``, as ``just kind-up`` leaves it): trio-typha runs as the
  ``calico-typha`` Deployment, the agents are the real calico-node pods (one per node), and
  replicas are reached through ``kubectl port-forward`` and ``kubectl exec`` (under mutual
  TLS, ``just mtls=1 kind-up``, with calico-node's certificate: :mod:`tests.e2e.cluster_tls`);
* **embedded** (otherwise, e.g. in CI): the test bed's Kubernetes API server in this process,
  ``trio-typha serve`` replica *processes* on it (the Deployment's ``TYPHA_*`` settings, on
  loopback ports) published in the ``calico-typha`` EndpointSlices, and node agents that
  find and use them as calico-node does (:class:`testbed.fleet.Agent`).

Either way the datastore is read with the official ``kubernetes`` client, and the state each
replica and agent must converge to comes from :mod:`testbed.invariant`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import httpx
import kubernetes
import trio

from testbed import churn as ch
from testbed import invariant as inv
from testbed.apiserver import ApiServer, open_apiserver
from testbed.cluster import TYPHA_NAMESPACE, k8s_node, typha_endpoint_slice
from testbed.fleet import AgentGroup, AgentSpec, DiscoverySpec
from testbed.replica import ReplicaProcess, free_port
from tests.e2e.cluster_tls import ClientTLS, calico_node_tls, container, env
from trio_typha.client.discovery import ReconnectPolicy
from trio_typha.client.typha import TyphaClient
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES

KUBECONFIG_ENV = "TRIO_TYPHA_E2E_KUBECONFIG"
CONTEXT_ENV = "TRIO_TYPHA_E2E_CONTEXT"
KIND_CONTEXT = "kind-trio-typha"
NAMESPACE = TYPHA_NAMESPACE
TYPHA_SELECTOR = "k8s-app=calico-typha"
#: Hang protection only (a kind cluster reschedules a deleted pod in seconds).
PATIENCE = 120.0


class RefusedContext(RuntimeError):
    """The kube-context named for the suite is not in the kubeconfig: nothing is touched."""


def real_kubeconfig() -> tuple[str | None, str | None] | None:
    """(kubeconfig path, context) of a real cluster to test, or None for the embedded one.

    A real cluster is only ever reached through a context named here: the one given in
    ``TRIO_TYPHA_E2E_CONTEXT`` (``just context=NAME e2e``), else ``kind-trio-typha`` when
    ``TRIO_TYPHA_E2E_KUBECONFIG`` names a kubeconfig or the current context is the kind
    cluster's.  Whatever else the current context is, it is never used."""
    explicit = os.environ.get(KUBECONFIG_ENV) or None
    named = os.environ.get(CONTEXT_ENV) or None
    paths = explicit or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=paths)
    except (kubernetes.config.ConfigException, OSError):
        contexts, active = [], None
    if explicit or named:
        context = named or KIND_CONTEXT
        if context not in {c.get("name") for c in contexts or []}:
            raise RefusedContext(f"kubeconfig {paths} has no context {context}: the e2e suite "
                                 f"runs only against a context named in {CONTEXT_ENV} "
                                 f"(default {KIND_CONTEXT})")
        return explicit, context
    if active and active.get("name") == KIND_CONTEXT:
        return None, KIND_CONTEXT
    return None


class Replica(Protocol):
    """A replica as the tests reach it: embedded, a :class:`testbed.replica.ReplicaProcess`;
    real, a :class:`ForwardedReplica`."""

    @property
    def name(self) -> str: ...

    @property
    def address(self) -> str: ...  # host:port where this test reaches its sync port


@dataclass
class ForwardedReplica:
    name: str
    address: str  # kubectl port-forward's end on this machine


class Cluster:
    """What the tests use; see the module docstring."""

    real: bool = False

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.api = api
        self.replicas: list[Replica] = []
        self.agent_names: set[str] = set()
        #: How this test's own clients present themselves where Typha requires mutual TLS.
        self.client_tls: ClientTLS | None = None

    def read(self) -> inv.DatastoreContents:
        return inv.read_kubernetes(self.api)

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
        """Agents whose state this test can see (embedded: all in sync; real: none,
        calico-node's state is inside Felix)."""
        return []

    @asynccontextmanager
    async def followers(self) -> AsyncIterator[Callable[[], list[tuple[str, str, Any]]]]:
        """One gob client per syncer type on every replica (a fresh client's snapshot is the
        replica's cache); yields the holders for :func:`testbed.invariant.check`."""
        holders: dict[tuple[str, str], TyphaClient] = {}

        async def follow(r: Replica, syncer: str, *, task_status: trio.TaskStatus[None]) -> None:
            tls = self.client_tls
            async with TyphaClient(r.address, syncer_type=syncer,
                                   hostname=f"e2e-follower-{syncer}",
                                   ssl_context=tls.ssl_context if tls else None,
                                   server_cn=tls.server_cn if tls else "") as client:
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
        self.agents: AgentGroup | None = None

    async def start_replica(self, index: int) -> ReplicaProcess:
        # As the Deployment sets it up, but on loopback ports of this machine.
        replica = ReplicaProcess(
            f"replica-{index}", "127.0.0.1", free_port(), free_port(), f"node-{index}",
            settings={"CALICO_API_GROUP": f"{K.CALICO_CRD_GROUP}/v1",
                      "TYPHA_LOGFILEPATH": "none", "TYPHA_LOGSEVERITYSYS": "none",
                      "TYPHA_SHUTDOWNTIMEOUTSECS": "5", "TYPHA_SERVERPINGINTERVALSECS": "1"})
        await replica.start(str(self.kubeconfig))
        with trio.fail_after(PATIENCE):
            await replica.wait_ready()
        # Ready: published as the endpoints controller would, on "its" node.
        await trio.to_thread.run_sync(
            self.discovery.create_namespaced_endpoint_slice, NAMESPACE,  # type: ignore[arg-type]
            typha_endpoint_slice([replica.replica()], name=replica.name))
        return replica

    def agent_holders(self) -> list[tuple[str, str, Any]]:
        agents = self.agents.agents if self.agents is not None else []
        return [(f"agent {a.spec.name}", a.spec.syncer, a) for a in agents if a.in_sync]

    async def _connections_document(self, replica: Replica) -> dict[str, Any]:
        assert isinstance(replica, ReplicaProcess)
        async with httpx.AsyncClient(timeout=10) as http:
            resp = await http.get(f"http://{replica.health}/connections")
        resp.raise_for_status()
        return resp.json()  # type: ignore[no-any-return]

    async def delete_replica(self, replica: Replica) -> None:
        """As a pod is deleted: out of the EndpointSlices, SIGTERM (graceful drain), exit."""
        assert isinstance(replica, ReplicaProcess)
        self.replicas.remove(replica)
        await trio.to_thread.run_sync(
            self.discovery.delete_namespaced_endpoint_slice, replica.name, NAMESPACE)
        await replica.stop(grace=PATIENCE)


NODES = 4  # as kind-config.yaml: a control plane and three workers
#: Agents reconnect after uniform(0, this) seconds (calico-node's spread, kept short here).
RECONNECT_SPREAD = 0.5


def _node(i: int) -> dict[str, Any]:
    return k8s_node(f"node-{i}", f"10.0.0.{10 + i}", pod_cidr=f"192.168.{i}.0/24")


@asynccontextmanager
async def embedded_cluster(tmp_path: Path, *, replicas: int = 3, agents: int = 6
                           ) -> AsyncIterator[EmbeddedCluster]:
    """The replicas, then agents that find and use them as calico-node does
    (:class:`testbed.fleet.Agent`: the ``calico-typha`` EndpointSlices, replicas on its own
    node first, one felix connection, and on losing it a short random delay, then a replica
    it has not tried yet)."""
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as srv, \
            AsyncExitStack() as stack:
        kubeconfig = srv.kubeconfig_path(tmp_path)
        api = stack.enter_context(ch.api_client(kubeconfig))
        core = kubernetes.client.CoreV1Api(api)
        for i in range(NODES):
            await trio.to_thread.run_sync(core.create_node, _node(i))  # type: ignore[arg-type]
        cluster = EmbeddedCluster(api, srv, kubeconfig)
        started: list[ReplicaProcess] = []

        async def stop_replicas() -> None:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as stopping:
                    for r in started:
                        stopping.start_soon(r.stop)

        stack.push_async_callback(stop_replicas)
        async with trio.open_nursery() as starting:
            async def start(i: int) -> None:
                started.append(await cluster.start_replica(i))
            for i in range(replicas):
                starting.start_soon(start, i)
        cluster.replicas = sorted(started, key=lambda r: r.name)
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)  # the agents, before the replicas stop
        policy = ReconnectPolicy(reconnect_delay_max=RECONNECT_SPREAD, backoff_initial=0.1,
                                 backoff_max=1.0)
        group = AgentGroup([AgentSpec(f"node-{i}", "typha") for i in range(agents)],
                           DiscoverySpec(kubeconfig=str(kubeconfig)), policy)
        cluster.agents = await nursery.start(group.run)
        cluster.agent_names = {s.name for s in group.specs}
        with trio.fail_after(PATIENCE):
            await group.wait_until(lambda g: all(a.in_sync for a in g.agents))
        yield cluster


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
        pods = await trio.to_thread.run_sync(partial(
            self.core.list_namespaced_pod, NAMESPACE, label_selector=TYPHA_SELECTOR))
        ready = sorted(str(p.metadata.name) for p in pods.items
                       if p.metadata is not None and p.metadata.deletion_timestamp is None
                       and p.status is not None and any(
                           c.type == "Ready" and c.status == "True"
                           for c in p.status.conditions or []))
        replicas: list[Replica] = []
        for name in ready:
            if name not in self._forwards:
                self._forwards[name] = await trio.to_thread.run_sync(self._port_forward, name)
            address = self._forwards[name].address  # type: ignore[attr-defined]
            replicas.append(ForwardedReplica(name, address))
        for gone in set(self._forwards) - {r.name for r in replicas}:
            proc = self._forwards.pop(gone)
            proc.kill()
            proc.wait()
        self.replicas = replicas
        nodes = await trio.to_thread.run_sync(self.core.list_node)
        self.agent_names = {str(n.metadata.name) for n in nodes.items if n.metadata}

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

    def read_client_tls(self, root: Path) -> ClientTLS | None:
        """calico-node's TLS client settings if calico-typha requires client certificates
        (the Deployment, the DaemonSet and kube-system's Secrets, as the API returns them)."""
        apps = kubernetes.client.AppsV1Api(self.api)
        as_json = self.api.sanitize_for_serialization
        typha = as_json(apps.read_namespaced_deployment("calico-typha", NAMESPACE))
        if not env(container(typha)).get("TYPHA_CAFILE"):
            return None
        node = as_json(apps.read_namespaced_daemon_set("calico-node", NAMESPACE))
        secrets = {str(s.metadata.name): as_json(s) for s in
                   self.core.list_namespaced_secret(NAMESPACE).items if s.metadata}
        return calico_node_tls(typha, node, secrets, root)

    def close(self) -> None:
        for proc in self._forwards.values():
            proc.kill()
            proc.wait()
        self._forwards.clear()


@asynccontextmanager
async def real_cluster(kubeconfig: str | None, context: str | None, workdir: Path
                       ) -> AsyncIterator[RealCluster]:
    kubectl = ["kubectl"]
    if kubeconfig:
        kubectl += ["--kubeconfig", kubeconfig]
    if context:
        kubectl += ["--context", context]
    with ch.api_client(kubeconfig, context) as api:
        cluster = RealCluster(api, kubectl)
        try:
            cluster.client_tls = await trio.to_thread.run_sync(cluster.read_client_tls,
                                                               workdir / "client-tls")
            await cluster.refresh()
            yield cluster
        finally:
            cluster.close()


@asynccontextmanager
async def open_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    target = real_kubeconfig()
    if target is not None:
        async with real_cluster(*target, tmp_path) as real:
            yield real
    else:
        async with embedded_cluster(tmp_path) as embedded:
            yield embedded
