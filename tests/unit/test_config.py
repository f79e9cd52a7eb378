"""Config: Typha's env names, file, flags, precedence and named errors."""

from __future__ import annotations

import pytest

from trio_typha.config import ConfigError
from trio_typha.config_sources import load_config


def cfg(env=None, **kw):
    return load_config(env or {}, config_file=kw.pop("config_file", None), **kw)


def test_defaults_match_typha(tmp_path) -> None:
    c = cfg({"TYPHA_CONFIGFILE": str(tmp_path / "absent.cfg")})
    assert c.port == 5473 and c.server_port == 0
    assert c.datastore_type == "etcdv3"
    assert c.health_port == 9098 and not c.health_enabled
    assert c.server_ping_interval_secs == 10 and c.server_pong_timeout_secs == 60
    assert c.snapshot_cache_max_batch_size == 100 and c.server_max_message_size == 100


def test_env_names_are_case_insensitive_and_parse() -> None:
    c = cfg({"TYPHA_SERVERPORT": "5474", "typha_healthenabled": "yes",
             "Typha_LoGSEVERITYSCREEN": "debug", "TYPHA_SERVERPINGINTERVALSECS": "0.5",
             "TYPHA_ETCDENDPOINTS": "http://127.0.0.1:2379,https://e2:2379/"})
    assert c.port == 5474 and c.health_enabled and c.log_severity_screen == "DEBUG"
    assert c.server_ping_interval_secs == 0.5
    assert c.etcd_endpoints == ("http://127.0.0.1:2379/", "https://e2:2379/")


def test_precedence_file_env_flags(tmp_path) -> None:
    f = tmp_path / "typha.cfg"
    f.write_text("[global]\nServerPort = 6000\nHealthPort = 7000\nLogSeverityScreen = Warning\n")
    c = load_config({"TYPHA_SERVERPORT": "6001"}, config_file=str(f),
                    overrides={"LogSeverityScreen": "error"})
    assert c.health_port == 7000  # file beats default
    assert c.port == 6001  # env beats file
    assert c.log_severity_screen == "ERROR"  # flag beats both


def test_empty_value_ignored_and_none_zeroes() -> None:
    c = cfg({"TYPHA_HEALTHPORT": "", "TYPHA_HEALTHHOST": "none"})
    assert c.health_port == 9098 and c.health_host == ""


