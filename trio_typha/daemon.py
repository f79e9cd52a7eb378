"""The primary: a process whose caches follow the datastore.

It is the serving process (:mod:`.serving`) with the datastore's pipelines: list-watch,
conversion and validation for each syncer type (:class:`~.syncer.pipeline.SyncerPipeline`);
before they start, the datastore's start-up checks (etcd reachable, KDD initialized).  With
``ServerWorkers`` above one it alone listens on the port and passes connections to its
workers, which follow its caches (:mod:`.follower`); with Kubernetes rebalancing it
polls the Typha endpoints and node count for the connection limit.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
from functools import partial
from typing import Any

import trio

from . import BUILD_VERSION
from .cache.feed import CacheFeed
from .config import Config
from .datastore.base import Datastore
from .datastore.k8s_api import KubeApi
from .datastore.k8s_config import KubeConfigError
from .datastore.k8s_errors import K8sError
from .datastore.known import StateError
from .datastore.memory import MemoryDatastore, MemoryStore
from .datastore.stall import WatchState
from .host import server_processes
from .model.kv import SYNCER_TYPES
from .model.syncers import DatastoreMode, syncer_definition
from .observe.accept import serve_listeners
from .observe.health import Report
from .server.rebalance import CountUnavailable, RebalancePoller, node_counter, typha_counter
from .serving import ServingProcess, required_kube_api
from .sessions.connections import SocketListener
from .startup import DatastoreUnreachable, KubernetesConfigMissing
from .syncer.gcpause import GCPauses
from .syncer.pipeline import SyncerPipeline, Validator
from .upstream import wire as upstream_wire
from .upstream.serve import serve_follower
from .warm import wire as warm_wire
from .warm.fetch import PeerTLS, WarmOutcome, discover_siblings, fetch_state
from .warm.serve import WORKER_SOCKET, WarmServer
from .workers.handoff import BalancingListener
from .workers.pool import WorkerPool, WorkerState, aggregate_exposition

log = logging.getLogger(__name__)


def make_datastore(cfg: Config, store: MemoryStore | None = None) -> Datastore:
    """Build the configured datastore."""
    if cfg.datastore_type == "typha":
        raise ValueError("DatastoreType=typha is relay mode: run relay_process.Relay")
    if cfg.datastore_type == "memory":
        if store is None:
            store = MemoryStore()
            load_memory_contents(store, cfg)
        return MemoryDatastore(store)
    if cfg.datastore_type == "kubernetes":
        from .datastore.k8s_watch import WatchTuning
        from .datastore.kubernetes import KubernetesDatastore
        return KubernetesDatastore.from_config(
            cfg, tuning=WatchTuning(stall_deadline=cfg.watch_stall_timeout_secs))
    from .datastore.etcd import EtcdDatastore
    return EtcdDatastore.from_config(cfg, stall_deadline=cfg.watch_stall_timeout_secs)


def load_memory_contents(store: MemoryStore, cfg: Config) -> None:
    from .datastore import seed, synthetic
    if cfg.memory_demo_cluster:
        n = store.put_all(synthetic.generate(cfg.memory_demo_cluster))
        log.info("Loaded demo cluster %r: %d objects", cfg.memory_demo_cluster, n)
    if cfg.memory_seed_file:
        n = store.put_all(seed.load_seed_file(cfg.memory_seed_file))
        log.info("Loaded %d objects from seed file %s", n, cfg.memory_seed_file)


class Daemon(ServingProcess[SyncerPipeline]):
    """Everything ``trio-typha serve`` runs (the primary), as one object with one ``run``."""

    def __init__(self, cfg: Config, *, store: MemoryStore | None = None,
                 datastore: Datastore | None = None, handle_signals: bool = False,
                 syncer_types: tuple[str, ...] = SYNCER_TYPES,
                 listen_port: int | None = None) -> None:
        """``store``: the memory datastore's contents; ``datastore``: one already built
        (not closed here); otherwise the configured one is built (and closed at the end)."""
        super().__init__(cfg, handle_signals=handle_signals, syncer_types=syncer_types,
                         listen_port=listen_port, processes=server_processes(cfg))
        #: This process's pauses of automatic garbage collection (one per pipeline).
        self.gc_pauses = GCPauses(gc)
        self.workers: WorkerPool | None = None
        if store is None and datastore is None and cfg.datastore_type == "memory":
            store = MemoryStore()
            load_memory_contents(store, cfg)
        self.store = store
        self._owns_datastore = datastore is None
        if datastore is None:
            try:
                datastore = make_datastore(cfg, store)
            except KubeConfigError as exc:
                raise KubernetesConfigMissing(
                    f"no usable Kubernetes configuration for TYPHA_DATASTORETYPE=kubernetes: "
                    f"{exc}") from None
        self.datastore: Datastore = datastore
        self._validator = _validator()
        self.rebalancer: RebalancePoller | None = None
        self._rebalance_api: KubeApi | None = None
        self._owns_rebalance_api = False
        if cfg.connection_rebalancing_mode == "kubernetes":
            self._rebalance_api = self.datastore.kube_api
            if self._rebalance_api is None:
                # etcd (or memory) datastore: in-cluster config or a kubeconfig, as Typha.
                self._rebalance_api = required_kube_api(
                    cfg, "TYPHA_CONNECTIONREBALANCINGMODE=kubernetes",
                    "or set ConnectionRebalancingMode=none")
                self._owns_rebalance_api = True
        #: where the caches' state came from (None: not decided yet)
        self.warm: WarmOutcome | None = None
        #: made in :meth:`start_first`, once the datastore knows its Calico API group
        self.warm_server: WarmServer | None = None

    @property
    def source_name(self) -> str:
        return self.datastore.name

    def watch_states(self, prefix: str = "") -> list[WatchState]:
        board = self.datastore.watches
        return [] if board is None else list(board.states(prefix))

    def fingerprint(self) -> dict[str, str]:
        """Everything that decides how this replica turns datastore objects into KVs: a
        sibling's state is only taken (or given) where both agree (:mod:`.warm.wire`)."""
        mode = self.datastore.mode
        return warm_wire.fingerprint(
            datastore=self.datastore.name, calico_group=self.datastore.calico_group,
            use_pod_cidr=self.config.k8s_use_pod_cidr and mode is DatastoreMode.KDD,
            felix_interface_prefix=self.config.felix_interface_prefix, build=BUILD_VERSION,
            syncers=",".join(self.syncer_types))

    def warm_session(self) -> WarmServer | None:
        return self.warm_server

    def make_pipeline(self, syncer_type: str, feed: CacheFeed) -> SyncerPipeline:
        pipeline = self._make_pipeline(syncer_type, feed)
        state = self.warm.states.get(syncer_type) if self.warm is not None else None
        if state is not None:
            assert self.warm is not None
            try:
                pipeline.restore(state, self.warm.source)
            except StateError as exc:
                log.warning("Syncer %s: the state from sibling %s does not fit (%s); "
                            "listing it from the datastore", syncer_type, self.warm.source,
                            exc)
        return pipeline

    def _make_pipeline(self, syncer_type: str, feed: CacheFeed) -> SyncerPipeline:
        # USE_POD_CIDR is part of Calico's Kubernetes client configuration: etcd mode never
        # has it (typha/pkg/config/config_params.go, DatastoreConfig).
        mode = self.datastore.mode
        definition = syncer_definition(
            syncer_type, mode=mode, calico_group=self.datastore.calico_group,
            use_pod_cidr=self.config.k8s_use_pod_cidr and mode is DatastoreMode.KDD,
            felix_interface_prefix=self.config.felix_interface_prefix or None)
        return SyncerPipeline(definition, self.datastore, feed, validator=self._validator,
                              metrics=self.metrics, gc_pauses=self.gc_pauses)

    async def start_first(self, nursery: trio.Nursery) -> None:
        # The datastore's shared connections (etcd's, the Kubernetes client's HTTP/2 one),
        # and the rebalancing client's, before the first request. Started once KDD's API
        # group is discovered, which the warm-start fingerprint below names.
        await nursery.start(self.datastore.run)
        if self._rebalance_api is not None and self._rebalance_api is not self.datastore.kube_api:
            await nursery.start(self._rebalance_api.run)
        cfg = self.config
        # Under TLS a sibling is told by its own identity (WarmStartPeerCN / URISAN): with
        # neither set, no warm start is served.
        if self.datastore.name in WARM_DATASTORES and (
                not cfg.tls_enabled or cfg.warm_start_peer_cn or cfg.warm_start_peer_uri_san):
            self.warm_server = WarmServer(lambda: self.pipelines, self.fingerprint(),
                                          write_timeout=self.settings.write_timeout)

    async def prepare(self) -> None:
        await self._check_datastore()
        await self._initialize_datastore()
        await self._warm_start()

    async def _warm_start(self) -> None:
        """Take a sibling's state, if configured and one gives it (see :mod:`.warm`)."""
        cfg = self.config
        peers = list(cfg.warm_start_peers)
        if cfg.warm_start_discovery and self.warm_server is not None:
            api = self.datastore.kube_api or self._rebalance_api
            if api is None:
                log.warning("WarmStartDiscovery: no Kubernetes API to read EndpointSlices "
                            "from (etcd mode needs ConnectionRebalancingMode=kubernetes or "
                            "WarmStartPeers)")
            else:
                peers += await discover_siblings(api, namespace=cfg.k8s_namespace,
                                                 service=cfg.k8s_service_name,
                                                 port_name=cfg.k8s_port_name)
        peers = list(dict.fromkeys(peers))
        if not peers or self.warm_server is None:
            self.warm = WarmOutcome()
        else:
            log.info("Warm start: asking %s for the caches' state", ", ".join(peers))
            self.warm = await fetch_state(peers, self.syncer_types, self.fingerprint(),
                                          tls=self._peer_tls(),
                                          per_peer=cfg.warm_start_timeout_secs)
        log.info("Caches' state: %s", self.warm.describe())
        outcome = self.warm
        self.health.register("state-source", lambda: Report(
            live=True, ready=None, detail=outcome.describe()))

    def _peer_tls(self) -> PeerTLS | None:
        cfg = self.config
        if not cfg.tls_enabled:
            return None
        from .tls.client import client_ssl_context
        # Our own certificate is the client's: siblings check it as we check theirs.
        return PeerTLS(client_ssl_context(cfg.ca_file, cfg.server_cert_file,
                                          cfg.server_key_file),
                       peer_cn=cfg.warm_start_peer_cn, peer_uri_san=cfg.warm_start_peer_uri_san)

    async def open_listeners(self) -> list[SocketListener]:
        listeners = await self.open_tcp_listeners()
        if self.server_workers > 1:  # the primary keeps its share, passes the rest
            return [BalancingListener(s, self._own_load, self._worker_targets)
                    for s in listeners]
        return list(listeners)

    async def start_beside_listener(self, nursery: trio.Nursery) -> None:
        if self.server_workers > 1:
            await nursery.start(self._run_workers)

    async def start_tasks(self, nursery: trio.Nursery) -> None:
        cfg = self.config
        assert self.governor is not None and self.ctx is not None
        if self._rebalance_api is not None:
            log.info("Kubernetes connection rebalancing is enabled, starting k8s poll task.")
            feeds = self.ctx.feeds
            self.rebalancer = RebalancePoller(
                self.governor,
                count_typhas=typha_counter(self._rebalance_api,
                                           namespace=cfg.k8s_namespace,
                                           service=cfg.k8s_service_name,
                                           port_name=cfg.k8s_port_name),
                count_nodes=node_counter(feeds["felix"]) if "felix" in feeds
                else _no_felix, syncer_types=len(self.syncer_types),
                lower=cfg.max_connections_lower_limit,
                upper=cfg.max_connections_upper_limit,
                interval=cfg.k8s_service_poll_interval_secs)
            await nursery.start(self.rebalancer.run)
        if self.store is not None and cfg.memory_churn_rate > 0:
            from .datastore.churn import Churn
            await nursery.start(Churn(self.store, cfg.memory_churn_rate).run)

    async def drain_beside(self) -> None:
        if self.workers is not None:
            await self.workers.stop()

    async def aclose(self) -> None:
        if self._owns_datastore:
            await self.datastore.aclose()
        if self._owns_rebalance_api and self._rebalance_api is not None:
            await self._rebalance_api.aclose()

    async def other_connection_rows(self) -> list[dict[str, Any]]:
        return [] if self.workers is None else await self.workers.connection_rows()

    async def metrics_page(self) -> tuple[int, str, bytes]:
        if self.workers is None:
            return await super().metrics_page()
        others = await self.workers.metrics_texts()  # asked first: ours is the newest
        code, ctype, body = await super().metrics_page()
        return code, ctype, aggregate_exposition(body.decode(), others).encode()

    async def _initialize_datastore(self) -> None:
        """KDD: Typha's EnsureInitialized (ClusterInformation default, built-in Tiers)."""
        api = self.datastore.kube_api
        if api is None:
            return
        from .datastore.k8s_init import InitForbidden, ensure_initialized
        try:
            await ensure_initialized(api, self.datastore.calico_group)
        except InitForbidden as exc:
            log.info("Skipping datastore initialisation: not permitted (%s); ClusterInformation "
                     "and the built-in Tiers are left to calico-node or the operator", exc)
        except K8sError as exc:
            log.warning("Failed to initialize datastore: %s; serving anyway", exc)

    async def _check_datastore(self) -> None:
        """An etcd that answers none of its endpoints at start ends start-up, named."""
        if not self._owns_datastore:
            return
        problem = await self.datastore.probe()
        if problem:
            endpoints = ",".join(self.config.etcd_urls)
            raise DatastoreUnreachable(
                f"cannot reach etcd at {endpoints} (TYPHA_ETCDENDPOINTS / TYPHA_ETCDADDR): "
                f"{problem}; check that etcd runs and the endpoints and TLS files are right")

    async def _run_workers(self, *, task_status: trio.TaskStatus[None]) -> None:
        """ServerWorkers > 1: the private feed for the workers, then the workers."""
        import tempfile

        cfg = self.config
        assert self.ctx is not None
        count = self.server_workers - 1
        encodings = upstream_wire.encodings_for(cfg.server_protocols)
        with tempfile.TemporaryDirectory(prefix="trio-typha-") as tmp:
            path = os.path.join(tmp, "primary.sock")
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            await sock.bind(path)
            sock.listen(socket.SOMAXCONN)
            worker_cfg = cfg.replace(
                # Probes and scrapes come to the primary, which asks its workers over
                # their channels: a worker opens no port of its own.
                server_workers=1, connection_rebalancing_mode="none",
                health_enabled=False, prometheus_metrics_enabled=False,
                max_connections_upper_limit=max(
                    1, -(-cfg.max_connections // self.server_workers)),
                max_connections_lower_limit=1)
            self.workers = WorkerPool(worker_cfg, count=count, upstream=path,
                                      port=self.ports["server"], share=self._worker_share)
            assert self.governor is not None
            self.governor.on_limit = self.workers.limit_changed
            self.health.register("workers", lambda: Report(
                live=True, ready=self.workers is not None and self.workers.ready,
                detail=self.workers.detail() if self.workers is not None else ""))
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(
                    serve_listeners,
                    partial(serve_follower, self.ctx.feeds, encodings,
                            self.settings.write_timeout),
                    [trio.SocketListener(sock)], what="the workers' feed"))
                if self.warm_server is not None:
                    # Siblings' warm starts that land on a worker come on here.
                    warm_sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    await warm_sock.bind(os.path.join(tmp, WORKER_SOCKET))
                    warm_sock.listen(socket.SOMAXCONN)
                    await nursery.start(partial(
                        serve_listeners, partial(self.warm_server, ctx=None),
                        [trio.SocketListener(warm_sock)], what="the workers' warm starts"))
                log.info("Starting %d worker process(es) on port %d", count,
                         self.ports["server"])
                await nursery.start(self.workers.run)
                task_status.started()

    def _own_load(self) -> int:
        return len(self.connections)

    def _worker_targets(self) -> list[WorkerState]:
        return self.workers.workers if self.workers is not None else []

    def _worker_share(self) -> int:
        """What each worker may hold of the replica's connection limit (the governor's)."""
        assert self.governor is not None
        return self.governor.share


#: Datastores whose watches can be handed to a sibling and resumed.
WARM_DATASTORES = frozenset({"kubernetes", "etcdv3"})


def _no_felix() -> int:
    raise CountUnavailable("no felix syncer to count nodes with")


def _validator() -> Validator:
    from .model import validation
    return validation.ValidationFilter()
