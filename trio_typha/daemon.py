"""The daemon's nursery tree: pipelines, the 5473 listener, health, metrics, signals, drain.

Start order follows Typha: datastore and pipelines first, then the listener, then the health
and metrics endpoints.  Shutdown (SIGTERM/SIGINT or :meth:`Daemon.shutdown`) also follows
Typha: the listen socket closes at once, HTTP/2 connections get GOAWAY, then the remaining
connections are closed one at a time so the clients do not all land on the other Typhas in
the same instant.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import ssl
from collections.abc import Callable
from functools import partial
from typing import Any, TypedDict

import trio

from . import BUILD_VERSION
from .cache.feed import CacheFeed
from .config import Config
from .cpus import server_processes
from .datastore.base import Datastore
from .datastore.k8s_api import KubeApi
from .datastore.k8s_config import KubeConfigError, load_kube_client_config
from .datastore.k8s_errors import K8sError
from .datastore.memory import MemoryDatastore, MemoryStore
from .datastore.stall import WatchBoard, WatchState
from .model.kinds import CALICO_V3_GROUP
from .model.kv import SYNCER_TYPES, SyncStatus
from .model.syncers import DatastoreMode, syncer_definition
from .observe.health import REPORT_TIMEOUT, Health, Report
from .observe.httpd import serve_http
from .observe.metrics import Metrics, SyncerMetrics
from .server.fdlimit import FdShedder, log_nofile_limit
from .server.governor import Governor
from .server.listener import ConnectionHandler, Protocols
from .server.livefeed import FEED_PATH, ReplicaSampler, serve_feed
from .server.rebalance import CountUnavailable, RebalancePoller, node_counter, typha_counter
from .sessions.connections import ConnectionRegistry
from .sessions.context import ServerContext
from .sessions.settings import ServerSettings
from .startup import (
    DatastoreUnreachable,
    HttpPortInUse,
    KubernetesConfigMissing,
    ListenPortInUse,
    port_in_use,
)
from .syncer.pipeline import SyncerPipeline
from .tls.diagnosis import FailureLog
from .tls.server import ServerTLS, TLSPolicy, metrics_ssl_context
from .workers import control as worker_control
from .workers import wire as worker_wire
from .workers.channel import ControlSocket, PrimaryLink, ReceivedSocketListener
from .workers.handoff import BalancingListener
from .workers.pool import (
    ReplicaPipeline,
    Upstream,
    WorkerPool,
    WorkerState,
    aggregate_exposition,
    serve_worker_feed,
)

log = logging.getLogger(__name__)


class DefinitionArgs(TypedDict):
    """What :func:`~trio_typha.model.syncers.syncer_definition` needs to know of the datastore."""

    mode: DatastoreMode
    calico_group: str


def make_datastore(cfg: Config, store: MemoryStore | None = None
                   ) -> tuple[Datastore, DefinitionArgs]:
    """Build the configured datastore; returns it and the syncer_definition keyword args."""
    if cfg.datastore_type == "memory":
        if store is None:
            store = MemoryStore()
            load_memory_contents(store, cfg)
        return MemoryDatastore(store), {"mode": DatastoreMode.KDD,
                                        "calico_group": CALICO_V3_GROUP}
    if cfg.datastore_type == "kubernetes":
        from .datastore.k8s_watch import WatchTuning
        from .datastore.kubernetes import KubernetesDatastore
        ds = KubernetesDatastore.from_config(
            cfg, tuning=WatchTuning(stall_deadline=cfg.watch_stall_timeout_secs))
        return ds, {"mode": DatastoreMode.KDD, "calico_group": ds.calico_group}
    from .datastore.etcd import EtcdDatastore
    return EtcdDatastore.from_config(cfg, stall_deadline=cfg.watch_stall_timeout_secs), {
        "mode": DatastoreMode.ETCD,
                                            "calico_group": CALICO_V3_GROUP}


def load_memory_contents(store: MemoryStore, cfg: Config) -> None:
    from .datastore import seed, synthetic
    if cfg.memory_demo_cluster:
        n = store.put_all(synthetic.generate(cfg.memory_demo_cluster))
        log.info("Loaded demo cluster %r: %d objects", cfg.memory_demo_cluster, n)
    if cfg.memory_seed_file:
        n = store.put_all(seed.load_seed_file(cfg.memory_seed_file))
        log.info("Loaded %d objects from seed file %s", n, cfg.memory_seed_file)


class Daemon:
    """Everything ``trio-typha serve`` runs, as one object with one ``run``."""

    def __init__(self, cfg: Config, *, store: MemoryStore | None = None,
                 datastore: Datastore | None = None, handle_signals: bool = False,
                 syncer_types: tuple[str, ...] = SYNCER_TYPES,
                 listen_port: int | None = None, upstream: str | None = None,
                 control: ControlSocket | None = None) -> None:
        """``listen_port`` overrides the configured port; 0 picks a free one (tests, benches):
        in Typha's own config, ServerPort 0 means 5473.  ``upstream`` makes this a
        ServerWorkers worker: its caches follow the primary at that Unix socket instead of
        a datastore (see :mod:`.workers.pool`), and ``control`` is its channel with the
        primary (:mod:`.workers.channel`): its connections, queries, limit and drain come
        in there, and its status goes out."""
        self.config = cfg
        self.listen_port = cfg.port if listen_port is None else listen_port
        self.metrics = Metrics(process_metrics=cfg.prometheus_process_metrics_enabled,
                               runtime_metrics=cfg.prometheus_go_metrics_enabled)
        self.metrics.watch_ages.source = lambda: [(w.name, w.age) for w in self._watch_states()]
        self.health = Health()
        self.handle_signals = handle_signals
        self.syncer_types = syncer_types
        self.upstream = upstream
        #: Processes serving the port (ServerWorkers after its default); 1 for a worker.
        self.server_workers: int = 1 if upstream is not None else server_processes(cfg)
        self.link = None if control is None else PrimaryLink(
            control, status=self._worker_status, answer=self._answer,
            on_limit=self._limit_from_primary, on_drain=self.shutdown, on_gone=self.shutdown)
        self._handed: ReceivedSocketListener | None = None
        self.workers: WorkerPool | None = None
        if upstream is not None:
            datastore = Upstream(upstream)  # type: ignore[assignment]
        if store is None and datastore is None and cfg.datastore_type == "memory":
            store = MemoryStore()
            load_memory_contents(store, cfg)
        self.store = store
        self._owns_datastore = datastore is None
        if datastore is not None:
            self.datastore = datastore
            self._definition_args: DefinitionArgs = {
                "mode": DatastoreMode.ETCD if datastore.name == "etcdv3" else DatastoreMode.KDD,
                "calico_group": getattr(datastore, "calico_group", CALICO_V3_GROUP)}
        else:
            try:
                self.datastore, self._definition_args = make_datastore(cfg, store)
            except KubeConfigError as exc:
                raise KubernetesConfigMissing(
                    f"no usable Kubernetes configuration for TYPHA_DATASTORETYPE=kubernetes: "
                    f"{exc}") from None
        self.settings = ServerSettings.from_config(cfg)
        self._metrics_tls: Callable[[], ssl.SSLContext] | None = None
        if cfg.prometheus_metrics_cert_file or cfg.prometheus_metrics_key_file:
            files = (cfg.prometheus_metrics_cert_file, cfg.prometheus_metrics_key_file,
                     cfg.prometheus_metrics_ca_file, cfg.prometheus_metrics_client_auth)
            policy = TLSPolicy.from_config(cfg)
            metrics_ssl_context(*files, policy)  # a bad file fails start-up at once
            self._metrics_tls = lambda: metrics_ssl_context(*files, policy)
        #: Server TLS (re-read on change); built now so a bad file fails start-up at once.
        self.tls = (ServerTLS(cfg.server_cert_file, cfg.server_key_file, cfg.ca_file,
                              TLSPolicy.from_config(cfg))
                    if cfg.tls_enabled else None)
        self.pipelines: dict[str, SyncerPipeline | ReplicaPipeline] = {}
        self.ctx: ServerContext | None = None
        self.connections = ConnectionRegistry(active=self.metrics.connections_active,
                                              accepted=self.metrics.connections_accepted)
        self.connections.on_capacity_error = FdShedder(self.connections)
        if self.link is not None:
            self.connections.on_change = self.link.changed
        self.ports: dict[str, int] = {}
        self._shutdown = trio.Event()
        self.governor: Governor | None = None
        self._primary_limit: int | None = None  # a worker's share, from the primary
        self.rebalancer: RebalancePoller | None = None
        self._rebalance_api: KubeApi | None = None
        self._owns_rebalance_api = False
        if cfg.connection_rebalancing_mode == "kubernetes":
            self._rebalance_api = getattr(self.datastore, "api", None)
            if not isinstance(self._rebalance_api, KubeApi):
                # etcd (or memory) datastore: in-cluster config or a kubeconfig, as Typha.
                try:
                    self._rebalance_api = KubeApi(load_kube_client_config(cfg))
                except KubeConfigError as exc:
                    raise KubernetesConfigMissing(
                        "no usable Kubernetes configuration for "
                        f"TYPHA_CONNECTIONREBALANCINGMODE=kubernetes: {exc}; or set "
                        "ConnectionRebalancingMode=none") from None
                self._owns_rebalance_api = True

    # -- readiness --------------------------------------------------------------------------

    def _cache_report(self, pipeline: SyncerPipeline | ReplicaPipeline) -> Report:
        status = pipeline.feed.status
        detail = "" if status is SyncStatus.IN_SYNC else f"syncer status {status.name}"
        if pipeline.failing:
            detail = "; ".join(pipeline.failing.values())
        # A silent watch leaves the cache serving and the server ready (as Typha through
        # an outage), but readiness says which stream may be stale.
        silent = [w.describe() for w in self._watch_states(f"{pipeline.syncer_type}/")
                  if w.stale]
        return Report(live=True, ready=pipeline.ready,
                      detail="; ".join(filter(None, [detail, *silent])))

    def _watch_states(self, prefix: str = "") -> list[WatchState]:
        board: WatchBoard | None = getattr(self.datastore, "watches", None)
        return [] if board is None else list(board.states(prefix))

    def _limit_from_primary(self, connections: int) -> None:
        """A worker: the primary says how many connections this worker may hold."""
        self._primary_limit = connections
        if self.governor is not None:
            self.governor.set_limit(connections)

    @property
    def listening(self) -> bool:
        return self.connections.listening

    def _server_report(self) -> Report:
        return Report(live=True, ready=self.listening,
                      detail="" if self.listening else "not listening")

    @property
    def ready(self) -> bool:
        return self.health.ready

    async def wait_in_sync(self) -> None:
        """Wait until every pipeline has reported InSync (after :meth:`run` has started)."""
        for pipeline in self.pipelines.values():
            await pipeline.feed.wait_in_sync()

    # -- lifetime ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Begin a graceful shutdown (idempotent)."""
        if self._shutdown.is_set():
            log.info("Shutdown already in progress")
        self._shutdown.set()

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run until :meth:`shutdown` (or a signal) has drained every connection."""
        cfg = self.config
        log.info("Typha starting up version=%s datastore=%s", BUILD_VERSION, self.datastore.name)
        if cfg.debug_memory_profile_path:
            import tracemalloc
            tracemalloc.start()  # so SIGUSR1's snapshot has the allocations since start
        log_nofile_limit()
        feeds = {t: CacheFeed(t, max_batch_size=cfg.snapshot_cache_max_batch_size,
                              snapshot_reuse_age=cfg.snapshot_reuse_age_secs,
                              wake_interval=cfg.cache_wake_interval_secs,
                              max_fall_behind=self.settings.max_fall_behind)
                 for t in self.syncer_types}
        self.ctx = ServerContext(feeds=feeds, settings=self.settings, version=BUILD_VERSION,
                                 metrics=self.metrics, registry=self.connections)
        for syncer_type, feed in feeds.items():
            sm = self.ctx.syncer_metrics(syncer_type)
            feed.on_wait = partial(_count_wait, sm)
            feed.on_round = sm.broadcast_round
            self.metrics.cache_staleness.labels(syncer=syncer_type).set_function(
                partial(_staleness, feed))
        validator = _validator()
        async with trio.open_nursery() as nursery:
            if self.handle_signals:
                nursery.start_soon(self._signals)
            if self.link is not None:
                await nursery.start(self.link.run)
            for feed in feeds.values():
                await nursery.start(feed.run_broadcast)
            await self._check_datastore()
            await self._initialize_datastore()
            log.info("Starting the datastore Syncer/cache layer")
            for syncer_type, feed in feeds.items():
                pipeline: SyncerPipeline | ReplicaPipeline
                if self.upstream is not None:
                    pipeline = ReplicaPipeline(syncer_type, feed, self.upstream)
                    pipeline.on_limit = self._limit_from_primary
                else:
                    definition = syncer_definition(
                        syncer_type, **self._definition_args,
                        felix_interface_prefix=cfg.felix_interface_prefix or None)
                    pipeline = SyncerPipeline(definition, self.datastore, feed,
                                              validator=validator, metrics=self.metrics)
                self.pipelines[syncer_type] = pipeline
                heartbeat = getattr(pipeline, "heartbeat", None)  # workers' replicas: none
                self.health.register(f"{syncer_type}-cache", partial(self._cache_report, pipeline),
                                     timeout=REPORT_TIMEOUT, heartbeat=heartbeat)
                await nursery.start(pipeline.run)
            # With ServerWorkers each process holds its share of the replica's limit; a
            # worker's share comes from the primary (rebalancing runs there).
            self.governor = Governor(
                self.connections,
                limit=self._primary_limit or cfg.max_connections,
                interval=cfg.connection_drop_interval,
                on_drop=self.metrics.connections_dropped.inc, processes=self.server_workers)
            # Typha: the governor loop refreshes SyncServer's liveness (20 s timeout).
            self.health.register("SyncServer", self._server_report,
                                 timeout=max(REPORT_TIMEOUT, 2 * self.governor.interval),
                                 heartbeat=self.governor.heartbeat)
            await nursery.start(self._serve_sync)
            if self.server_workers > 1:
                await nursery.start(self._run_workers)
            await nursery.start(self.governor.run)
            if self._rebalance_api is not None:
                log.info("Kubernetes connection rebalancing is enabled, starting k8s poll task.")
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
            if cfg.health_enabled:
                log.info("Health enabled. Starting server. host=%s port=%d", cfg.health_host,
                         cfg.health_port)
                listeners = await self._start_http(
                    nursery, "health", "TYPHA_HEALTHPORT", cfg.health_host, cfg.health_port,
                    partial(serve_http, cfg.health_host, cfg.health_port, self._health_http,
                            websockets={FEED_PATH: self._live_feed}))
                self.ports["health"] = listeners[0].socket.getsockname()[1]
            if cfg.prometheus_metrics_enabled:
                log.info("Prometheus metrics enabled. Starting server. host=%s port=%d tls=%s",
                         cfg.prometheus_metrics_host or "*", cfg.prometheus_metrics_port,
                         self._metrics_tls is not None)
                listeners = await self._start_http(
                    nursery, "metrics", "TYPHA_PROMETHEUSMETRICSPORT",
                    cfg.prometheus_metrics_host, cfg.prometheus_metrics_port,
                    partial(serve_http, cfg.prometheus_metrics_host,
                            cfg.prometheus_metrics_port, self._metrics_http,
                            tls=self._metrics_tls))
                self.ports["metrics"] = listeners[0].socket.getsockname()[1]
            if cfg.debug_port:
                from .observe.debug import debug_handler
                if cfg.debug_host not in ("localhost", "127.0.0.1", "::1"):
                    log.warning("The debug endpoint (task tree, memory, configuration) is "
                                "listening on %s, not localhost: anyone who can reach it can "
                                "read them", cfg.debug_host)
                listeners = await self._start_http(
                    nursery, "debug", "TYPHA_DEBUGPORT", cfg.debug_host, cfg.debug_port,
                    partial(serve_http, cfg.debug_host, cfg.debug_port,
                            debug_handler(cfg)))
                self.ports["debug"] = listeners[0].socket.getsockname()[1]
            if self.store is not None and cfg.memory_churn_rate > 0:
                from .datastore.churn import Churn
                await nursery.start(Churn(self.store, cfg.memory_churn_rate).run)
            nursery.start_soon(self._freeze_after_sync)
            task_status.started(self)
            await self._shutdown.wait()
            async with trio.open_nursery() as draining:
                if self.workers is not None:
                    draining.start_soon(self.workers.stop)
                draining.start_soon(self._drain)
            nursery.cancel_scope.cancel()
        aclose = getattr(self.datastore, "aclose", None)
        with trio.CancelScope(shield=True):
            if self._owns_datastore and aclose is not None:
                await aclose()
            if self._owns_rebalance_api and self._rebalance_api is not None:
                await self._rebalance_api.aclose()
        log.info("Server has shut down.")

    @staticmethod
    async def _start_http(nursery: trio.Nursery, what: str, setting: str, host: str, port: int,
                          serve: Callable[..., Any]) -> list[trio.SocketListener]:
        try:
            listeners: list[trio.SocketListener] = await nursery.start(serve)
        except OSError as exc:
            raise port_in_use(f"the {what} endpoint", setting, host, port, exc,
                              HttpPortInUse) from None
        return listeners

    async def _initialize_datastore(self) -> None:
        """KDD: Typha's EnsureInitialized (ClusterInformation default, built-in Tiers)."""
        api = getattr(self.datastore, "api", None)
        if self.datastore.name != "kubernetes" or not isinstance(api, KubeApi):
            return
        from .datastore.k8s_init import InitForbidden, ensure_initialized
        try:
            await ensure_initialized(api, self._definition_args["calico_group"])
        except InitForbidden as exc:
            log.info("Skipping datastore initialisation: not permitted (%s); ClusterInformation "
                     "and the built-in Tiers are left to calico-node or the operator", exc)
        except K8sError as exc:
            log.warning("Failed to initialize datastore: %s; serving anyway", exc)

    async def _check_datastore(self) -> None:
        """An etcd that answers none of its endpoints at start ends start-up, named."""
        probe = getattr(self.datastore, "probe", None)
        if probe is None or not self._owns_datastore:
            return
        problem = await probe()
        if problem:
            endpoints = ",".join(self.config.etcd_urls)
            raise DatastoreUnreachable(
                f"cannot reach etcd at {endpoints} (TYPHA_ETCDENDPOINTS / TYPHA_ETCDADDR): "
                f"{problem}; check that etcd runs and the endpoints and TLS files are right")

    async def _health_http(self, path: str) -> tuple[int, str, bytes] | None:
        """The health port: Typha's probes, plus ``/connections`` (who is connected)."""
        if path == "/connections":
            rows = self.workers.connection_rows() if self.workers is not None else None
            return 200, "application/json", self._connections_document(
                [] if rows is None else await rows)
        return self.health.handle(path)

    def _connections_document(self, more: list[dict[str, Any]]) -> bytes:
        """``/connections``: this process's rows and ``more`` (its workers')."""
        from .observe.connections import connections_document
        replica = f"{socket.gethostname()}:{self.ports.get('server', self.listen_port)}"
        return connections_document(
            replica, [*self.connections.snapshot(), *more], version=BUILD_VERSION,
            limit=self.governor.limit if self.governor is not None else None,
            accepted=self._handed.accepted if self._handed is not None else None)

    def _worker_status(self) -> worker_control.Status:
        """A worker: what it reports to the primary (readiness as its /readiness says)."""
        reports = self.health.reports()
        ready = bool(reports) and all(r.live and r.ready is not False for r in reports.values())
        detail = "; ".join(f"{name}: {r.detail or 'not ready'}" for name, r in reports.items()
                           if not r.live or r.ready is False)
        accepted = self._handed.accepted if self._handed is not None else 0
        return worker_control.Status(ready, accepted, min(len(self.connections), accepted),
                                     detail[:500] or ("" if ready else "starting"))

    def _answer(self, what: int) -> bytes:
        """A worker: its answer to the primary's query."""
        if what == worker_control.METRICS:
            return self.metrics.exposition()
        return self._connections_document([])

    async def _freeze_after_sync(self) -> None:
        """Once every cache is in sync, move what exists then (the datastore's objects, the
        caches, the first snapshots) out of the garbage collector's reach.

        Otherwise a full collection walks all of it and pauses the loop (every client's
        delivery) for over a second on a medium cluster (docs/performance.md); frozen
        objects are still freed by reference counting, only cycles among them would stay.
        """
        await self.wait_in_sync()
        gc.collect()
        gc.freeze()
        log.info("All caches in sync; %d long-lived objects excluded from garbage "
                 "collection", gc.get_freeze_count())

    async def _metrics_http(self, path: str) -> tuple[int, str, bytes] | None:
        if path != "/metrics" or self.workers is None:
            return self.metrics.handle(path)
        others = await self.workers.metrics_texts()  # asked first: ours is the newest
        answer = self.metrics.handle(path)
        assert answer is not None
        code, ctype, body = answer
        return code, ctype, aggregate_exposition(body.decode(), others).encode()

    async def _run_workers(self, *, task_status: trio.TaskStatus[None]) -> None:
        """ServerWorkers > 1: the private feed for the workers, then the workers."""
        import tempfile

        cfg = self.config
        assert self.ctx is not None
        count = self.server_workers - 1
        encodings = worker_wire.encodings_for(cfg.server_protocols)
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
                                      port=self.ports["server"])
            self.health.register("workers", lambda: Report(
                live=True, ready=self.workers is not None and self.workers.ready,
                detail=self.workers.detail() if self.workers is not None else ""))
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(
                    trio.serve_listeners,
                    partial(serve_worker_feed, self.ctx.feeds, encodings,
                            self.settings.write_timeout, self._worker_share),
                    [trio.SocketListener(sock)]))
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

    async def _live_feed(self, ws: Any) -> None:
        """``/feed`` on the health port: this replica's numbers once a second."""
        assert self.ctx is not None
        name = f"{self.config.server_host or '0.0.0.0'}:{self.ports.get('server', 0)}"
        await serve_feed(ws, ReplicaSampler(name, self.connections, self.ctx.feeds))

    async def _serve_sync(self, *, task_status: trio.TaskStatus[Any]) -> None:
        cfg = self.config
        assert self.ctx is not None
        handler = ConnectionHandler(
            self.ctx, _protocols(cfg.server_protocols), tls=self.tls,
            client_cn=cfg.client_cn, client_uri_san=cfg.client_uri_san,
            failures=FailureLog(lambda reason: self.metrics.tls_handshake_failures.labels(
                reason=reason).inc()))
        log.info("Opening %slisten socket host=%s port=%d", "TLS " if self.tls else "",
                 cfg.server_host or "*", self.listen_port)
        listeners: list[trio.abc.Listener[Any]]
        if self.link is not None:  # a worker: the primary passes it its share
            self._handed = self.link.listener
            listeners = [self._handed]
            self.ports["server"] = self.listen_port
        else:
            try:
                sockets = await trio.open_tcp_listeners(self.listen_port,
                                                        host=cfg.server_host or None)
            except OSError as exc:
                raise port_in_use("the sync server", "TYPHA_SERVERPORT", cfg.server_host,
                                  self.listen_port, exc, ListenPortInUse) from None
            self.ports["server"] = sockets[0].socket.getsockname()[1]
            listeners = list(sockets)
            if self.server_workers > 1:  # the primary keeps its share, passes the rest
                listeners = [BalancingListener(s, self._own_load, self._worker_targets)
                             for s in sockets]
        log.info("Opened listen socket port=%d", self.ports["server"])
        # Returns once the drain has closed the last connection.
        await self.connections.serve(handler, listeners, task_status=task_status)

    async def _drain(self) -> None:
        """Typha's graceful shutdown: close the listener, GOAWAY, then drop one at a time."""
        assert self.ctx is not None
        log.info("Starting graceful shutdown...")
        self.connections.stop_accepting()
        self.ctx.draining.set()
        cfg = self.config
        await self.connections.drain(
            spread_over=cfg.shutdown_timeout, max_interval=cfg.shutdown_drop_interval_max)

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as signals:
            async for signum in signals:
                if signum == signal.SIGUSR1:
                    self.memory_profile()
                    continue
                log.info("Received %s, shutting down", signal.Signals(signum).name)
                self.shutdown()

    def memory_profile(self) -> str | None:
        """SIGUSR1: a tracemalloc snapshot to DebugMemoryProfilePath (as Typha's heap
        profile); returns the path written."""
        template = self.config.debug_memory_profile_path
        if not template:
            log.info("Received SIGUSR1; DebugMemoryProfilePath is not set, no profile written")
            return None
        from .observe.debug import write_memory_profile
        try:
            path = write_memory_profile(template)
        except OSError as exc:
            log.error("Received SIGUSR1, but writing the memory profile to %s failed: %s",
                      template, exc)
            return None
        log.info("Received SIGUSR1, emitting memory profile to %s", path)
        return path


def _staleness(feed: CacheFeed) -> float:
    return feed.staleness(trio.current_time())


def _count_wait(sm: SyncerMetrics, blocked: bool) -> None:
    (sm.breadcrumb_block if blocked else sm.breadcrumb_non_block).inc()


def _protocols(which: str) -> Protocols:
    gob = h2 = None
    if which in ("all", "typha"):
        from .protocols.gob.shell import serve_gob_connection
        gob = serve_gob_connection
    if which in ("all", "grpc"):
        from .protocols.grpc.shell import serve_h2_connection
        h2 = serve_h2_connection
    return Protocols(gob=gob, h2=h2)


def _no_felix() -> int:
    raise CountUnavailable("no felix syncer to count nodes with")


def _validator() -> Any:
    from .model import validation
    return validation.validate_updates
