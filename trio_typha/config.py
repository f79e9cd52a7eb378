"""One frozen Config, loaded once from Typha's environment names, a config file and flags.

Parameters keep Typha's names (``TYPHA_<NAME>``, case-insensitive; INI config file, default
``/etc/calico/typha.cfg``, silently skipped when absent).  Precedence, lowest first: default,
config file, environment, command-line flags.  Unlike Typha, which replaces an invalid value
with the default and carries on, an invalid value here is a :class:`ConfigError` naming the
variable and the accepted values, and the CLI exits non-zero: an operator learns at once.

The variables Typha reads outside its own ``TYPHA_*`` parameters are declared here too, each
under its own variable names and read from the environment only (not the config file):
Calico's client environment for the Kubernetes API (libcalico-go/lib/apiconfig/apiconfig.go,
each name tried with the ``CALICO_`` prefix first, as ``envconfig.Process("calico")``),
``TLS_MIN_VERSION`` / ``TLS_CIPHER_SUITES`` (crypto/pkg/tls/tls.go, read by Typha's sync
server) and ``FELIX_INTERFACEPREFIX`` (libcalico-go/lib/backend/k8s/conversion/
workload_endpoint_default.go).

This module is pure: it declares and parses, and :mod:`.config_sources` (the only module
that reads the environment) reads the variables and the file and hands their text in.
"""

from __future__ import annotations

__sans_io__ = True

import configparser
import dataclasses
import logging
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_CONFIG_FILE = "/etc/calico/typha.cfg"


class ConfigError(ValueError):
    """A parameter has an invalid value; the message names it and what is accepted."""


# --- value parsers -------------------------------------------------------------------------

Parser = Callable[[str], Any]

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def _bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError("expected a boolean: true/1/yes/y/t or false/0/no/n/f")


def _int(lo: int | None = None, hi: int | None = None) -> Parser:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip(), 0)
        except ValueError:
            raise ValueError(f"expected an integer{_range(lo, hi)}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError(f"expected an integer{_range(lo, hi)}")
        return value
    return parse


def _range(lo: int | None, hi: int | None) -> str:
    if lo is None and hi is None:
        return ""
    return f" in {'' if lo is None else lo}..{'' if hi is None else hi}"


def _seconds(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("expected a number of seconds, e.g. 0.5 or 300") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("expected a finite number of seconds")
    return value


def _positive_seconds(raw: str) -> float:
    value = _seconds(raw)
    if value <= 0:
        raise ValueError("expected a number of seconds > 0")
    return value


def _oneof(*choices: str) -> Parser:
    canon = {c.lower(): c for c in choices}

    def parse(raw: str) -> str:
        try:
            return canon[raw.strip().lower()]
        except KeyError:
            raise ValueError(f"expected one of: {', '.join(choices)}") from None
    return parse


def _string(raw: str) -> str:
    return raw


_HOST_RE = re.compile(r"^[a-zA-Z0-9:._+-]{1,64}$")


def _host(raw: str) -> str:
    if not _HOST_RE.match(raw):
        raise ValueError("expected an IPv4/IPv6 address or host name (no spaces, at most 64 chars)")
    return raw


def _file_must_exist(raw: str) -> str:
    """A path; :mod:`.config_sources` checks that the file exists once everything is
    parsed (see :attr:`Param.must_exist`)."""
    return raw


def _endpoint(text: str) -> str:
    url = urllib.parse.urlsplit(text)
    if url.scheme not in ("http", "https"):
        raise ValueError(f"{text!r}: scheme must be http or https")
    if not url.hostname:
        raise ValueError(f"{text!r}: no host")
    try:
        url.port  # noqa: B018 - validates the port
    except ValueError:
        raise ValueError(f"{text!r}: invalid port") from None
    if url.username is not None or url.query or url.fragment or url.path not in ("", "/"):
        raise ValueError(f"{text!r}: expected http(s)://hostname:port only (no user info, "
                         "path, query or fragment)")
    return f"{url.scheme}://{url.netloc}/"


def _endpoint_list(raw: str) -> tuple[str, ...]:
    """Typha's ``endpoint-list``: comma-separated ``http(s)://host:port`` URLs, each given a
    ``/`` path; empty entries are skipped (typha/pkg/config/param_types.go)."""
    return tuple(_endpoint(part) for part in (p.strip() for p in raw.split(",")) if part)


#: Typha's ``authority`` (typha/pkg/config/config_params.go, AuthorityRegexp), with a
#: port that TCP can use.
_AUTHORITY_RE = re.compile(r"^[^:/]+:(\d+)$")


def _authority(raw: str) -> str:
    match = _AUTHORITY_RE.match(raw)
    if not match or not 0 < int(match.group(1)) < 65536:
        raise ValueError("expected host:port (an IPv6 address needs EtcdEndpoints)")
    return raw


def _authority_list(raw: str) -> tuple[str, ...]:
    """Comma-separated ``host:port`` entries (empty entries skipped)."""
    return tuple(_authority(part) for part in (p.strip() for p in raw.split(",")) if part)


_HOST_PORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\],]+)(?::(\d+))?$")


