"""What every trio-typha process runs, whatever fills its caches: the process's nursery tree.

A process has one pipeline per syncer type filling its cache (:class:`~.syncer.base.Pipeline`),
the 5473 listener and its sessions, the connection limit, the health, metrics and debug
endpoints, signals and the graceful drain.  The roles differ only in where the caches come
from and where connections arrive: the primary (:mod:`.daemon`) watches the datastore, a
follower (:mod:`.follower`) mirrors another process's feed.  Each is a
:class:`ServingProcess` with its own pipelines, listeners and extra tasks.

Start order follows Typha: pipelines first, then the listener, then the health and metrics
endpoints.  Shutdown (SIGTERM/SIGINT or :meth:`ServingProcess.shutdown`) also follows
Typha: the listen socket closes at once, HTTP/2 connections get GOAWAY, then the remaining
connections are closed one at a time so the clients do not all land on the other Typhas in
the same instant.
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
import ssl
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, TypeVar

import trio

from . import BUILD_VERSION, native
from .cache.core import MemoBuilds
from .cache.feed import CacheFeed
from .config import Config
from .datastore.k8s_api import KubeApi
from .datastore.k8s_config import KubeConfigError, load_kube_client_config
from .datastore.stall import WatchState
from .logs import fields
from .model.kv import SYNCER_TYPES, SyncStatus
from .observe.health import REPORT_TIMEOUT, Health, Report
from .observe.httpd import serve_http
from .observe.metrics import Metrics, SyncerMetrics
from .server.backlog import BacklogListener
from .server.fdlimit import FdShedder, fd_ceiling, log_nofile_limit
from .server.governor import Governor
from .server.listener import ConnectionHandler, Protocols
from .server.livefeed import FEED_PATH, ReplicaSampler, serve_feed
from .server.memtrim import Freezer, run_freezer, run_trimmer
from .sessions.connections import ConnectionRegistry, SocketListener
from .sessions.context import ServerContext
from .sessions.settings import ServerSettings
from .startup import HttpPortInUse, KubernetesConfigMissing, ListenPortInUse, port_in_use
from .syncer.base import Pipeline
from .tls.diagnosis import FailureLog
from .tls.server import ServerTLS, TLSPolicy, metrics_ssl_context
from .upstream.serve import serve_feed_session
from .upstream.wire import ENCODINGS, encodings_for

log = logging.getLogger(__name__)

P = TypeVar("P", bound=Pipeline)


class ServingProcess(ABC, Generic[P]):
    """One process serving the sync port from caches its pipelines (``P``) keep current.

    A role says how to make a syncer type's pipeline (:meth:`make_pipeline`) and what to
    listen on (:meth:`open_listeners`); the other hooks default to nothing.
    """

    def __init__(self, cfg: Config, *, handle_signals: bool = False,
                 syncer_types: tuple[str, ...] = SYNCER_TYPES, listen_port: int | None = None,
                 processes: int = 1) -> None:
        """``listen_port`` overrides the configured port; 0 picks a free one (tests, benches):
        in Typha's own config, ServerPort 0 means 5473.  ``processes``: how many processes
        serve the port (each holds its share of the connection limit)."""
        self.config = cfg
        self.listen_port = cfg.port if listen_port is None else listen_port
        self.metrics = Metrics(clock=trio.current_time,
                               process_metrics=cfg.prometheus_process_metrics_enabled,
                               runtime_metrics=cfg.prometheus_go_metrics_enabled)
        self.metrics.watch_ages.source = lambda: [(w.name, w.age) for w in self.watch_states()]
        #: Encodings built of this process's breadcrumbs, by memo key (all its caches).
        self.memo_builds: MemoBuilds = Counter()
        self.metrics.count_encodings({e.name: partial(self.memo_builds.__getitem__, e.memo_key)
                                      for e in ENCODINGS})
        self.health = Health()
        self.handle_signals = handle_signals
        self.syncer_types = syncer_types
        #: Processes serving the port (ServerWorkers after its default).
        self.server_workers = processes
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
        self.pipelines: dict[str, P] = {}
        self.ctx: ServerContext | None = None
        self.connections = ConnectionRegistry(active=self.metrics.connections_active,
                                              accepted=self.metrics.connections_accepted)
        shedder = FdShedder(self.connections, window=self.settings.handshake_timeout)
        self.connections.on_capacity_error = shedder
        self.connections.on_reserve = shedder.on_reserve
        self.ports: dict[str, int] = {}
        self._shutdown = trio.Event()
        self.governor: Governor | None = None

    # -- what a role says -------------------------------------------------------------------

    @property
    def source_name(self) -> str:
        """What the caches follow, for the start-up line."""
        return ""

    @abstractmethod
    def make_pipeline(self, syncer_type: str, feed: CacheFeed) -> P:
        """The pipeline that keeps ``feed`` current."""

    @abstractmethod
    async def open_listeners(self) -> list[SocketListener]:
        """Where connections arrive; sets ``ports["server"]``."""

    async def open_tcp_listeners(self) -> list[BacklogListener]:
        """The sync port's sockets (ServerHost, ServerPort); sets ``ports["server"]``."""
        cfg = self.config
        try:
            sockets = await trio.open_tcp_listeners(self.listen_port,
                                                    host=cfg.server_host or None)
        except OSError as exc:
            raise port_in_use("the sync server", "TYPHA_SERVERPORT", cfg.server_host,
                              self.listen_port, exc, ListenPortInUse,
                              "TYPHA_SERVERHOST") from None
        self.ports["server"] = sockets[0].socket.getsockname()[1]
        return [BacklogListener(s) for s in sockets]

    async def start_first(self, nursery: trio.Nursery) -> None:
        """Before anything else: what the role hears from outside (a worker's channel)."""

    async def prepare(self) -> None:
        """Before the pipelines start (the datastore's start-up checks)."""

    async def start_beside_listener(self, nursery: trio.Nursery) -> None:
        """Once the listener serves: tasks it needs beside it (ServerWorkers)."""

    async def start_tasks(self, nursery: trio.Nursery) -> None:
        """Once the connection limit runs: the role's own long-lived tasks."""

    async def drain_beside(self) -> None:
        """During the drain, beside this process's own (the workers')."""

    async def aclose(self) -> None:
        """After every task has ended, shielded: release what the role holds."""

    def warm_session(self) -> Callable[..., Any] | None:
        """What serves a sibling's warm start on the sync port (None: refused, named)."""
        return None

    def connection_limit(self) -> int:
        """The connection limit to start with (the replica's, before this process's share)."""
        return self.config.max_connections

    def watch_states(self, prefix: str = "") -> list[WatchState]:
        """The caches' watch streams whose names start with ``prefix``."""
        return []

    async def other_connection_rows(self) -> list[dict[str, Any]]:
        """``/connections``' rows beside this process's own (its workers')."""
        return []

    def accepted(self) -> int | None:
        """Connections handed to this process so far, if another process hands them."""
        return None

    async def metrics_page(self) -> tuple[int, str, bytes]:
        """``/metrics``: this process's exposition (the role may fold in others')."""
        answer = self.metrics.handle("/metrics")
        assert answer is not None
        return answer

    # -- readiness --------------------------------------------------------------------------

    def _cache_report(self, pipeline: P) -> Report:
        status = pipeline.feed.status
        detail = "" if status is SyncStatus.IN_SYNC else f"syncer status {status.name}"
        if pipeline.failing:
            detail = "; ".join(pipeline.failing.values())
        # A silent watch leaves the cache serving and the server ready (as Typha through
        # an outage), but readiness says which stream may be stale.
        silent = [w.describe() for w in self.watch_states(f"{pipeline.syncer_type}/")
                  if w.stale]
        return Report(live=True, ready=pipeline.ready,
                      detail="; ".join(filter(None, [detail, *silent])))

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

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run until :meth:`shutdown` (or a signal) has drained every connection; reports
        started with itself."""
        cfg = self.config
        log.info("Typha starting up", extra=fields(version=BUILD_VERSION,
                                                   datastore=self.source_name,
                                                   model=native.STATE.describe()))
        if cfg.debug_memory_profile_path:
            import tracemalloc
            tracemalloc.start()  # so SIGUSR1's snapshot has the allocations since start
        limit = log_nofile_limit()
        self.connections.fd_ceiling = fd_ceiling(limit)
        feeds = {t: CacheFeed(t, max_batch_size=cfg.snapshot_cache_max_batch_size,
                              snapshot_reuse_age=cfg.snapshot_reuse_age_secs,
                              wake_interval=cfg.cache_wake_interval_secs,
                              max_fall_behind=self.settings.max_fall_behind,
                              resume_history_updates=cfg.resume_history_updates,
                              resume_history_age=cfg.resume_history_age_secs,
                              memo_builds=self.memo_builds)
                 for t in self.syncer_types}
        self.ctx = ServerContext(feeds=feeds, settings=self.settings, version=BUILD_VERSION,
                                 metrics=self.metrics, registry=self.connections)
        for syncer_type, feed in feeds.items():
            sm = self.ctx.syncer_metrics(syncer_type)
            feed.on_wait = partial(_count_wait, sm)
            feed.on_round = sm.broadcast_round
            self.metrics.cache_staleness.labels(syncer=syncer_type).set_function(
                partial(_staleness, feed))
            self.metrics.resume_history_bytes.labels(syncer=syncer_type).set_function(
                partial(getattr, feed.cache, "history_bytes"))
        try:
            async with trio.open_nursery() as nursery:
                if self.handle_signals:
                    nursery.start_soon(self._signals)
                await self.start_first(nursery)
                for feed in feeds.values():
                    await nursery.start(feed.run_broadcast)
                await self.prepare()
                log.info("Starting the datastore Syncer/cache layer")
                for syncer_type, feed in feeds.items():
                    pipeline = self.make_pipeline(syncer_type, feed)
                    self.pipelines[syncer_type] = pipeline
                    self.health.register(f"{syncer_type}-cache",
                                         partial(self._cache_report, pipeline),
                                         timeout=REPORT_TIMEOUT, heartbeat=pipeline.heartbeat)
                    await nursery.start(pipeline.run)
                # With ServerWorkers each process holds its share of the replica's limit.
                self.governor = Governor(
                    self.connections, limit=self.connection_limit(),
                    interval=cfg.connection_drop_interval,
                    on_drop=self.metrics.connections_dropped.inc,
                    processes=self.server_workers)
                # Typha: the governor loop refreshes SyncServer's liveness (20 s timeout).
                self.health.register("SyncServer", self._server_report,
                                     timeout=max(REPORT_TIMEOUT, 2 * self.governor.interval),
                                     heartbeat=self.governor.heartbeat)
                await nursery.start(self._serve_sync)
                await self.start_beside_listener(nursery)
                await nursery.start(self.governor.run)
                freezer = Freezer()
                await nursery.start(run_freezer, self.connections.__len__, freezer)
                await nursery.start(partial(run_trimmer, self.connections.__len__,
                                            freezer=freezer))
                await self.start_tasks(nursery)
                await self._start_endpoints(nursery)
                nursery.start_soon(self._freeze_after_sync)
                task_status.started(self)
                await self._shutdown.wait()
                async with trio.open_nursery() as draining:
                    draining.start_soon(self.drain_beside)
                    draining.start_soon(self._drain)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()
        log.info("Server has shut down.")

    async def _start_endpoints(self, nursery: trio.Nursery) -> None:
        cfg = self.config
        if cfg.health_enabled:
            log.info("Health enabled. Starting server.", extra=fields(
                host=cfg.health_host, port=cfg.health_port))
            listeners = await self._start_http(
                nursery, "health", "TYPHA_HEALTHPORT", "TYPHA_HEALTHHOST", cfg.health_host,
                cfg.health_port,
                partial(serve_http, cfg.health_host, cfg.health_port, self._health_http,
                        websockets={FEED_PATH: self._live_feed}))
            self.ports["health"] = listeners[0].socket.getsockname()[1]
        if cfg.prometheus_metrics_enabled:
            log.info("Prometheus metrics enabled. Starting server.", extra=fields(
                host=cfg.prometheus_metrics_host or "*", port=cfg.prometheus_metrics_port,
                tls=self._metrics_tls is not None))
            listeners = await self._start_http(
                nursery, "metrics", "TYPHA_PROMETHEUSMETRICSPORT", "TYPHA_PROMETHEUSMETRICSHOST",
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
                nursery, "debug", "TYPHA_DEBUGPORT", "TYPHA_DEBUGHOST", cfg.debug_host,
                cfg.debug_port,
                partial(serve_http, cfg.debug_host, cfg.debug_port, debug_handler(cfg)))
            self.ports["debug"] = listeners[0].socket.getsockname()[1]

    @staticmethod
    async def _start_http(nursery: trio.Nursery, what: str, setting: str, host_setting: str,
                          host: str, port: int, serve: Callable[..., Any]
                          ) -> list[trio.SocketListener]:
        try:
            listeners: list[trio.SocketListener] = await nursery.start(serve)
        except OSError as exc:
            raise port_in_use(f"the {what} endpoint", setting, host, port, exc,
                              HttpPortInUse, host_setting) from None
        return listeners

    async def _health_http(self, path: str) -> tuple[int, str, bytes] | None:
        """The health port: Typha's probes, plus ``/connections`` (who is connected)."""
        if path == "/connections":
            return 200, "application/json", self.connections_document(
                await self.other_connection_rows())
        return self.health.handle(path)

    def connections_document(self, more: list[dict[str, Any]]) -> bytes:
        """``/connections``: this process's rows and ``more`` (its workers')."""
        from .observe.connections import connections_document
        replica = f"{socket.gethostname()}:{self.ports.get('server', self.listen_port)}"
        return connections_document(
            replica, [*self.connections.snapshot(), *more], version=BUILD_VERSION,
            limit=self.governor.limit if self.governor is not None else None,
            accepted=self.accepted())

    async def _freeze_after_sync(self) -> None:
        """Once every cache is in sync, move what exists then (the datastore's objects, the
        caches, the first snapshots) out of the garbage collector's reach.

        Otherwise a full collection walks all of it and pauses the loop (every client's
        delivery) for over a second on a medium cluster (docs/performance.md); frozen
        objects are still freed by reference counting, only cycles among them would stay.
        """
        await self.wait_in_sync()
        started = trio.current_time()
        gc.collect()
        gc.freeze()
        log.info("All caches in sync; %d long-lived objects excluded from garbage "
                 "collection (collected and frozen in %.0f ms)", gc.get_freeze_count(),
                 (trio.current_time() - started) * 1000)

    async def _metrics_http(self, path: str) -> tuple[int, str, bytes] | None:
        if path != "/metrics":
            return self.metrics.handle(path)
        return await self.metrics_page()

    async def _live_feed(self, ws: Any) -> None:
        """``/feed`` on the health port: this replica's numbers once a second."""
        assert self.ctx is not None
        name = f"{self.config.server_host or '0.0.0.0'}:{self.ports.get('server', 0)}"
        await serve_feed(ws, ReplicaSampler(name, self.connections, self.ctx.feeds,
                                            self.watch_states))

    async def _serve_sync(self, *, task_status: trio.TaskStatus[Any]) -> None:
        cfg = self.config
        assert self.ctx is not None
        handler = ConnectionHandler(
            self.ctx, _protocols(cfg.server_protocols, self.warm_session()), tls=self.tls,
            client_cn=cfg.client_cn, client_uri_san=cfg.client_uri_san,
            peer_cn=cfg.warm_start_peer_cn, peer_uri_san=cfg.warm_start_peer_uri_san,
            failures=FailureLog(lambda reason: self.metrics.tls_handshake_failures.labels(
                reason=reason).inc()))
        log.info("Opening %slisten socket", "TLS " if self.tls else "", extra=fields(
            host=cfg.server_host or "*", port=self.listen_port))
        listeners = await self.open_listeners()
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


