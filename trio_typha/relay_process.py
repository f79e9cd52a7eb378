"""A relay tier: a process whose caches follow another Typha (``DatastoreType=typha``).

It is the serving process (:mod:`.serving`) with a :class:`~.relay.pipeline.RelayPipeline`
per syncer type: each follows one upstream at a time from ``UpstreamTyphaAddrs`` (or the
upstream Service's EndpointSlices: K8sNamespace, K8sServiceName, K8sPortName), over the
upstream's feed (a trio-typha) or Typha's gob protocol (any Typha), and fails over to
another when it is lost or silent.  It serves its own clients on both protocols and its
own feed, so relays stack: a tree of tiers holds one datastore watcher, at its root.

``typha_upstream_lag_seconds{syncer}``: for the last breadcrumb the relay took from its
upstream, the seconds from the root receiving its oldest datastore event to this relay
publishing it (a feed carries that age from tier to tier); while nothing is published, the
upstream's own lag from its pings.  Over gob, whose messages carry no times, it is how late
the upstream's last ping arrived by this relay's clock (clock skew counts in it).
Readiness (``/readiness``) names each cache's upstream and lag.
"""

from __future__ import annotations

import logging
import socket
import ssl

import trio
from prometheus_client import Counter, Gauge

from .cache.feed import CacheFeed
from .client.discovery import (
    Discovery,
    EndpointSliceDiscovery,
    StaticDiscovery,
)
from .client.discovery import parse_address as parse_typha_address
from .config import Config
from .datastore.k8s_api import KubeApi
from .model.kv import SYNCER_TYPES
from .observe.health import Report
from .relay.pipeline import RelayPipeline, UpstreamSet
from .relay.sources import FeedSource, GobSource, Source, UpstreamTLS
from .serving import ServingProcess, required_kube_api
from .sessions.connections import SocketListener
from .startup import EXIT_TLS_FILES, StartupError

log = logging.getLogger(__name__)


class Relay(ServingProcess[RelayPipeline]):
    """Everything ``trio-typha serve`` runs with ``DatastoreType=typha``."""

    def __init__(self, cfg: Config, *, handle_signals: bool = False,
                 syncer_types: tuple[str, ...] = SYNCER_TYPES,
                 listen_port: int | None = None, discovery: Discovery | None = None) -> None:
        """``discovery``: where the upstreams are (tests); otherwise from the config."""
        super().__init__(cfg, handle_signals=handle_signals, syncer_types=syncer_types,
                         listen_port=listen_port, processes=1)
        if cfg.server_workers not in (0, 1):
            log.warning("Relay mode serves from one process; ServerWorkers=%d is ignored",
                        cfg.server_workers)
        self._kube_api: KubeApi | None = None
        if discovery is None:
            discovery = self._configured_discovery()
        self.discovery = discovery
        tls = _upstream_tls(cfg)
        self.source: Source = (FeedSource(tls) if cfg.upstream_typha_protocol == "feed"
                               else GobSource(tls, hostname=socket.gethostname()))
        registry = self.metrics.registry
        self.upstream_lag = Gauge(
            "typha_upstream_lag_seconds", "Relay mode: seconds from the root Typha "
            "receiving a datastore event to this relay publishing it, as of the last "
            "breadcrumb from the upstream (or its last ping when idle).", ["syncer"],
            registry=registry)
        self.upstream_failovers = Counter(
            "typha_upstream_failovers", "Relay mode: times a syncer's cache moved to "
            "another upstream Typha.", ["syncer"], registry=registry)

    def _configured_discovery(self) -> Discovery:
        cfg = self.config
        if cfg.upstream_typha_addrs:
            return StaticDiscovery([parse_typha_address(a) for a in cfg.upstream_typha_addrs])
        self._kube_api = required_kube_api(
            cfg, "relay mode's discovery of its upstreams in the EndpointSlices of "
            f"{cfg.k8s_namespace}/{cfg.k8s_service_name} (TYPHA_UPSTREAMTYPHAADDRS is empty)",
            "set UpstreamTyphaAddrs")
        return EndpointSliceDiscovery(self._kube_api, service=cfg.k8s_service_name,
                                      namespace=cfg.k8s_namespace,
                                      port_name=cfg.k8s_port_name)

    @property
    def source_name(self) -> str:
        where = ",".join(self.config.upstream_typha_addrs) or (
            f"EndpointSlices of {self.config.k8s_namespace}/{self.config.k8s_service_name}")
        return f"typha ({self.source.protocol}: {where})"

    def make_pipeline(self, syncer_type: str, feed: CacheFeed) -> RelayPipeline:
        return RelayPipeline(
            syncer_type, feed, UpstreamSet(self.discovery), self.source,
            deadline=self.config.watch_stall_timeout_secs,
            on_lag=self.upstream_lag.labels(syncer=syncer_type).set,
            on_failover=self.upstream_failovers.labels(syncer=syncer_type).inc)

    def _cache_report(self, pipeline: RelayPipeline) -> Report:
        detail = pipeline.describe()
        if pipeline.failing:
            detail = "; ".join([*pipeline.failing.values(), detail])
        return Report(live=True, ready=pipeline.ready, detail=detail)

    async def start_first(self, nursery: trio.Nursery) -> None:
        if self._kube_api is not None:
            await nursery.start(self._kube_api.run)

    async def open_listeners(self) -> list[SocketListener]:
        return list(await self.open_tcp_listeners())

    async def aclose(self) -> None:
        if self._kube_api is not None:
            await self._kube_api.aclose()


def _upstream_tls(cfg: Config) -> UpstreamTLS | None:
    """TLS to the upstreams, as calico-node's to Typha: the upstream's certificate must
    chain to the CA and carry the CN or URI SAN; the host name is not checked."""
    if not cfg.upstream_typha_ca_file:
        return None
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                             cafile=cfg.upstream_typha_ca_file)
        context.check_hostname = False
        if cfg.upstream_typha_cert_file:
            context.load_cert_chain(cfg.upstream_typha_cert_file, cfg.upstream_typha_key_file)
    except (ssl.SSLError, OSError) as exc:
        raise UpstreamTLSFiles(
            "cannot load the relay's TLS files (TYPHA_UPSTREAMTYPHACAFILE, "
            f"TYPHA_UPSTREAMTYPHACERTFILE, TYPHA_UPSTREAMTYPHAKEYFILE): {exc}") from None
    return UpstreamTLS(context, server_cn=cfg.upstream_typha_cn,
                       server_uri_san=cfg.upstream_typha_uri_san)


class UpstreamTLSFiles(StartupError):
    exit_code = EXIT_TLS_FILES
