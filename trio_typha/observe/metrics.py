"""Typha's Prometheus metrics, same names, types and labels (Calico's typha/pkg/syncserver/
sync_server.go and typha/pkg/snapcache/cache.go register them).

One :class:`Metrics` per daemon, on its own registry so tests can create several servers in
one process.  Per-syncer series exist for all four syncer types from the start, as in Typha.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.utils import floatToGoString

from ..model.kv import SYNCER_TYPES
from .quantiles import QuantileSummary

#: How a gRPC stream can start (typha_resume_total's method label).
RESUME_METHODS = ("snapshot", "position", "digest")

if TYPE_CHECKING:
    from ..cache.fanout import RoundResult


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, *,
                 clock: Callable[[], float], process_metrics: bool = True,
                 runtime_metrics: bool | None = None) -> None:
        """``clock``: the time the summaries' windows slide by (the owner's trio clock);
        ``process_metrics``: process_* (PrometheusProcessMetricsEnabled);
        ``runtime_metrics``: the interpreter's python_gc_* and python_info, what Go's go_*
        are to Typha (PrometheusGoMetricsEnabled; by default as ``process_metrics``)."""
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
        runtime = process_metrics if runtime_metrics is None else runtime_metrics
        for wanted, collectors in ((process_metrics, (PROCESS_COLLECTOR,)),
                                   (runtime, (GC_COLLECTOR, PLATFORM_COLLECTOR))):
            for collector in collectors if wanted else ():
                with contextlib.suppress(ValueError):  # already on this registry
                    self.registry.register(collector)
        r = self.registry
        self.connections_accepted = Counter(
            "typha_connections_accepted", "Total number of connections accepted over time.",
            registry=r)
        self.connections_dropped = Counter(
            "typha_connections_dropped",
            "Total number of connections dropped due to rebalancing.", registry=r)
        self.connections_active = Gauge(
            "typha_connections_active", "Number of open client connections (including "
            "connections that have not completed the handshake).", registry=r)
        self.connections_streaming = Gauge(
            "typha_connections_streaming", "Number of client connections that are streaming.",
            ["syncer"], registry=r)
        self.connections_grace_used = Counter(
            "typha_connections_grace_used", "Number of connections that made use of the "
            "grace period to catch up after sending the initial snapshot.", ["syncer"],
            registry=r)
        self.breadcrumb_seq_number = Gauge(
            "typha_breadcrumb_seq_number", "Current (server-local) sequence number; number of "
            "snapshot deltas processed.", ["syncer"], registry=r)
        self.breadcrumb_non_block = Counter(
            "typha_breadcrumb_non_block", "Count of the number of times Typha got the next "
            "breadcrumb without blocking.", ["syncer"], registry=r)
        self.breadcrumb_block = Counter(
            "typha_breadcrumb_block", "Count of the number of times Typha got the next "
            "breadcrumb after blocking.", ["syncer"], registry=r)
        self.updates_total = Counter(
            "typha_updates_total", "Total number of updates received from the Syncer.",
            ["syncer"], registry=r)
        self.updates_skipped = Counter(
            "typha_updates_skipped", "Total number of updates skipped as duplicates.",
            ["syncer"], registry=r)
        self.cache_size = Gauge(
            "typha_cache_size", "Number of key/value pairs in Typha's in-memory cache.",
            ["syncer"], registry=r)
        self.snapshots_generated = Counter(
            "typha_snapshots_generated", "Number of binary snapshots generated.", ["syncer"],
            registry=r)
        self.snapshots_reused = Counter(
            "typha_snapshots_reused", "Number of binary snapshots that were reused.",
            ["syncer"], registry=r)
        self.resume_total = Counter(
            "typha_resume_total", "gRPC streams started, by how: a snapshot or a resume by "
            "position or by digest.", ["syncer", "method"], registry=r)
        self.resume_bytes = Counter(
            "typha_resume_bytes_total", "Bytes sent to start gRPC streams (header to "
            "finished, digest queries included), by how they started.",
            ["syncer", "method"], registry=r)
        self.resume_history_bytes = Gauge(
            "typha_resume_history_bytes", "Key and value bytes of the breadcrumb history "
            "kept for resumes by position.", ["syncer"], registry=r)
        self.snapshot_raw_bytes = Gauge(
            "typha_snapshot_raw_bytes", "Size of the most recent binary snapshot before "
            "compression.", ["syncer"], registry=r)
        self.snapshot_compressed_bytes = Gauge(
            "typha_snapshot_compressed_bytes", "Size of the most recent binary snapshot after "
            "compression.", ["syncer"], registry=r)
        self.client_snapshot_send_secs = QuantileSummary(
            "typha_client_snapshot_send_secs", "How long it took to send the initial snapshot "
            "to each client.", ["syncer"], registry=r, clock=clock)
        self.client_latency_secs = QuantileSummary(
            "typha_client_latency_secs", "Per-client latency.  I.e. how far behind the current "
            "state is each client.", ["syncer"], registry=r, clock=clock, max_age=60.0,
            age_buckets=2)
        self.client_write_latency_secs = QuantileSummary(
            "typha_client_write_latency_secs", "Distribution of latency for each client write.",
            ["syncer"], registry=r, clock=clock)
        self.next_breadcrumb_latency_secs = QuantileSummary(
            "typha_next_breadcrumb_latency_secs", "Time to retrieve next breadcrumb when "
            "batching.", ["syncer"], registry=r, clock=clock)
        self.encodings_built = Gauge(
            "typha_breadcrumb_encodings_built", "Breadcrumb delta encodings this process has "
            "built, by encoding (each is built once per breadcrumb; ServerWorkers workers "
            "send the primary's and build none).", ["encoding"], registry=r)
        self.ping_latency = QuantileSummary(
            "typha_ping_latency", "Round-trip ping latency to client.", ["syncer"], registry=r,
            clock=clock)
        self.kvs_per_msg = QuantileSummary(
            "typha_kvs_per_msg", "Number of KV pairs sent in each message.", ["syncer"],
            registry=r, clock=clock)
        self.breadcrumb_size = QuantileSummary(
            "typha_breadcrumb_size", "Number of KVs recorded in each breadcrumb.", ["syncer"],
            registry=r, clock=clock)
        self.cache_staleness = Gauge(
            "trio_typha_cache_pending_event_age_secs", "Age of the oldest datastore event "
            "that is not in the cache yet (0 when none is pending).", ["syncer"], registry=r)
        self.h2_abuse_closed = Counter(
            "typha_h2_abuse_closed", "HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM "
            "for going over a per-second frame budget, by flood kind.", ["kind"], registry=r)
        self.tls_handshake_failures = Counter(
            "typha_tls_handshake_failures", "Failed TLS handshakes (and rejected client "
            "identities) on the sync port, by reason.", ["reason"], registry=r)
        self.logs_dropped = Counter(
            "typha_logs_dropped", "Number of logs dropped because the output stream was "
            "blocked.", registry=r)
        self.log_errors = Counter(
            "typha_log_errors", "Number of errors encountered while logging.", registry=r)
        self.watch_ages = WatchAges()
        r.register(self.watch_ages)
        from ..tls.diagnosis import REASONS
        for reason in REASONS:
            self.tls_handshake_failures.labels(reason=reason)
        for syncer in SYNCER_TYPES:
            for metric in vars(self).values():
                if isinstance(metric, MetricWrapperBase | QuantileSummary) \
                        and metric._labelnames == ("syncer",):
                    metric.labels(syncer=syncer)

    def count_encodings(self, built: Mapping[str, Callable[[], float]]) -> None:
        """``typha_breadcrumb_encodings_built``: how many of each encoding (by name) this
        process has built, read from ``built`` at each scrape."""
        for name, count in built.items():
            self.encodings_built.labels(encoding=name).set_function(count)

    def exposition(self) -> bytes:
        """Text exposition with Typha's exact counter names.

        prometheus-client appends ``_total`` to every counter sample and adds ``_created``;
        Go's client does neither, and dashboards written for Typha query the Go names.
        """
        out: list[str] = []
        for family in self.registry.collect():
            name = family.name + "_total" if family.name in _TOTAL_SUFFIXED else family.name
            mtype = family.type if family.type != "unknown" else "untyped"
            out.append(f"# HELP {name} {_escape_help(family.documentation)}")
            out.append(f"# TYPE {name} {mtype}")
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                sname = name if (family.type == "counter" and s.name.endswith("_total")) \
                    else s.name
                labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels.items())
                out.append(f"{sname}{{{labels}}} {floatToGoString(s.value)}" if labels
                           else f"{sname} {floatToGoString(s.value)}")
        return ("\n".join(out) + "\n").encode()

    def handle(self, path: str) -> tuple[int, str, bytes] | None:
        if path != "/metrics":
            return None
        return 200, "text/plain; version=0.0.4; charset=utf-8", self.exposition()


# Counters whose name itself ends in _total (prometheus-client strips the suffix from every
# counter's family name): Typha's, and ours named the Prometheus way.
_TOTAL_SUFFIXED = frozenset({"typha_updates", "typha_resume", "typha_resume_bytes"})


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def observe_many(summary: Any, value: float, count: int) -> None:
    """``count`` observations of ``value`` on a summary child, in O(1) (a broadcast round
    delivers to a thousand clients at once); see :mod:`.quantiles`."""
    summary.observe_many(value, count)
class WatchAges:
    """``typha_watch_progress_age_seconds{watch}``: per datastore watch stream, the seconds
    since its last event, progress notification, bookmark or confirming cross-check
    (trio_typha/datastore/stall.py), read from ``source`` at each scrape."""

    NAME = "typha_watch_progress_age_seconds"

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[tuple[str, float]]] | None = None

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.NAME, "Seconds since each datastore watch stream last "
                                 "delivered an event or progress (or was confirmed current).",
                                 labels=["watch"])

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for name, age in self.source() if self.source is not None else ():
            family.add_metric([name], age)
        yield family


class SyncerMetrics:
    """The per-syncer series a client session updates, bound to their label once."""

    def __init__(self, metrics: Metrics, syncer: str) -> None:
        m = metrics
        self.streaming = m.connections_streaming.labels(syncer=syncer)
        self.grace_used = m.connections_grace_used.labels(syncer=syncer)
        self.snapshot_send_secs = m.client_snapshot_send_secs.labels(syncer=syncer)
        self.ping_latency = m.ping_latency.labels(syncer=syncer)
        self.kvs_per_msg = m.kvs_per_msg.labels(syncer=syncer)
        self.client_latency = m.client_latency_secs.labels(syncer=syncer)
        self.snapshots_generated = m.snapshots_generated.labels(syncer=syncer)
        self.snapshots_reused = m.snapshots_reused.labels(syncer=syncer)
        self.snapshot_compressed_bytes = m.snapshot_compressed_bytes.labels(syncer=syncer)
        self.breadcrumb_block = m.breadcrumb_block.labels(syncer=syncer)
        self.breadcrumb_non_block = m.breadcrumb_non_block.labels(syncer=syncer)
        self.resume_total = {k: m.resume_total.labels(syncer=syncer, method=k)
                             for k in RESUME_METHODS}
        self.resume_bytes = {k: m.resume_bytes.labels(syncer=syncer, method=k)
                             for k in RESUME_METHODS}

    def broadcast_round(self, result: RoundResult) -> None:
        """A broadcast round's deliveries, counted as the writers count theirs."""
        for d in result.delivered:
            observe_many(self.kvs_per_msg, sum(len(c.updates) for c in d.crumbs), d.clients)
            observe_many(self.client_latency, 0.0, d.clients)  # caught up: at the newest
            self.breadcrumb_block.inc(d.clients)
