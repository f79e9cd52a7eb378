"""One frozen Config, loaded once from Typha's environment names, a config file and flags.

Parameters keep Typha's names (``TYPHA_<NAME>``, case-insensitive; INI config file, default
``/etc/calico/typha.cfg``, silently skipped when absent).  Precedence, lowest first: default,
config file, environment, command-line flags.  Unlike Typha, which replaces an invalid value
with the default and carries on, an invalid value here is a :class:`ConfigError` naming the
variable and the accepted values, and the CLI exits non-zero: an operator learns at once.
"""

from __future__ import annotations

import configparser
import dataclasses
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .cpus import MAX_DEFAULT_WORKERS, usable_cpus_default

log = logging.getLogger(__name__)

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
    if raw and not os.path.exists(raw):
        raise ValueError("file does not exist")
    return raw


_ENDPOINT_RE = re.compile(r"^(https?)://[^/@?#:]+(:\d+)?/?$")


def _endpoint_list(raw: str) -> tuple[str, ...]:
    out = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        if not _ENDPOINT_RE.match(part):
            raise ValueError("expected comma-separated http(s)://host:port URLs")
        out.append(part.rstrip("/") + "/")
    return tuple(out)


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

    @property
    def env(self) -> str:
        return "TYPHA_" + self.name.upper()

    def effective(self, value: Any) -> Any:
        """``value`` after Typha's re-defaulting of values <= 0 (where it re-defaults)."""
        if self.fallback is not None and value <= 0:
            return self.fallback() if callable(self.fallback) else self.fallback
        return value


def param(name: str, parse: Parser, default: Any, doc: str, *, zero: Any = ...,
          fallback: Any = None, own: bool = False) -> Any:
    """Declare a :class:`Config` field as Typha parameter ``name``.

    ``zero`` is the value ``none`` sets (by default the type's zero value; None forbids
    ``none``); ``fallback`` is Typha's own default for a value <= 0.
    """
    if zero is ...:
        zero = {bool: False, int: 0, float: 0.0, str: ""}.get(type(default), default)
    spec = {"name": name, "parse": parse, "doc": doc, "zero": zero, "fallback": fallback,
            "own": own}
    return dataclasses.field(default=default, metadata={"typha_param": spec})