def _address_list(raw: str) -> tuple[str, ...]:
    """Comma-separated ``host:port`` (``[v6]:port``; a bare host means port 5473)."""
    out = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        match = _HOST_PORT_RE.match(part)
        if not match or (match.group(2) and not 0 < int(match.group(2)) < 65536):
            raise ValueError(f"{part!r} is not host:port")
        out.append(part if match.group(2) else f"{part}:5473")
    return tuple(out)


#: What ``TLS_CIPHER_SUITES`` accepts: Calico's supported suites by Go name
#: (crypto/pkg/tls/tls.go: its TLS 1.3, TLS 1.2 and legacy lists), each with its OpenSSL
#: name; None for a TLS 1.3 suite, which OpenSSL (like Go) does not let a program choose.
CIPHER_SUITES: Mapping[str, str | None] = {
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    # Calico's legacy suites: accepted when named, never a default.
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
}
#: Calico's default: every suite but the legacy ones (DefaultCiphers).
DEFAULT_CIPHER_SUITES = tuple(CIPHER_SUITES)[:-2]


def _cipher_suites(raw: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    unknown = [n for n in names if n not in CIPHER_SUITES]
    if unknown:
        raise ValueError(f"unsupported cipher suite(s) {', '.join(unknown)}; expected Go "
                         f"names such as {DEFAULT_CIPHER_SUITES[3]}")
    return names or DEFAULT_CIPHER_SUITES


#: The most processes ServerWorkers' default starts.  Each worker holds its own copy of
#: the KV map and builds its own snapshots (tens of MiB on a large cluster), and the
#: primary alone watches the datastore, runs the pipelines, encodes every breadcrumb and
#: writes it to every worker: past about eight processes the primary's one core is the
#: limit and more workers only cost memory.  Typha's usual share is a few hundred nodes
#: per replica, which eight processes serve with room to spare.
MAX_DEFAULT_WORKERS = 8

#: Usable CPUs below which ServerWorkers' default is the one process.  On 2 usable CPUs
#: (``python -m bench storm|steady|startup --workers 1|2|4``, docs/performance.md,
#: "ServerWorkers") no worker paid for itself: a 1,000-client storm in sync no sooner
#: beyond the machine's noise on up to a third more server CPU, ready on etcd 0.6-1.1 s
#: later (the workers' start and their copy of the caches take the same cores as the
#: pipelines), steady delay p50 and p99 2-5x worse, and 75-105 MiB of RSS per worker.  A
#: worker only pays with a core of its own beside the primary's and what the clients'
#: network work and the datastore client take; 3 CPUs were not measured, so the threshold
#: stays above them.
MIN_CPUS_FOR_WORKERS = 4


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter as declared on a :class:`Config` field (see :func:`param`)."""

    name: str  # Typha's parameter name; env is TYPHA_<NAME.upper()>
    field: str  # Config attribute
    parse: Parser
    default: Any
    doc: str
    zero: Any = None  # value of "none"; None means "none" is not allowed
    #: Typha's built-in default, used instead of a value <= 0 when the server is built (a
    #: callable is asked then: a default that depends on the machine).
    fallback: Any = None
    own: bool = False  # trio-typha's own parameter, not Typha's
    #: For a variable outside Typha's parameters: the environment names read, first set
    #: one wins (the config file does not set these).  Empty: ``TYPHA_<NAME>``.
    variables: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        return self.variables[0] if self.variables else "TYPHA_" + self.name.upper()

    @property
    def must_exist(self) -> bool:
        """The value, when set, names a file that must exist."""
        return self.parse is _file_must_exist

    def effective(self, value: Any) -> Any:
        """``value`` after Typha's re-defaulting of values <= 0 (where it re-defaults)."""
        if self.fallback is not None and value <= 0:
            return self.fallback() if callable(self.fallback) else self.fallback
        return value


def param(name: str, parse: Parser, default: Any, doc: str, *, zero: Any = ...,
          fallback: Any = None, own: bool = False, variables: tuple[str, ...] = ()) -> Any:
    """Declare a :class:`Config` field as Typha parameter ``name``.

    ``zero`` is the value ``none`` sets (by default the type's zero value; None forbids
    ``none``); ``fallback`` is Typha's own default for a value <= 0; ``variables`` names
    the environment variables of a setting that is not a ``TYPHA_*`` parameter.
    """
    if zero is ...:
        zero = {bool: False, int: 0, float: 0.0, str: ""}.get(type(default), default)
    spec = {"name": name, "parse": parse, "doc": doc, "zero": zero, "fallback": fallback,
            "own": own, "variables": variables}
    return dataclasses.field(default=default, metadata={"typha_param": spec})


@dataclass(frozen=True, slots=True)
class Config:
    """Every parameter's final value; build with :func:`.config_sources.load_config`.

    Each field is declared once, here: Typha's name, parser, default and meaning.  The
    parameter table (:data:`PARAMS`), ``ServerSettings`` and ``trio-typha serve --help`` are
    derived from these declarations.  Fields are as configured; the typed properties below
    the fields give a value as the server uses it, after Typha's re-defaulting.
    """

    datastore_type: str = param(
        "DatastoreType", _oneof("kubernetes", "etcdv3", "memory", "typha"), "etcdv3",
        "datastore to sync from: kubernetes, etcdv3, trio-typha's embedded memory, or "
        "typha: relay mode, follow another Typha (UpstreamTyphaAddrs)", zero=None)
    etcd_addr: str = param("EtcdAddr", _authority, "127.0.0.1:2379",
                           "etcd host:port, used when EtcdEndpoints is empty")
    etcd_scheme: str = param("EtcdScheme", _oneof("http", "https"), "http",
                             "scheme used with EtcdAddr")
    etcd_key_file: str = param("EtcdKeyFile", _file_must_exist, "", "etcd client TLS key")
    etcd_cert_file: str = param("EtcdCertFile", _file_must_exist, "",
                                "etcd client TLS certificate")
    etcd_ca_file: str = param("EtcdCaFile", _file_must_exist, "",
                              "CA bundle that signs etcd's certificate")
    etcd_endpoints: tuple[str, ...] = param(
        "EtcdEndpoints", _endpoint_list, (), "comma-separated etcd URLs; replaces "
        "EtcdScheme + EtcdAddr", zero=())
    log_severity_screen: str = param("LogSeverityScreen", _oneof(*LOG_LEVELS), "INFO",
                                     "log level on stderr")
    # Typha's default is /var/log/calico/typha.log, which its own image's typha.cfg turns
    # off ("none"); here it is off unless set.
    log_file_path: str = param("LogFilePath", _string, "",
                               "also log to this file (empty or none: no file)")
    log_severity_file: str = param("LogSeverityFile", _oneof(*LOG_LEVELS), "INFO",
                                   "log level of LogFilePath")
    log_severity_sys: str = param("LogSeveritySys", _oneof(*LOG_LEVELS), "INFO",
                                  "log level to the local syslog (tag calico-typha); none: off")
    debug_memory_profile_path: str = param(
        "DebugMemoryProfilePath", _string, "",
        "on SIGUSR1 write a tracemalloc snapshot here (<timestamp> is replaced)")
    debug_disable_log_dropping: bool = param(
        "DebugDisableLogDropping", _bool, False,
        "Typha: block instead of dropping logs; trio-typha never drops logs")
    debug_host: str = param("DebugHost", _host, "localhost", "debug endpoint bind address")
    debug_port: int = param("DebugPort", _int(0, 65535), 0,
                            "debug endpoint port: /debug/tasks, /debug/memory, /debug/config "
                            "(0: off)")
    health_enabled: bool = param("HealthEnabled", _bool, False,
                                 "serve /liveness and /readiness")
    health_host: str = param("HealthHost", _host, "localhost", "health bind address")
    health_port: int = param("HealthPort", _int(0, 65535), 9098, "health port")
    prometheus_metrics_enabled: bool = param("PrometheusMetricsEnabled", _bool, False,
                                             "serve Prometheus /metrics")
    prometheus_metrics_host: str = param("PrometheusMetricsHost", _string, "",
                                         "metrics bind address (empty: all)")
    prometheus_metrics_port: int = param("PrometheusMetricsPort", _int(0, 65535), 9093,
                                         "metrics port")
    prometheus_process_metrics_enabled: bool = param(
        "PrometheusProcessMetricsEnabled", _bool, True, "include process_* metrics")
    prometheus_go_metrics_enabled: bool = param(
        "PrometheusGoMetricsEnabled", _bool, True,
        "include the runtime metrics (Go's go_*; here Python's python_gc_* and python_info)")
    prometheus_metrics_cert_file: str = param(
        "PrometheusMetricsCertFile", _string, "",
        "serve /metrics over HTTPS with this certificate (with PrometheusMetricsKeyFile)")
    prometheus_metrics_key_file: str = param(
        "PrometheusMetricsKeyFile", _string, "", "key of PrometheusMetricsCertFile")
    prometheus_metrics_ca_file: str = param(
        "PrometheusMetricsCAFile", _string, "",
        "CA bundle that signs scrapers' client certificates (metrics over HTTPS)")
    prometheus_metrics_client_auth: str = param(
        "PrometheusMetricsClientAuth",
        _oneof("RequireAndVerifyClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven",
               "NoClientCert"), "NoClientCert",
        "client certificates on the metrics port over HTTPS")
    snapshot_cache_max_batch_size: int = param(
        "SnapshotCacheMaxBatchSize", _int(1), 100,
        "most datastore updates folded into one breadcrumb")
    # Typha: a value < 1 becomes 100 (sync_server.go, defaultMaxMessageSize).
    server_max_message_size: int = param(
        "ServerMaxMessageSize", _int(1), 100, "most KVs per message (snapshot and deltas)",
        fallback=100)
    # Typha re-defaults every server duration <= 0 to its built-in default (sync_server.go,
    # the default* constants); the fallbacks below are those defaults.
    server_max_fall_behind_secs: float = param(
        "ServerMaxFallBehindSecs", _seconds, 300.0,
        "drop a client whose next update is this much older than the newest", fallback=300.0)
    server_new_client_fall_behind_grace_period: float = param(
        "ServerNewClientFallBehindGracePeriod", _seconds, 300.0,
        "after its snapshot, how long a new client may stay behind", fallback=300.0)
    # Typha's config default is 10 ms, but its server's fallback for <= 0 is 100 ms.
    server_min_batching_age_threshold_secs: float = param(
        "ServerMinBatchingAgeThresholdSecs", _seconds, 0.01,
        "a client closer than this to the newest data gets each breadcrumb unbatched",
        fallback=0.1)
    server_ping_interval_secs: float = param(
        "ServerPingIntervalSecs", _seconds, 10.0, "ping period (plus up to 10% jitter)",
        fallback=10.0)
    # No fallback: Typha replaces any PongTimeout <= 2 x PingInterval by 6 x PingInterval
    # (ServerSettings.normalized).
    server_pong_timeout_secs: float = param(
        "ServerPongTimeoutSecs", _seconds, 60.0, "drop a client that sends no pong for this long")
    server_handshake_timeout_secs: float = param(
        "ServerHandshakeTimeoutSecs", _seconds, 10.0,
        "time from accept to the client's hello (TLS handshake included)", fallback=10.0)
    server_write_timeout_secs: float = param(
        "ServerWriteTimeoutSecs", _seconds, 120.0, "deadline of each socket write",
        fallback=120.0)
    server_port: int = param("ServerPort", _int(0, 65535), 0, "listen port (0 means 5473)")
    server_host: str = param("ServerHost", _host, "", "listen address (empty: all)")
    # <= 0: the CPUs this process may use (affinity and cgroup cpu.max), at most
    # MAX_DEFAULT_WORKERS, and 1 below MIN_CPUS_FOR_WORKERS, counted where the server is
    # built (cpus.py); 1: the single-process server.
    server_workers: int = param(
        "ServerWorkers", _int(None, 64), 0, "processes serving the port: this one (which owns "
        "the datastore watch and the caches) plus ServerWorkers-1 workers fed from it; "
        "0 or less: the CPUs this process may use (affinity, cgroup CPU quota), at most "
        f"{MAX_DEFAULT_WORKERS}; one process below {MIN_CPUS_FOR_WORKERS} usable CPUs, "
        "where a worker costs more than it serves", own=True)
    server_key_file: str = param("ServerKeyFile", _file_must_exist, "", "server TLS key")
    server_cert_file: str = param("ServerCertFile", _file_must_exist, "",
                                  "server TLS certificate")
    ca_file: str = param("CAFile", _file_must_exist, "",
                         "CA bundle that client certificates must chain to")
    client_cn: str = param("ClientCN", _string, "", "required client certificate CN")
    client_uri_san: str = param("ClientURISAN", _string, "",
                                "required client certificate URI SAN")
    connection_rebalancing_mode: str = param(
        "ConnectionRebalancingMode", _oneof("none", "kubernetes"), "none",
        "kubernetes: derive the connection limit from the number of Typhas and nodes")
    connection_drop_interval_secs: float = param(
        "ConnectionDropIntervalSecs", _seconds, 1.0,
        "while over the connection limit, drop one connection per interval", fallback=1.0)
    shutdown_timeout_secs: float = param(
        "ShutdownTimeoutSecs", _seconds, 300.0, "time budget of the graceful drain",
        fallback=300.0)
    shutdown_connection_drop_interval_max_secs: float = param(
        "ShutdownConnectionDropIntervalMaxSecs", _seconds, 1.0,
        "longest pause between two connections closed while draining", fallback=1.0)
    # Typha: MaxConns <= 0 becomes math.MaxInt32.
    max_connections_upper_limit: int = param(
        "MaxConnectionsUpperLimit", _int(1), 10000, "starting and highest connection limit",
        fallback=(1 << 31) - 1)
    max_connections_lower_limit: int = param(
        "MaxConnectionsLowerLimit", _int(1), 400, "lowest computed connection limit")
    k8s_service_poll_interval_secs: float = param(
        "K8sServicePollIntervalSecs", _seconds, 30.0, "connection rebalancing poll interval")
    k8s_namespace: str = param("K8sNamespace", _string, "kube-system",
                               "namespace of Typha's own Service")
    k8s_service_name: str = param("K8sServiceName", _string, "calico-typha",
                                  "name of Typha's own Service")
    k8s_port_name: str = param("K8sPortName", _string, "calico-typha",
                               "port name of Typha's Service in its EndpointSlices")
    # trio-typha's own parameters.
    server_protocols: str = param(
        "ServerProtocols", _oneof("all", "typha", "grpc"), "all",
        "protocols served on the port: Typha's gob protocol, gRPC, or both", own=True)
    server_max_concurrent_streams: int = param(
        "ServerMaxConcurrentStreams", _int(1, 1 << 20), 16,
        "HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS", own=True)
    # See trio_typha/sessions/snapshot_turns.py; Typha has no such parameter.
    server_max_snapshot_sends: int = param(
        "ServerMaxSnapshotSends", _int(0, 1 << 20), 32,
        "snapshots being sent at once, over every connection; the others wait their turn "
        "in arrival order, their hello read and first message written (0: no limit)",
        own=True)
    server_drain_timeout_secs: float = param(
        "ServerDrainTimeoutSecs", _seconds, 10.0,
        "after GOAWAY, how long HTTP/2 streams may finish", own=True)
    server_h2_idle_timeout_secs: float = param(
        "ServerH2IdleTimeoutSecs", _positive_seconds, 60.0,
        "an HTTP/2 connection with no open stream for this long gets GOAWAY and is closed",
        own=True)
    snapshot_reuse_age_secs: float = param(
        "SnapshotReuseAgeSecs", _seconds, 1.0,
        "clients connecting within this time share one snapshot", own=True)
    resume_history_updates: int = param(
        "ResumeHistoryUpdates", _int(0, 1 << 24), 10000,
        "gRPC resume by position: updates of breadcrumb history kept per syncer", own=True)
    resume_history_age_secs: float = param(
        "ResumeHistoryAgeSecs", _seconds, 600.0,
        "gRPC resume by position: oldest breadcrumb history kept", own=True)
    resume_digest_budget: int = param(
        "ResumeDigestBudget", _int(0, 1 << 24), 20000,
        "gRPC resume by digest: hashes and leaves compared per session before a snapshot "
        "is sent instead (0: no resume by digest)", own=True)
    cache_wake_interval_secs: float = param(
        "CacheWakeIntervalSecs", _seconds, 0.0,
        "wake clients at most once per interval (0: on every update)", own=True)
    # See trio_typha/datastore/stall.py; Typha has no such parameter.
    watch_stall_timeout_secs: float = param(
        "WatchStallTimeoutSecs", _positive_seconds, 30.0,
        "how long a datastore watch stream may stay silent before it is checked and "
        "re-established", own=True)
    # Relay mode (DatastoreType=typha): trio_typha/relay/, docs/relay.md.
    upstream_typha_addrs: tuple[str, ...] = param(
        "UpstreamTyphaAddrs", _address_list, (),
        "relay mode: comma-separated host:port of the Typhas to follow, tried in turn; "
        "empty: the ready endpoints of K8sNamespace/K8sServiceName's EndpointSlices "
        "(port K8sPortName)", own=True, zero=())
    upstream_typha_protocol: str = param(
        "UpstreamTyphaProtocol", _oneof("feed", "gob"), "feed",
        "relay mode: feed (the upstreams are trio-typha: their breadcrumbs, encodings and "
        "lag) or gob (any Typha, Go Typha too, as calico-node connects)", own=True)
    upstream_typha_ca_file: str = param(
        "UpstreamTyphaCAFile", _file_must_exist, "",
        "relay mode: CA bundle the upstreams' certificates must chain to (turns on TLS)",
        own=True)
    upstream_typha_cert_file: str = param(
        "UpstreamTyphaCertFile", _file_must_exist, "",
        "relay mode: this relay's client certificate for its upstreams", own=True)
    upstream_typha_key_file: str = param(
        "UpstreamTyphaKeyFile", _file_must_exist, "",
        "relay mode: the key of UpstreamTyphaCertFile", own=True)
    upstream_typha_cn: str = param("UpstreamTyphaCN", _string, "",
                                   "relay mode: required CN of the upstreams' certificates",
                                   own=True)
    upstream_typha_uri_san: str = param(
        "UpstreamTyphaURISAN", _string, "",
        "relay mode: required URI SAN of the upstreams' certificates", own=True)
    memory_seed_file: str = param("MemorySeedFile", _file_must_exist, "",
                                  "memory datastore: YAML of resources to load", own=True)
    memory_demo_cluster: str = param(
        "MemoryDemoCluster", _oneof("", "tiny", "small", "medium", "large"), "",
        "memory datastore: synthetic cluster to load", own=True)
    memory_churn_rate: float = param("MemoryChurnRate", _seconds, 0.0,
                                     "memory datastore: writes per second of churn", own=True)
    # Warm start from a sibling (trio_typha/warm/, docs/warm-start.md).
    warm_start_peers: tuple[str, ...] = param(
        "WarmStartPeers", _authority_list, (),
        "siblings' sync ports (host:port, comma-separated) to take the caches' state from "
        "at start instead of listing the datastore", zero=(), own=True)
    warm_start_discovery: bool = param(
        "WarmStartDiscovery", _bool, False,
        "also find siblings in Typha's EndpointSlices (K8sServiceName, K8sNamespace, "
        "K8sPortName) for a warm start", own=True)
    warm_start_timeout_secs: float = param(
        "WarmStartTimeoutSecs", _positive_seconds, 60.0,
        "how long one sibling may take to hand over its state before the next is tried",
        own=True)
    warm_start_peer_cn: str = param(
        "WarmStartPeerCN", _string, "",
        "under TLS: the CN a sibling's certificate must have, either way of a warm start "
        "(with WarmStartPeerURISAN empty too, no warm start is served or taken under TLS)",
        own=True)
    warm_start_peer_uri_san: str = param(
        "WarmStartPeerURISAN", _string, "",
        "under TLS: the URI SAN a sibling's certificate must have (see WarmStartPeerCN)",
        own=True)
    # Typha reads this one before its configuration (typha/pkg/logutils/logutils.go); see
    # early_log_level.
    early_log_severity_screen: str = param(
        "EarlyLogSeverityScreen", _oneof(*LOG_LEVELS), "",
        "log level on stderr while the configuration loads (empty: LogSeverityScreen, "
        "else ERROR)")
    # Calico's settings outside Typha's parameters (the module docstring says where from).
    tls_min_version: str = param(
        "TLSMinVersion", _oneof("1.2", "1.3"), "1.2",
        "lowest TLS version of the sync and metrics servers: 1.2 or 1.3", zero=None,
        variables=("TLS_MIN_VERSION",))
    tls_cipher_suites: tuple[str, ...] = param(
        "TLSCipherSuites", _cipher_suites, DEFAULT_CIPHER_SUITES,
        "TLS 1.2 cipher suites by Go name, comma-separated (TLS 1.3's are fixed)",
        zero=None, variables=("TLS_CIPHER_SUITES",))
    felix_interface_prefix: str = param(
        "FelixInterfacePrefix", _string, "",
        "workload interface prefixes; KDD names a pod's interface after the first "
        "(empty: cali)", variables=("FELIX_INTERFACEPREFIX",))
    kubeconfig: str = param(
        "Kubeconfig", _string, "", "kubeconfig file(s), ':'-separated",
        variables=("CALICO_KUBECONFIG", "KUBECONFIG"))
    k8s_api_endpoint: str = param(
        "K8sAPIEndpoint", _string, "", "Kubernetes API server URL (without a kubeconfig, or "
        "overriding its server)", variables=("CALICO_K8S_API_ENDPOINT", "K8S_API_ENDPOINT"))
    k8s_cert_file: str = param(
        "K8sCertFile", _string, "", "client certificate for the Kubernetes API",
        variables=("CALICO_K8S_CERT_FILE", "K8S_CERT_FILE"))
    k8s_key_file: str = param(
        "K8sKeyFile", _string, "", "key of K8sCertFile",
        variables=("CALICO_K8S_KEY_FILE", "K8S_KEY_FILE"))
    k8s_ca_file: str = param(
        "K8sCAFile", _string, "", "CA bundle that signs the Kubernetes API's certificate",
        variables=("CALICO_K8S_CA_FILE", "K8S_CA_FILE"))
    k8s_insecure_skip_tls_verify: bool = param(
        "K8sInsecureSkipTLSVerify", _bool, False,
        "do not verify the Kubernetes API's certificate",
        variables=("CALICO_K8S_INSECURE_SKIP_TLS_VERIFY", "K8S_INSECURE_SKIP_TLS_VERIFY"))
    k8s_current_context: str = param(
        "K8sCurrentContext", _string, "", "kubeconfig context to use (empty: its current one)",
        variables=("CALICO_K8S_CURRENT_CONTEXT", "K8S_CURRENT_CONTEXT"))
    k8s_use_pod_cidr: bool = param(
        "K8sUsePodCIDR", _bool, False,
        "KDD with host-local IPAM: IPAM blocks from each node's pod CIDR, none watched",
        variables=("CALICO_USE_POD_CIDR", "USE_POD_CIDR"))
    calico_api_group: str = param(
        "CalicoAPIGroup", _string, "", "API group/version of Calico's resources (empty: "
        "discovered)", variables=("CALICO_API_GROUP",))
    kubernetes_service_host: str = param(
        "KubernetesServiceHost", _string, "", "in a pod: the API server's address (set by "
        "Kubernetes)", variables=("KUBERNETES_SERVICE_HOST",))
    kubernetes_service_port: str = param(
        "KubernetesServicePort", _string, "", "in a pod: the API server's port (set by "
        "Kubernetes)", variables=("KUBERNETES_SERVICE_PORT",))
    home: str = param(
        "Home", _string, "", "home directory: $HOME/.kube/config is the last kubeconfig tried",
        variables=("HOME",))

    @property
    def port(self) -> int:
        """The listen port: ServerPort 0 means Typha's default, 5473."""
        return self.server_port or 5473

    @property
    def tls_enabled(self) -> bool:
        return any((self.server_key_file, self.server_cert_file, self.ca_file, self.client_cn,
                    self.client_uri_san))

    @property
    def etcd_urls(self) -> tuple[str, ...]:
        """Where etcd is: EtcdEndpoints, else EtcdScheme://EtcdAddr/ (as Typha's
        DatastoreConfig)."""
        return self.etcd_endpoints or (f"{self.etcd_scheme}://{self.etcd_addr}/",)

    # -- values as the server uses them, after Typha's re-defaulting of values <= 0

    def _redefaulted(self, value: T, field: str) -> T:
        result: T = _BY_FIELD[field].effective(value)
        return result

    @property
    def max_message_size(self) -> int:
        return self._redefaulted(self.server_max_message_size, "server_max_message_size")

    @property
    def max_fall_behind(self) -> float:
        return self._redefaulted(self.server_max_fall_behind_secs,
                                 "server_max_fall_behind_secs")

    @property
    def new_client_fall_behind_grace(self) -> float:
        return self._redefaulted(self.server_new_client_fall_behind_grace_period,
                                 "server_new_client_fall_behind_grace_period")

    @property
    def min_batching_age(self) -> float:
        return self._redefaulted(self.server_min_batching_age_threshold_secs,
                                 "server_min_batching_age_threshold_secs")

    @property
    def ping_interval(self) -> float:
        return self._redefaulted(self.server_ping_interval_secs, "server_ping_interval_secs")

    @property
    def handshake_timeout(self) -> float:
        return self._redefaulted(self.server_handshake_timeout_secs,
                                 "server_handshake_timeout_secs")

    @property
    def write_timeout(self) -> float:
        return self._redefaulted(self.server_write_timeout_secs, "server_write_timeout_secs")

    @property
    def connection_drop_interval(self) -> float:
        return self._redefaulted(self.connection_drop_interval_secs,
                                 "connection_drop_interval_secs")

    @property
    def shutdown_timeout(self) -> float:
        return self._redefaulted(self.shutdown_timeout_secs, "shutdown_timeout_secs")

    @property
    def shutdown_drop_interval_max(self) -> float:
        return self._redefaulted(self.shutdown_connection_drop_interval_max_secs,
                                 "shutdown_connection_drop_interval_max_secs")

    @property
    def max_connections(self) -> int:
        return self._redefaulted(self.max_connections_upper_limit,
                                 "max_connections_upper_limit")

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


#: The parameter table, in declaration order.
PARAMS: tuple[Param, ...] = tuple(
    Param(field=f.name, default=f.default, **f.metadata["typha_param"])
    for f in dataclasses.fields(Config))

_BY_NAME = {p.name.lower(): p for p in PARAMS}
_BY_FIELD = {p.field: p for p in PARAMS}


def setting_names(field: str) -> str:
    """How an operator sets :class:`Config` field ``field``: its variable name(s)."""
    p = _BY_FIELD[field]
    return "/".join(p.variables) if p.variables else p.env


def help_table() -> str:
    """Every parameter, its default and meaning, for ``--help``."""
    lines = []
    for p in PARAMS:
        default = ",".join(p.default) if isinstance(p.default, tuple) else p.default
        own = " [trio-typha]" if p.own else ""
        lines.append(f"  {setting_names(p.field)} (default {default!r}){own}\n      {p.doc}")
    return "\n".join(lines)


def parse_config_file(text: str, source: str) -> dict[str, str]:
    """The settings of an INI config file's ``text`` (a file without a section header is
    read as one section), by name as written."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    if not text.lstrip().startswith("["):
        text = "[global]\n" + text
    try:
        parser.read_string(text, source=source)
    except configparser.Error as exc:
        raise ConfigError(f"config file {source}: {exc}") from exc
    out: dict[str, str] = {}
    for section in parser.sections():
        for key, value in parser.items(section):
            out[key] = value
    return out


_SENSITIVE = ("password", "token", "secret", "credential", "private")


def _shown(name: str, value: str) -> str:
    """``value`` for the log, or ``<redacted>`` when ``name`` looks secret (as Typha)."""
    low = name.lower()
    if low.endswith(("file", "path")):
        return value
    if any(w in low for w in _SENSITIVE) or low.endswith(("key", "cert", "kubeconfig")):
        return "<redacted>"
    return value


def early_log_level(env: Mapping[str, str]) -> str:
    """The stderr level while the configuration loads, as Typha's ConfigureEarlyLogging:
    TYPHA_EARLYLOGSEVERITYSCREEN, else TYPHA_LOGSEVERITYSCREEN, else ERROR.  An invalid
    value gives ERROR here; loading the configuration then reports it."""
    for p in (_BY_FIELD["early_log_severity_screen"], _BY_FIELD["log_severity_screen"]):
        raw = env.get(p.env, "")
        if raw:
            try:
                level: str = p.parse(raw)
            except ValueError:
                break
            return level
    return "ERROR"


def _environment(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Raw environment values by parameter name, each with the variable it came from."""
    out: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        low = name.lower()
        if low.startswith("typha_"):
            out[name.split("_", 1)[1]] = (value, name)
            log.info('Found typha environment variable: %s="%s"', name, _shown(name, value))
    for p in PARAMS:
        for var in p.variables:
            if env.get(var):
                out[p.name] = (env[var], var)
                break
    return out


def configure(env: Mapping[str, str], config_file: tuple[str, dict[str, str]] | None,
              overrides: Mapping[str, str], strict: bool = False) -> Config:
    """Merge defaults < config file < environment < ``overrides`` (flags) into a Config.

    ``env`` is the environment's variables; ``config_file`` the file's origin (for
    messages) and its settings (:func:`parse_config_file`), None for none; ``overrides``
    are keyed by parameter name (case-insensitive).  Raises :class:`ConfigError` on the
    first invalid value or failed cross-field check.  Unknown names are logged and
    ignored, as Typha does for its environment, wherever they come from; with ``strict``
    an unknown flag (``--set``) is an error instead.
    """
    sources: list[tuple[str, dict[str, tuple[str, str]]]] = []
    if config_file is not None:
        origin, file_values = config_file
        sources.append((origin, {k: (v, "") for k, v in file_values.items()}))
    sources.append(("environment", _environment(env)))
    sources.append(("flag", {k: (v, "") for k, v in overrides.items()}))

    values: dict[str, Any] = {}
    for origin, raw_values in sources:
        for raw_name, (raw, var) in raw_values.items():
            param = _BY_NAME.get(raw_name.lower())
            # An outside variable comes only from its own names (or a flag), never from
            # the config file or a TYPHA_ variable of the same name.
            if param is not None and param.variables and not (
                    origin == "flag" or var in param.variables):
                param = None
            if param is None:
                if origin == "flag" and strict:
                    raise ConfigError(f"--set {raw_name}: unknown parameter (--strict-config)")
                if origin == "environment" and raw_name.lower() not in ("configfile",):
                    log.info("Ignoring unknown config param TYPHA_%s", raw_name.upper())
                elif origin != "environment":
                    log.info("Ignoring unknown config param %s (from %s)", raw_name, origin)
                continue
            what = ((var if param.variables else param.env) if origin == "environment"
                    else f"{param.name} (from {origin})")
            if raw == "":
                continue  # Typha ignores empty values; the default stays.
            if raw.strip().lower() == "none":
                if param.zero is None:
                    raise ConfigError(f"{what}: 'none' is not allowed; this parameter is required")
                values[param.field] = param.zero
                continue
            try:
                values[param.field] = param.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{what}: invalid value {raw!r}: {exc}") from None
    cfg = Config(**values)
    _validate(cfg)
    changed = {p.name: _shown(p.name, str(getattr(cfg, p.field))) for p in PARAMS
               if getattr(cfg, p.field) != p.default}
    log.info("Successfully loaded configuration. non-default: %s",
             ", ".join(f"{k}={v}" for k, v in changed.items()) or "none")
    return cfg


def _validate(cfg: Config) -> None:
    if cfg.tls_enabled and not (cfg.server_key_file and cfg.server_cert_file and cfg.ca_file
                                and (cfg.client_cn or cfg.client_uri_san)):
        raise ConfigError(
            "TYPHA_SERVERKEYFILE, TYPHA_SERVERCERTFILE, TYPHA_CAFILE, TYPHA_CLIENTCN/"
            "TYPHA_CLIENTURISAN: if any Typha TLS parameter is set, key, cert and CA files are "
            "all required, plus at least one of ClientCN or ClientURISAN")
    if cfg.datastore_type == "etcdv3" and not cfg.etcd_endpoints:
        for field, name in (("etcd_scheme", "EtcdScheme"), ("etcd_addr", "EtcdAddr")):
            if not getattr(cfg, field):
                raise ConfigError(f"TYPHA_{name.upper()}: EtcdEndpoints and {name} both "
                                  "missing")
    if bool(cfg.etcd_key_file) != bool(cfg.etcd_cert_file):
        missing = "TYPHA_ETCDCERTFILE" if cfg.etcd_key_file else "TYPHA_ETCDKEYFILE"
        raise ConfigError(f"{missing}: the etcd client key and certificate go together")
    if (cfg.warm_start_peers or cfg.warm_start_discovery) and cfg.datastore_type == "memory":
        raise ConfigError("TYPHA_WARMSTARTPEERS / TYPHA_WARMSTARTDISCOVERY: a warm start "
                          "needs DatastoreType kubernetes or etcdv3, not memory")
    if ((cfg.warm_start_peers or cfg.warm_start_discovery) and cfg.tls_enabled
            and not (cfg.warm_start_peer_cn or cfg.warm_start_peer_uri_san)):
        raise ConfigError("TYPHA_WARMSTARTPEERCN / TYPHA_WARMSTARTPEERURISAN: under TLS a "
                          "warm start needs the identity siblings' certificates carry")
    if cfg.datastore_type == "typha":
        _validate_relay(cfg)
    if cfg.max_connections_lower_limit > cfg.max_connections_upper_limit:
        raise ConfigError("TYPHA_MAXCONNECTIONSLOWERLIMIT: must not exceed "
                          "TYPHA_MAXCONNECTIONSUPPERLIMIT")


#: Relay mode: the shortest upstream deadline (a trio-typha's feed pings every second).
RELAY_MIN_DEADLINE = 2.0


def _validate_relay(cfg: Config) -> None:
    tls = (cfg.upstream_typha_ca_file, cfg.upstream_typha_cert_file,
           cfg.upstream_typha_key_file, cfg.upstream_typha_cn, cfg.upstream_typha_uri_san)
    if any(tls):
        if not cfg.upstream_typha_ca_file:
            raise ConfigError("TYPHA_UPSTREAMTYPHACAFILE: required once any UpstreamTypha* "
                              "TLS parameter is set")
        if bool(cfg.upstream_typha_cert_file) != bool(cfg.upstream_typha_key_file):
            missing = ("TYPHA_UPSTREAMTYPHAKEYFILE" if cfg.upstream_typha_cert_file
                       else "TYPHA_UPSTREAMTYPHACERTFILE")
            raise ConfigError(f"{missing}: the relay's client certificate and key go "
                              "together")
        if not (cfg.upstream_typha_cn or cfg.upstream_typha_uri_san):
            raise ConfigError("TYPHA_UPSTREAMTYPHACN/TYPHA_UPSTREAMTYPHAURISAN: with TLS to "
                              "the upstreams, at least one identity to check them by")
    if cfg.watch_stall_timeout_secs < RELAY_MIN_DEADLINE:
        raise ConfigError(
            f"TYPHA_WATCHSTALLTIMEOUTSECS: relay mode needs at least {RELAY_MIN_DEADLINE:g}s "
            "(an upstream's feed pings every second; Go Typha every PingIntervalSecs)")


def param_by_flag(name: str) -> Param:
    """Look up a parameter by Typha name (case-insensitive), for ``--set NAME=VALUE``."""
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown parameter {name!r}") from None
