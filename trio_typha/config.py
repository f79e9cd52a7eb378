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
    name: str  # Typha's parameter name; env is TYPHA_<NAME.upper()>
    field: str  # Config attribute
    parse: Parser
    default: Any
    zero: Any = None  # value of "none"; None means "none" is not allowed

    @property
    def env(self) -> str:
        return "TYPHA_" + self.name.upper()


def _p(name: str, field: str, parse: Parser, default: Any, zero: Any = ...) -> Param:
    if zero is ...:
        zero = {bool: False, int: 0, float: 0.0, str: ""}.get(type(default), default)
    return Param(name, field, parse, default, zero)


PARAMS: tuple[Param, ...] = (
    _p("DatastoreType", "datastore_type", _oneof("kubernetes", "etcdv3", "memory"), "etcdv3",
       zero=None),
    _p("EtcdAddr", "etcd_addr", _string, "127.0.0.1:2379"),
    _p("EtcdScheme", "etcd_scheme", _oneof("http", "https"), "http"),
    _p("EtcdKeyFile", "etcd_key_file", _file_must_exist, ""),
    _p("EtcdCertFile", "etcd_cert_file", _file_must_exist, ""),
    _p("EtcdCaFile", "etcd_ca_file", _file_must_exist, ""),
    _p("EtcdEndpoints", "etcd_endpoints", _endpoint_list, (), zero=()),
    _p("LogSeverityScreen", "log_severity_screen", _oneof(*LOG_LEVELS), "INFO"),
    _p("HealthEnabled", "health_enabled", _bool, False),
    _p("HealthHost", "health_host", _host, "localhost"),
    _p("HealthPort", "health_port", _int(0, 65535), 9098),
    _p("PrometheusMetricsEnabled", "prometheus_metrics_enabled", _bool, False),
    _p("PrometheusMetricsHost", "prometheus_metrics_host", _string, ""),
    _p("PrometheusMetricsPort", "prometheus_metrics_port", _int(0, 65535), 9093),
    _p("PrometheusProcessMetricsEnabled", "prometheus_process_metrics_enabled", _bool, True),
    _p("SnapshotCacheMaxBatchSize", "snapshot_cache_max_batch_size", _int(1), 100),
    _p("ServerMaxMessageSize", "server_max_message_size", _int(1), 100),
    _p("ServerMaxFallBehindSecs", "server_max_fall_behind_secs", _seconds, 300.0),
    _p("ServerNewClientFallBehindGracePeriod", "server_new_client_fall_behind_grace_period",
       _seconds, 300.0),
    _p("ServerMinBatchingAgeThresholdSecs", "server_min_batching_age_threshold_secs", _seconds,
       0.01),
    _p("ServerPingIntervalSecs", "server_ping_interval_secs", _seconds, 10.0),
    _p("ServerPongTimeoutSecs", "server_pong_timeout_secs", _seconds, 60.0),
    _p("ServerHandshakeTimeoutSecs", "server_handshake_timeout_secs", _seconds, 10.0),
    _p("ServerWriteTimeoutSecs", "server_write_timeout_secs", _seconds, 120.0),
    _p("ServerPort", "server_port", _int(0, 65535), 0),
    _p("ServerHost", "server_host", _host, ""),
    _p("ServerKeyFile", "server_key_file", _file_must_exist, ""),
    _p("ServerCertFile", "server_cert_file", _file_must_exist, ""),
    _p("CAFile", "ca_file", _file_must_exist, ""),
    _p("ClientCN", "client_cn", _string, ""),
    _p("ClientURISAN", "client_uri_san", _string, ""),
    _p("ConnectionRebalancingMode", "connection_rebalancing_mode", _oneof("none", "kubernetes"),
       "none"),
    _p("ConnectionDropIntervalSecs", "connection_drop_interval_secs", _seconds, 1.0),
    _p("ShutdownTimeoutSecs", "shutdown_timeout_secs", _seconds, 300.0),
    _p("ShutdownConnectionDropIntervalMaxSecs", "shutdown_connection_drop_interval_max_secs",
       _seconds, 1.0),
    _p("MaxConnectionsUpperLimit", "max_connections_upper_limit", _int(1), 10000),
    _p("MaxConnectionsLowerLimit", "max_connections_lower_limit", _int(1), 400),
    _p("K8sServicePollIntervalSecs", "k8s_service_poll_interval_secs", _seconds, 30.0),
    _p("K8sNamespace", "k8s_namespace", _string, "kube-system"),
    _p("K8sServiceName", "k8s_service_name", _string, "calico-typha"),
    _p("K8sPortName", "k8s_port_name", _string, "calico-typha"),
    # trio-typha's own parameters.
    _p("ServerProtocols", "server_protocols", _oneof("all", "typha", "grpc"), "all"),
    _p("ServerMaxConcurrentStreams", "server_max_concurrent_streams", _int(1, 1 << 20), 16),
    _p("ServerDrainTimeoutSecs", "server_drain_timeout_secs", _seconds, 10.0),
    _p("SnapshotReuseAgeSecs", "snapshot_reuse_age_secs", _seconds, 1.0),
    _p("CacheWakeIntervalSecs", "cache_wake_interval_secs", _seconds, 0.0),
    # How long a datastore watch stream may stop delivering before it is noticed and
    # re-established (trio_typha/datastore/stall.py); Typha has no such parameter.
    _p("WatchStallTimeoutSecs", "watch_stall_timeout_secs", _positive_seconds, 30.0),
    _p("MemorySeedFile", "memory_seed_file", _file_must_exist, ""),
    _p("MemoryDemoCluster", "memory_demo_cluster",
       _oneof("", "tiny", "small", "medium", "large"), ""),
    _p("MemoryChurnRate", "memory_churn_rate", _seconds, 0.0),
)

