"""TYPHA_ETCD* settings, parsed once by Config, into an EtcdConfig (typha/pkg/config)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from trio_typha.config import ConfigError
from trio_typha.config_sources import environment_config, load_config
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.datastore.etcd_config import EtcdConfig


def etcd(env: dict[str, str]) -> EtcdConfig:
    return EtcdConfig.from_config(environment_config(env))


def test_default_is_local_plain_etcd() -> None:
    assert etcd({}) == EtcdConfig(endpoints=("http://127.0.0.1:2379/",)) == EtcdConfig()


def test_scheme_and_addr() -> None:
    cfg = etcd({"TYPHA_ETCDSCHEME": "HTTPS", "TYPHA_ETCDADDR": "etcd.example:4001"})
    assert cfg.endpoints == ("https://etcd.example:4001/",)


def test_endpoints_replace_scheme_and_addr() -> None:
    cfg = etcd({"TYPHA_ETCDENDPOINTS": "http://10.0.0.1:2379, https://[fd00::1]:2379/",
                "TYPHA_ETCDADDR": "ignored:1"})
    assert cfg.endpoints == ("http://10.0.0.1:2379/", "https://[fd00::1]:2379/")


def test_empty_values_keep_the_default_and_unrelated_settings_are_ignored() -> None:
    cfg = etcd({"TYPHA_ETCDADDR": "", "TYPHA_ETCDENDPOINTS": "",
                "TYPHA_LOGSEVERITYSCREEN": "info", "PATH": "/bin"})
    assert cfg.endpoints == ("http://127.0.0.1:2379/",)


def test_a_list_of_only_empty_entries_is_no_list() -> None:
    # Typha's endpoint-list skips empty entries (typha/pkg/config/param_types.go), and no
    # endpoints means EtcdScheme + EtcdAddr (config_params.go, DatastoreConfig).
    assert etcd({"TYPHA_ETCDENDPOINTS": " , "}).endpoints == ("http://127.0.0.1:2379/",)


@pytest.mark.parametrize(("settings", "variable"), [
    ({"TYPHA_ETCDENDPOINTS": "etcd:2379"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_ETCDENDPOINTS": "ftp://etcd:2379"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_ETCDENDPOINTS": "http://etcd:2379/v3"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_ETCDENDPOINTS": "http://u:p@etcd:2379"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_ETCDENDPOINTS": "http://etcd:2379?x=1"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_ETCDENDPOINTS": "http://etcd:port"}, "TYPHA_ETCDENDPOINTS"),
    ({"TYPHA_ETCDSCHEME": "ftp"}, "TYPHA_ETCDSCHEME"),
    ({"TYPHA_ETCDSCHEME": "none"}, "TYPHA_ETCDSCHEME"),
    ({"TYPHA_ETCDADDR": "None"}, "TYPHA_ETCDADDR"),
    ({"TYPHA_ETCDADDR": "etcd"}, "TYPHA_ETCDADDR"),
    ({"TYPHA_ETCDADDR": "fd00::1:2379"}, "TYPHA_ETCDADDR"),
    ({"TYPHA_ETCDADDR": "etcd:99999"}, "TYPHA_ETCDADDR"),
    ({"TYPHA_ETCDCAFILE": "/nonexistent/ca.pem"}, "TYPHA_ETCDCAFILE"),
])
def test_bad_values_name_their_variable(settings: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        environment_config(settings)
    assert str(info.value).startswith(variable + ":")


def test_missing_scheme_and_addr_error_says_both_missing() -> None:
    with pytest.raises(ConfigError, match="EtcdEndpoints and EtcdAddr both missing"):
        environment_config({"TYPHA_ETCDADDR": "none"})


def test_tls_files(tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("typha")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key"
    ca.cert_pem.write_to_path(str(ca_file))
    client.cert_chain_pems[0].write_to_path(str(cert_file))
    client.private_key_pem.write_to_path(str(key_file))

    cfg = etcd({"TYPHA_ETCDENDPOINTS": "https://127.0.0.1:2379",
                "TYPHA_ETCDCAFILE": str(ca_file), "TYPHA_ETCDCERTFILE": str(cert_file),
                "TYPHA_ETCDKEYFILE": str(key_file)})
    assert (cfg.ca_file, cfg.cert_file, cfg.key_file) == (str(ca_file), str(cert_file),
                                                          str(key_file))
    ctx = cfg.ssl_context()
    assert ctx.verify_mode is ssl.CERT_REQUIRED and ctx.check_hostname
    assert len(ctx.get_ca_certs()) == 1

    with pytest.raises(ConfigError, match="^TYPHA_ETCDCERTFILE: "):
        environment_config({"TYPHA_ETCDKEYFILE": str(key_file)})
    with pytest.raises(ConfigError, match="^TYPHA_ETCDKEYFILE: "):
        environment_config({"TYPHA_ETCDCERTFILE": str(cert_file)})


def test_from_the_daemon_config(tmp_path: Path) -> None:
    empty = tmp_path / "typha.cfg"
    empty.write_text("")
    env = {"TYPHA_ETCDENDPOINTS": "http://10.0.0.1:2379,http://10.0.0.2:2379"}
    cfg = load_config(env, config_file=str(empty))
    assert cfg.etcd_urls == ("http://10.0.0.1:2379/", "http://10.0.0.2:2379/")
    ds = EtcdDatastore.from_config(load_config({"TYPHA_ETCDSCHEME": "https",
                                                "TYPHA_ETCDADDR": "etcd:4001"},
                                               config_file=str(empty)))
    assert ds.config.endpoints == ("https://etcd:4001/",)