def required_kube_api(cfg: Config, what: str, remedy: str) -> KubeApi:
    """A Kubernetes API client for ``what`` needs (in-cluster config or a kubeconfig, as
    Typha), or the start-up failure naming it and ``remedy``."""
    try:
        return KubeApi(load_kube_client_config(cfg))
    except KubeConfigError as exc:
        raise KubernetesConfigMissing(
            f"no usable Kubernetes configuration for {what}: {exc}; {remedy}") from None


def _staleness(feed: CacheFeed) -> float:
    return feed.staleness(trio.current_time())


def _count_wait(sm: SyncerMetrics, blocked: bool) -> None:
    (sm.breadcrumb_block if blocked else sm.breadcrumb_non_block).inc()


def _protocols(which: str, warm: Callable[..., Any] | None = None) -> Protocols:
    gob = h2 = None
    if which in ("all", "typha"):
        from .protocols.gob.shell import serve_gob_connection
        gob = serve_gob_connection
    if which in ("all", "grpc"):
        from .protocols.grpc.shell import serve_h2_connection
        h2 = serve_h2_connection
    # Relay tiers follow this process's caches over the feed, with the encodings its own
    # clients use (a relay serving the other protocol too encodes that itself).
    return Protocols(gob=gob, h2=h2, feed=partial(serve_feed_session, encodings_for(which)),
                     warm=warm)