_BY_NAME = {p.name.lower(): p for p in PARAMS}


@dataclass(frozen=True, slots=True)
class Config:
    """Every parameter's final value; build with :func:`load_config`."""

    datastore_type: str
    etcd_addr: str
    etcd_scheme: str
    etcd_key_file: str
    etcd_cert_file: str
    etcd_ca_file: str
    etcd_endpoints: tuple[str, ...]
    log_severity_screen: str
    health_enabled: bool
    health_host: str
    health_port: int
    prometheus_metrics_enabled: bool
    prometheus_metrics_host: str
    prometheus_metrics_port: int
    prometheus_process_metrics_enabled: bool
    snapshot_cache_max_batch_size: int
    server_max_message_size: int
    server_max_fall_behind_secs: float
    server_new_client_fall_behind_grace_period: float
    server_min_batching_age_threshold_secs: float
    server_ping_interval_secs: float
    server_pong_timeout_secs: float
    server_handshake_timeout_secs: float
    server_write_timeout_secs: float
    server_port: int
    server_host: str
    server_key_file: str
    server_cert_file: str
    ca_file: str
    client_cn: str
    client_uri_san: str
    connection_rebalancing_mode: str
    connection_drop_interval_secs: float
    shutdown_timeout_secs: float
    shutdown_connection_drop_interval_max_secs: float
    max_connections_upper_limit: int
    max_connections_lower_limit: int
    k8s_service_poll_interval_secs: float
    k8s_namespace: str
    k8s_service_name: str
    k8s_port_name: str
    server_protocols: str
    server_max_concurrent_streams: int
    server_drain_timeout_secs: float
    snapshot_reuse_age_secs: float
    cache_wake_interval_secs: float
    watch_stall_timeout_secs: float
    memory_seed_file: str
    memory_demo_cluster: str
    memory_churn_rate: float

    @property
    def port(self) -> int:
        """The listen port: ServerPort 0 means Typha's default, 5473."""
        return self.server_port or 5473

    @property
    def tls_enabled(self) -> bool:
        return any((self.server_key_file, self.server_cert_file, self.ca_file, self.client_cn,
                    self.client_uri_san))

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


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


def load_config(env: Mapping[str, str] | None = None, *, config_file: str | None = None,
                overrides: Mapping[str, str] | None = None) -> Config:
    """Merge defaults < config file < environment < ``overrides`` (flags) into a Config.

    ``overrides`` are keyed by Typha parameter name (case-insensitive).  Raises
    :class:`ConfigError` on the first invalid value or failed cross-field check.
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
    sources.append(("environment", env_values))
    sources.append(("flag", dict(overrides or {})))

    values = {p.field: p.default for p in PARAMS}
    for origin, raw_values in sources:
        for raw_name, raw in raw_values.items():
            param = _BY_NAME.get(raw_name.lower())
            if param is None:
                if origin == "environment" and raw_name.lower() not in ("configfile",):
                    log.info("Ignoring unknown config param TYPHA_%s", raw_name.upper())
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