@dataclass(frozen=True, slots=True)
class Config:
    """Every parameter's final value; build with :func:`load_config`.

    Each field is declared once, here: Typha's name, parser, default and meaning.  The
    parameter table (:data:`PARAMS`), ``ServerSettings`` and ``trio-typha serve --help`` are
    derived from these declarations.  Values are as configured; the server applies Typha's
    re-defaulting (:meth:`Param.effective`, :meth:`effective`) when it is built.
    """

    datastore_type: str = param(
        "DatastoreType", _oneof("kubernetes", "etcdv3", "memory"), "etcdv3",
        "datastore to sync from: kubernetes, etcdv3, or trio-typha's embedded memory",
        zero=None)
    etcd_addr: str = param("EtcdAddr", _string, "127.0.0.1:2379",
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
    # <= 0: the CPUs this process may use (affinity and cgroup cpu.max), at most 8
    # (cpus.py says why); 1: the single-process server.
    server_workers: int = param(
        "ServerWorkers", _int(None, 64), 0, "processes serving the port: this one (which owns "
        "the datastore watch and the caches) plus ServerWorkers-1 workers fed from it; "
        "0 or less: the CPUs this process may use (affinity, cgroup CPU quota), at most "
        f"{MAX_DEFAULT_WORKERS}", fallback=usable_cpus_default, own=True)
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
    cache_wake_interval_secs: float = param(
        "CacheWakeIntervalSecs", _seconds, 0.0,
        "wake clients at most once per interval (0: on every update)", own=True)
    # See trio_typha/datastore/stall.py; Typha has no such parameter.
    watch_stall_timeout_secs: float = param(
        "WatchStallTimeoutSecs", _positive_seconds, 30.0,
        "how long a datastore watch stream may stay silent before it is checked and "
        "re-established", own=True)
    memory_seed_file: str = param("MemorySeedFile", _file_must_exist, "",
                                  "memory datastore: YAML of resources to load", own=True)
    memory_demo_cluster: str = param(
        "MemoryDemoCluster", _oneof("", "tiny", "small", "medium", "large"), "",
        "memory datastore: synthetic cluster to load", own=True)
    memory_churn_rate: float = param("MemoryChurnRate", _seconds, 0.0,
                                     "memory datastore: writes per second of churn", own=True)

    @property
    def port(self) -> int:
        """The listen port: ServerPort 0 means Typha's default, 5473."""
        return self.server_port or 5473

    @property
    def tls_enabled(self) -> bool:
        return any((self.server_key_file, self.server_cert_file, self.ca_file, self.client_cn,
                    self.client_uri_san))

    def effective(self, name: str) -> Any:
        """Parameter ``name`` (Typha's name) as the server uses it, after re-defaulting."""
        p = param_by_flag(name)
        return p.effective(getattr(self, p.field))

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


#: The parameter table, in declaration order.
PARAMS: tuple[Param, ...] = tuple(
    Param(field=f.name, default=f.default, **f.metadata["typha_param"])
    for f in dataclasses.fields(Config))

_BY_NAME = {p.name.lower(): p for p in PARAMS}


def help_table() -> str:
    """Every parameter, its default and meaning, for ``--help``."""
    lines = []
    for p in PARAMS:
        default = ",".join(p.default) if isinstance(p.default, tuple) else p.default
        own = " [trio-typha]" if p.own else ""
        lines.append(f"  {p.env} (default {default!r}){own}\n      {p.doc}")
    return "\n".join(lines)


def _read_file(path: str, explicit: bool) -> dict[str, str]:
    if not os.path.exists(path):
        if explicit:
            raise ConfigError(f"config file {path}: does not exist")
        log.info("Ignoring absent config file: %s", path)
        return {}
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if not text.lstrip().startswith("["):
            text = "[global]\n" + text
        parser.read_string(text, source=path)
    except (OSError, configparser.Error) as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
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


def load_config(env: Mapping[str, str] | None = None, *, config_file: str | None = None,
                overrides: Mapping[str, str] | None = None, strict: bool = False) -> Config:
    """Merge defaults < config file < environment < ``overrides`` (flags) into a Config.

    ``overrides`` are keyed by Typha parameter name (case-insensitive).  Raises
    :class:`ConfigError` on the first invalid value or failed cross-field check.  Unknown
    names are logged and ignored, as Typha does for its environment, wherever they come
    from; with ``strict`` an unknown flag (``--set``) is an error instead.
    """
    env = os.environ if env is None else env
    sources: list[tuple[str, dict[str, str]]] = []
    path = config_file or env.get("TYPHA_CONFIGFILE") or DEFAULT_CONFIG_FILE
    sources.append(("config file " + path, _read_file(path, explicit=config_file is not None)))
    env_values = {}
    for name, value in env.items():
        low = name.lower()
        if low.startswith("typha_"):
            env_values[name.split("_", 1)[1]] = value
            log.info('Found typha environment variable: %s="%s"', name, _shown(name, value))
    sources.append(("environment", env_values))
    sources.append(("flag", dict(overrides or {})))

    values: dict[str, Any] = {}
    for origin, raw_values in sources:
        for raw_name, raw in raw_values.items():
            param = _BY_NAME.get(raw_name.lower())
            if param is None:
                if origin == "flag" and strict:
                    raise ConfigError(f"--set {raw_name}: unknown parameter (--strict-config)")
                if origin == "environment" and raw_name.lower() not in ("configfile",):
                    log.info("Ignoring unknown config param TYPHA_%s", raw_name.upper())
                elif origin != "environment":
                    log.info("Ignoring unknown config param %s (from %s)", raw_name, origin)
                continue
            what = (param.env if origin == "environment"
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
    if cfg.datastore_type == "etcdv3" and not cfg.etcd_endpoints and not (
            cfg.etcd_scheme and cfg.etcd_addr):
        raise ConfigError("TYPHA_ETCDENDPOINTS: no etcd endpoints and no EtcdScheme/EtcdAddr")
    if cfg.max_connections_lower_limit > cfg.max_connections_upper_limit:
        raise ConfigError("TYPHA_MAXCONNECTIONSLOWERLIMIT: must not exceed "
                          "TYPHA_MAXCONNECTIONSUPPERLIMIT")


def param_by_flag(name: str) -> Param:
    """Look up a parameter by Typha name (case-insensitive), for ``--set NAME=VALUE``."""
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown parameter {name!r}") from None