@pytest.mark.parametrize(("env", "needle"), [
    ({"TYPHA_SERVERPORT": "70000"}, "TYPHA_SERVERPORT"),
    ({"TYPHA_SERVERPORT": "abc"}, "0..65535"),
    ({"TYPHA_DATASTORETYPE": "mongo"}, "kubernetes, etcdv3, memory"),
    ({"TYPHA_DATASTORETYPE": "none"}, "TYPHA_DATASTORETYPE"),
    ({"TYPHA_HEALTHENABLED": "perhaps"}, "TYPHA_HEALTHENABLED"),
    ({"TYPHA_SERVERPONGTIMEOUTSECS": "soon"}, "seconds"),
    ({"TYPHA_ETCDENDPOINTS": "127.0.0.1:2379"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_CLIENTCN": "felix"}, "TYPHA_SERVERKEYFILE"),
    ({"TYPHA_CAFILE": "/nonexistent/ca.pem"}, "TYPHA_CAFILE"),
])
def test_invalid_values_name_the_variable(env, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        cfg(env)


def test_explicit_missing_config_file_is_an_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({}, config_file=str(tmp_path / "missing.cfg"))


def test_sectionless_file_accepted(tmp_path) -> None:
    f = tmp_path / "t.cfg"
    f.write_text("ServerPort = 6100\n")
    assert load_config({}, config_file=str(f)).port == 6100


# --- one declaration: the table, ServerSettings and --help derive from Config's fields ---


def test_every_config_field_is_a_declared_parameter() -> None:
    import dataclasses

    from trio_typha.config import PARAMS, Config

    assert [p.field for p in PARAMS] == [f.name for f in dataclasses.fields(Config)]
    assert len({p.name.lower() for p in PARAMS}) == len(PARAMS)
    assert all(p.doc for p in PARAMS)
    assert load_config({}, config_file=None) == Config()


def test_server_settings_defaults_are_the_parameters_defaults() -> None:
    import dataclasses

    from trio_typha.config import param_by_flag
    from trio_typha.sessions.settings import ServerSettings

    default = ServerSettings()
    assert ServerSettings.from_config(load_config({})) == default
    derived = [f for f in dataclasses.fields(ServerSettings) if "typha_param" in f.metadata]
    assert len(derived) >= 11
    for f in derived:
        p = param_by_flag(f.metadata["typha_param"])
        assert getattr(default, f.name) == p.effective(p.default)


@pytest.mark.parametrize(("name", "field", "expected"), [
    # Typha's built-in defaults for values <= 0 (the 100 ms batching age differs from the
    # 10 ms config default on purpose, as in Typha).
    ("ServerMinBatchingAgeThresholdSecs", "min_batching_age", 0.1),
    ("ServerPingIntervalSecs", "ping_interval", 10.0),
    ("ServerHandshakeTimeoutSecs", "handshake_timeout", 10.0),
    ("ServerWriteTimeoutSecs", "write_timeout", 120.0),
    ("ServerMaxFallBehindSecs", "max_fall_behind", 300.0),
    ("ServerNewClientFallBehindGracePeriod", "new_client_fall_behind_grace", 300.0),
])
def test_values_at_or_below_zero_get_typhas_builtin_default(name: str, field: str,
                                                            expected: float) -> None:
    from trio_typha.sessions.settings import ServerSettings

    for raw in ("0", "-3"):
        cfg = load_config({f"TYPHA_{name.upper()}": raw})
        assert getattr(ServerSettings.from_config(cfg), field) == expected
        assert getattr(cfg, field) == expected  # Config's typed property of the same name


def test_pong_timeout_is_renormalized_not_redefaulted() -> None:
    from trio_typha.sessions.settings import ServerSettings

    cfg = load_config({"TYPHA_SERVERPINGINTERVALSECS": "5", "TYPHA_SERVERPONGTIMEOUTSECS": "0"})
    assert ServerSettings.from_config(cfg).pong_timeout == 30.0


def test_serve_help_lists_every_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    from trio_typha.cli import main
    from trio_typha.config import PARAMS

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for p in PARAMS:
        assert p.env in out and p.doc.split()[0] in out


# Each re-defaulted parameter and the typed Config property that gives its effective value.
REDEFAULTED = {
    "server_max_message_size": "max_message_size",
    "server_max_fall_behind_secs": "max_fall_behind",
    "server_new_client_fall_behind_grace_period": "new_client_fall_behind_grace",
    "server_min_batching_age_threshold_secs": "min_batching_age",
    "server_ping_interval_secs": "ping_interval",
    "server_handshake_timeout_secs": "handshake_timeout",
    "server_write_timeout_secs": "write_timeout",
    "connection_drop_interval_secs": "connection_drop_interval",
    "shutdown_timeout_secs": "shutdown_timeout",
    "shutdown_connection_drop_interval_max_secs": "shutdown_drop_interval_max",
    "max_connections_upper_limit": "max_connections",
}


def test_every_redefaulted_parameter_has_a_typed_property() -> None:
    from trio_typha.config import PARAMS, Config

    assert {p.field for p in PARAMS if p.fallback is not None} == set(REDEFAULTED)
    for p in PARAMS:
        if p.fallback is None:
            continue
        prop = REDEFAULTED[p.field]
        kind = type(p.default)
        low = Config().replace(**{p.field: kind(0)})
        assert getattr(low, prop) == p.fallback and isinstance(getattr(low, prop), kind)
        high = Config().replace(**{p.field: kind(7)})
        assert getattr(high, prop) == 7


def test_server_settings_take_every_parameter_they_name() -> None:
    """Each ServerSettings field follows its parameter (none left at its default)."""
    import dataclasses

    from trio_typha.config import param_by_flag
    from trio_typha.sessions.settings import ServerSettings

    for f in dataclasses.fields(ServerSettings):
        if "typha_param" not in f.metadata:
            continue
        p = param_by_flag(f.metadata["typha_param"])
        # Above twice the ping interval, so PongTimeout is not renormalized.
        value = type(p.default)(123)
        cfg = load_config({p.env: str(value)})
        assert getattr(ServerSettings.from_config(cfg), f.name) == value, f.name


# --- the variables Typha reads outside its TYPHA_* parameters ---


def test_outside_variables_come_from_their_own_names() -> None:
    c = cfg({"TLS_MIN_VERSION": "1.3", "TLS_CIPHER_SUITES": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
             "FELIX_INTERFACEPREFIX": "tap,cali", "KUBECONFIG": "/k/config",
             "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
             "CALICO_API_GROUP": "crd.projectcalico.org/v1", "HOME": "/home/t"})
    assert c.tls_min_version == "1.3"
    assert c.tls_cipher_suites == ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",)
    assert c.felix_interface_prefix == "tap,cali"
    assert (c.kubeconfig, c.kubernetes_service_host, c.kubernetes_service_port) == (
        "/k/config", "10.96.0.1", "443")
    assert c.calico_api_group == "crd.projectcalico.org/v1" and c.home == "/home/t"


def test_the_calico_prefix_wins_as_in_envconfig() -> None:
    # libcalico-go/lib/apiconfig: envconfig.Process("calico") tries CALICO_<NAME> first.
    c = cfg({"CALICO_KUBECONFIG": "/a", "KUBECONFIG": "/b", "K8S_API_ENDPOINT": "http://x:1",
             "CALICO_K8S_INSECURE_SKIP_TLS_VERIFY": "true"})
    assert c.kubeconfig == "/a" and c.k8s_api_endpoint == "http://x:1"
    assert c.k8s_insecure_skip_tls_verify is True


def test_outside_variables_are_not_typha_parameters(tmp_path) -> None:
    f = tmp_path / "typha.cfg"
    f.write_text("[global]\nTLSMinVersion = 1.3\nKubeconfig = /etc/kc\n")
    c = load_config({"TYPHA_TLSMINVERSION": "1.3", "TYPHA_KUBECONFIG": "/kc"},
                    config_file=str(f))
    assert c.tls_min_version == "1.2" and c.kubeconfig == ""
    # A flag may set one (by its parameter name).
    assert cfg(overrides={"TLSMinVersion": "1.3"}).tls_min_version == "1.3"


@pytest.mark.parametrize(("env", "needle"), [
    ({"TLS_MIN_VERSION": "1.1"}, "TLS_MIN_VERSION: invalid value '1.1': expected one of: 1.2"),
    ({"TLS_CIPHER_SUITES": "TLS_RSA_WITH_AES_128_CBC_SHA"},
     "TLS_CIPHER_SUITES: .*unsupported cipher suite"),
    ({"K8S_INSECURE_SKIP_TLS_VERIFY": "perhaps"}, "K8S_INSECURE_SKIP_TLS_VERIFY"),
])
def test_invalid_outside_variables_name_the_variable(env, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        cfg(env)


def test_cipher_suites_are_calicos() -> None:
    """crypto/pkg/tls/tls.go: the default is TLS 1.3's suites and the PFS TLS 1.2 ones;
    the two RSA key-exchange suites are accepted only when named."""
    from trio_typha.config import CIPHER_SUITES, DEFAULT_CIPHER_SUITES, Config

    assert Config().tls_cipher_suites == DEFAULT_CIPHER_SUITES
    assert len(CIPHER_SUITES) == 14 and len(DEFAULT_CIPHER_SUITES) == 12
    assert not any(n.startswith("TLS_RSA_") for n in DEFAULT_CIPHER_SUITES)
    assert cfg({"TLS_CIPHER_SUITES": "TLS_RSA_WITH_AES_128_GCM_SHA256"}).tls_cipher_suites \
        == ("TLS_RSA_WITH_AES_128_GCM_SHA256",)


def test_tls_policy_from_config() -> None:
    import ssl

    from trio_typha.config import Config
    from trio_typha.tls.server import TLSPolicy

    default = TLSPolicy.from_config(Config())
    assert default.minimum is ssl.TLSVersion.TLSv1_2
    assert default.ciphers.split(":")[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert "AES128-GCM-SHA256" not in default.ciphers.split(":")  # legacy: not by default
    strict = TLSPolicy.from_config(cfg({"TLS_MIN_VERSION": "1.3",
                                        "TLS_CIPHER_SUITES": "TLS_AES_128_GCM_SHA256, "
                                                             "TLS_RSA_WITH_AES_128_GCM_SHA256"}))
    assert strict.minimum is ssl.TLSVersion.TLSv1_3 and strict.ciphers == "AES128-GCM-SHA256"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    default.apply(ctx)  # OpenSSL knows every name
    assert ctx.minimum_version is ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize(("env", "level"), [
    ({}, "ERROR"),
    ({"TYPHA_LOGSEVERITYSCREEN": "debug"}, "DEBUG"),
    ({"TYPHA_EARLYLOGSEVERITYSCREEN": "warning", "TYPHA_LOGSEVERITYSCREEN": "debug"},
     "WARNING"),
    ({"TYPHA_EARLYLOGSEVERITYSCREEN": "loud"}, "ERROR"),
])
def test_early_log_level_as_typha(env, level) -> None:
    # typha/pkg/logutils/logutils.go, ConfigureEarlyLogging.
    from trio_typha.config_sources import early_log_level

    assert early_log_level(env) == level


def test_nothing_but_config_reads_the_environment() -> None:
    """Every setting reaches the code through Config: no module but config_sources names
    os.environ or os.getenv (a child process inherits the environment without naming it).
    native.py is the one exception: TRIO_TYPHA_PURE picks which build of the model to
    import, before the model (and so before any configuration) can be loaded."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "trio_typha"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if path in (root / "config_sources.py", root / "native.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = (node.attr if isinstance(node, ast.Attribute)
                    else node.id if isinstance(node, ast.Name)
                    else node.name if isinstance(node, ast.alias) else "")
            if name.split(".")[-1] in ("environ", "getenv", "environb", "putenv"):
                offenders.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}")
    assert offenders == []


@pytest.mark.parametrize(("env", "watched"), [
    ({}, True),
    ({"USE_POD_CIDR": "true"}, False),
    ({"CALICO_USE_POD_CIDR": "true"}, False),
    # An etcd datastore never has it: it is Calico's Kubernetes client setting.
    ({"USE_POD_CIDR": "true", "TYPHA_DATASTORETYPE": "etcdv3"}, True),
])
async def test_use_pod_cidr_reaches_the_felix_syncer(env, watched) -> None:
    """libcalico-go/lib/apiconfig/apiconfig.go K8sUsePodCIDR (USE_POD_CIDR): with host-local
    IPAM the felix syncer watches no IPAM blocks (felixsyncerv1.go)."""
    from trio_typha.cache.feed import CacheFeed
    from trio_typha.daemon import Daemon

    cfg = load_config({"TYPHA_DATASTORETYPE": "memory", **env}, config_file=None)
    datastore = None
    if cfg.datastore_type == "etcdv3":
        from trio_typha.datastore.etcd import EtcdDatastore
        datastore = EtcdDatastore.from_config(cfg)
    daemon = Daemon(cfg, datastore=datastore, listen_port=0)
    kinds = daemon.make_pipeline("felix", CacheFeed("felix")).definition.kinds
    assert any(k.kind == "IPAMBlock" for k in kinds) is watched


def test_demo_cluster_help_and_setting_name_every_synthetic_size(
        capsys: pytest.CaptureFixture[str]) -> None:
    from trio_typha.cli import main
    from trio_typha.datastore.synthetic import SIZES

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "synthetic cluster " + " | ".join(SIZES) in out
    assert "tiny" in SIZES
    for size in SIZES:
        cfg = load_config({"TYPHA_MEMORYDEMOCLUSTER": size})
        assert cfg.memory_demo_cluster == size
