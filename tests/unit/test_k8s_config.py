"""Kubernetes client config from the environment: kubeconfig, K8S_* overrides, in-cluster."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from trio_typha.config import ConfigError
from trio_typha.config_sources import environment_config
from trio_typha.datastore.k8s_config import (
    KubeConfigError,
    build_ssl_context,
    load_kube_client_config,
)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def pki(tmp_path: Path, ca: trustme.CA) -> dict[str, Path]:
    """A real CA file and client certificate/key pair on disk."""
    client = ca.issue_cert("typha@example")
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "client.pem",
             "key": tmp_path / "client-key.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    client.cert_chain_pems[0].write_to_path(str(files["cert"]))
    client.private_key_pem.write_to_path(str(files["key"]))
    return files


def _kubeconfig(path: Path, *, clusters: dict[str, dict[str, Any]],
                users: dict[str, dict[str, Any]], contexts: dict[str, tuple[str, str]],
                current: str | None) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u}}
                     for n, (c, u) in contexts.items()],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def _load(env: dict[str, str], tmp_path: Path, **kw: Any):
    """The environment read as the daemon reads it (trio_typha.config), then turned into
    the client config; ``home`` (default: a directory without a kubeconfig) is $HOME."""
    home = kw.pop("home", str(tmp_path / "no-home"))
    settings = environment_config({**env, "HOME": home} if home is not None else env)
    return load_kube_client_config(settings, service_account_dir=kw.pop("sa", tmp_path / "no-sa"),
                                   **kw)


def test_kubeconfig_token_and_ca_file(tmp_path: Path, pki: dict[str, Path]) -> None:
    kc = _kubeconfig(tmp_path / "kc", current="main",
                     clusters={"c": {"server": "https://api.example:6443/",
                                     "certificate-authority": "ca.pem"}},
                     users={"u": {"token": "s3cret"}}, contexts={"main": ("c", "u")})
    cfg = _load({"KUBECONFIG": str(kc)}, tmp_path)
    assert cfg.server == "https://api.example:6443"
    assert cfg.authorization == "Bearer s3cret"
    assert cfg.ca_file == str(pki["ca"])  # relative paths resolve against the kubeconfig
    assert not cfg.insecure_skip_tls_verify
    assert cfg.cert_file is None and cfg.key_file is None
    assert cfg.calico_api_group is None
    assert str(kc) in cfg.source


def test_kubeconfig_inline_client_certificate(tmp_path: Path, pki: dict[str, Path],
                                              ca: trustme.CA) -> None:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    kc = _kubeconfig(tmp_path / "kc", current="main",
                     clusters={"c": {"server": "https://10.0.0.1",
                                     "certificate-authority-data": b64(pki["ca"])}},
                     users={"u": {"client-certificate-data": b64(pki["cert"]),
                                  "client-key-data": b64(pki["key"])}},
                     contexts={"main": ("c", "u")})
    cfg = _load({"CALICO_KUBECONFIG": str(kc)}, tmp_path)
    assert cfg.authorization is None
    assert cfg.cert_file and Path(cfg.cert_file).read_bytes() == pki["cert"].read_bytes()
    assert cfg.key_file and Path(cfg.key_file).read_bytes() == pki["key"].read_bytes()
    assert cfg.ca_file and Path(cfg.ca_file).read_bytes() == pki["ca"].read_bytes()
    ctx = build_ssl_context(cfg)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_kubeconfig_token_file_and_insecure(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    kc = _kubeconfig(tmp_path / "kc", current="main",
                     clusters={"c": {"server": "https://h:1", "insecure-skip-tls-verify": True}},
                     users={"u": {"tokenFile": str(tmp_path / "tok")}},
                     contexts={"main": ("c", "u")})
    cfg = _load({"KUBECONFIG": str(kc)}, tmp_path)
    assert cfg.authorization == "Bearer from-file"
    assert cfg.token_file == str(tmp_path / "tok")  # re-read periodically, like client-go
    assert cfg.insecure_skip_tls_verify
    assert build_ssl_context(cfg).verify_mode == ssl.CERT_NONE


def test_kubeconfig_path_list_and_context_override(tmp_path: Path) -> None:
    first = _kubeconfig(tmp_path / "a", current="one",
                        clusters={"c1": {"server": "http://one:8080"}},
                        users={"u1": {"token": "t1"}}, contexts={"one": ("c1", "u1")})
    second = _kubeconfig(tmp_path / "b", current=None,
                         clusters={"c2": {"server": "http://two:8080"}},
                         users={"u2": {"token": "t2"}}, contexts={"two": ("c2", "u2")})
    env = {"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"}
    assert _load(env, tmp_path).server == "http://one:8080"
    # As client-go: the first file that sets current-context wins, even if a later one does.
    third = _kubeconfig(tmp_path / "c", current="two", clusters={}, users={}, contexts={})
    assert _load({"KUBECONFIG": f"{first}:{second}:{third}"}, tmp_path).server == (
        "http://one:8080")
    assert _load({"KUBECONFIG": f"{second}:{third}"}, tmp_path).server == "http://two:8080"
    cfg = _load({**env, "K8S_CURRENT_CONTEXT": "two"}, tmp_path)
    assert (cfg.server, cfg.authorization) == ("http://two:8080", "Bearer t2")


def test_k8s_variables_override_the_kubeconfig(tmp_path: Path, pki: dict[str, Path]) -> None:
    kc = _kubeconfig(tmp_path / "kc", current="main",
                     clusters={"c": {"server": "https://old:6443"}},
                     users={"u": {"token": "t"}}, contexts={"main": ("c", "u")})
    cfg = _load({"KUBECONFIG": str(kc), "CALICO_K8S_API_ENDPOINT": "https://new:443",
                 "K8S_API_ENDPOINT": "https://ignored:1", "K8S_CA_FILE": str(pki["ca"]),
                 "K8S_CERT_FILE": str(pki["cert"]), "K8S_KEY_FILE": str(pki["key"]),
                 "K8S_INSECURE_SKIP_TLS_VERIFY": "false",
                 "CALICO_API_GROUP": "projectcalico.org/v3"},
                tmp_path)
    assert cfg.server == "https://new:443"  # CALICO_ prefix wins over the bare name
    assert cfg.ca_file == str(pki["ca"])
    assert (cfg.cert_file, cfg.key_file) == (str(pki["cert"]), str(pki["key"]))
    assert cfg.authorization == "Bearer t"
    assert not cfg.insecure_skip_tls_verify
    assert cfg.calico_api_group == "projectcalico.org/v3"


def test_api_endpoint_without_kubeconfig(tmp_path: Path) -> None:
    cfg = _load({"K8S_API_ENDPOINT": "https://10.96.0.1:443",
                 "K8S_INSECURE_SKIP_TLS_VERIFY": "TRUE"}, tmp_path)
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.source == "CALICO_K8S_API_ENDPOINT/K8S_API_ENDPOINT"
    assert cfg.insecure_skip_tls_verify
    assert cfg.authorization is None


def test_home_kubeconfig_is_the_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    _kubeconfig(home / ".kube" / "config", current="m",
                clusters={"c": {"server": "http://home:80"}}, users={"u": {"token": "h"}},
                contexts={"m": ("c", "u")})
    cfg = _load({"HOME": str(home)}, tmp_path, home=None)
    assert cfg.server == "http://home:80"
    # ...but an explicit endpoint beats it.
    assert _load({"HOME": str(home), "K8S_API_ENDPOINT": "http://x:1"}, tmp_path,
                 home=None).server == "http://x:1"


def _service_account(tmp_path: Path, ca: trustme.CA | None, token: str = "sa-token") -> Path:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(token)
    (sa / "namespace").write_text("calico-system")
    if ca is not None:
        ca.cert_pem.write_to_path(str(sa / "ca.crt"))
    return sa


def test_in_cluster(tmp_path: Path, ca: trustme.CA) -> None:
    sa = _service_account(tmp_path, ca)
    cfg = _load({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                tmp_path, sa=sa)
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.authorization == "Bearer sa-token"
    assert cfg.token_file == str(sa / "token")
    assert cfg.ca_file == str(sa / "ca.crt")
    assert "in-cluster" in cfg.source
    build_ssl_context(cfg)


def test_in_cluster_ipv6_and_no_ca(tmp_path: Path) -> None:
    sa = _service_account(tmp_path, None)
    cfg = _load({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"},
                tmp_path, sa=sa)
    assert cfg.server == "https://[fd00::1]:6443"
    assert cfg.ca_file is None  # client-go falls back to the system roots


def test_in_cluster_needs_the_service_env(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        _load({}, tmp_path, sa=_service_account(tmp_path, None))


@pytest.mark.parametrize("token", ["", "  \n"])
def test_in_cluster_empty_token_names_the_file(tmp_path: Path, token: str) -> None:
    sa = _service_account(tmp_path, None, token=token)
    with pytest.raises(KubeConfigError, match=f"token file {sa / 'token'} is empty"):
        _load({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, tmp_path,
              sa=sa)


def test_in_cluster_missing_token_names_the_file(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    with pytest.raises(KubeConfigError, match=f"token file {sa / 'token'}"):
        _load({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, tmp_path,
              sa=sa)


def test_errors_name_the_variable_or_file(tmp_path: Path, pki: dict[str, Path]) -> None:
    with pytest.raises(KubeConfigError, match=r"KUBECONFIG=.*nope: no such kubeconfig"):
        _load({"KUBECONFIG": str(tmp_path / "nope")}, tmp_path)
    with pytest.raises(ConfigError, match="K8S_INSECURE_SKIP_TLS_VERIFY: invalid value 'maybe'"):
        _load({"K8S_API_ENDPOINT": "https://h", "K8S_INSECURE_SKIP_TLS_VERIFY": "maybe"},
              tmp_path)
    with pytest.raises(KubeConfigError, match=r"CALICO_K8S_CA_FILE/K8S_CA_FILE: file .*missing"):
        _load({"K8S_API_ENDPOINT": "https://h",
               "CALICO_K8S_CA_FILE": str(tmp_path / "missing.pem")}, tmp_path)
    with pytest.raises(KubeConfigError, match="both a certificate file and a key file"):
        _load({"K8S_API_ENDPOINT": "https://h", "K8S_CERT_FILE": str(pki["cert"])}, tmp_path)
    with pytest.raises(KubeConfigError, match="'ftp://h' from CALICO_K8S_API_ENDPOINT/K8S_API"):
        _load({"K8S_API_ENDPOINT": "ftp://h"}, tmp_path)


def test_invalid_kubeconfig_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "kc"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: gone\ncontexts: []\n")
    with pytest.raises(KubeConfigError, match=f"KUBECONFIG={bad}: invalid kubeconfig"):
        _load({"KUBECONFIG": str(bad)}, tmp_path)


def test_ssl_context_rejects_a_bad_ca_file(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate")
    cfg = _load({"K8S_API_ENDPOINT": "https://h", "K8S_CA_FILE": str(garbage)}, tmp_path)
    with pytest.raises(KubeConfigError, match=f"CA file {garbage}"):
        build_ssl_context(cfg)


def _exec_plugin(tmp_path: Path, status: dict[str, Any], *, exit_code: int = 0) -> Path:
    """A real credential plugin: prints an ExecCredential, and records its environment."""
    script = tmp_path / "bin" / "plugin"
    script.parent.mkdir(exist_ok=True)
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        f"open({str(tmp_path / 'seen.json')!r}, 'a').write(json.dumps("
        "{k: os.environ.get(k) for k in ('KUBERNETES_EXEC_INFO', 'PLUGIN_REGION', 'PATH')})"
        " + '\\n')\n"
        f"print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1', "
        f"'kind': 'ExecCredential', 'status': {status!r}}}))\n"
        f"sys.exit({exit_code})\n")
    script.chmod(0o755)
    return script


def test_kubeconfig_exec_plugin_token_and_refresh(tmp_path: Path) -> None:
    """client-go's exec credential plugin: run with the inherited environment plus its env
    and KUBERNETES_EXEC_INFO; a relative command path resolves against the kubeconfig;
    refresh_authorization runs it again."""
    _exec_plugin(tmp_path, {"token": "from-plugin"})
    kc = _kubeconfig(tmp_path / "kc", current="main",
                     clusters={"c": {"server": "https://h:6443"}},
                     users={"u": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                           "command": "./bin/plugin", "args": [],
                                           "env": [{"name": "PLUGIN_REGION",
                                                    "value": "eu-1"}]}}},
                     contexts={"main": ("c", "u")})
    cfg = _load({"KUBECONFIG": str(kc)}, tmp_path)
    assert cfg.authorization == "Bearer from-plugin"
    assert cfg.token_file is None and cfg.refresh_authorization is not None
    assert cfg.refresh_authorization() == "Bearer from-plugin"
    seen = [yaml.safe_load(line) for line in (tmp_path / "seen.json").read_text().splitlines()]
    assert len(seen) == 2
    info = yaml.safe_load(seen[0]["KUBERNETES_EXEC_INFO"])
    assert info == {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                    "spec": {"interactive": False}}
    assert seen[0]["PLUGIN_REGION"] == "eu-1" and seen[0]["PATH"]


def test_kubeconfig_exec_plugin_client_certificate(tmp_path: Path,
                                                   pki: dict[str, Path]) -> None:
    _exec_plugin(tmp_path, {"clientCertificateData": pki["cert"].read_text(),
                            "clientKeyData": pki["key"].read_text()})
    kc = _kubeconfig(tmp_path / "kc", current="main",
                     clusters={"c": {"server": "https://h:6443",
                                     "certificate-authority": str(pki["ca"])}},
                     users={"u": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                           "command": str(tmp_path / "bin/plugin")}}},
                     contexts={"main": ("c", "u")})
    cfg = _load({"KUBECONFIG": str(kc)}, tmp_path)
    assert cfg.authorization is None
    assert cfg.cert_file and Path(cfg.cert_file).read_bytes() == pki["cert"].read_bytes()
    assert cfg.key_file and Path(cfg.key_file).stat().st_mode & 0o077 == 0
    build_ssl_context(cfg)


def test_kubeconfig_exec_plugin_failures_name_the_user(tmp_path: Path) -> None:
    def with_plugin(status: dict[str, Any], exit_code: int = 0) -> Path:
        _exec_plugin(tmp_path, status, exit_code=exit_code)
        return _kubeconfig(tmp_path / "kc", current="main",
                           clusters={"c": {"server": "https://h"}},
                           users={"ops": {"exec": {
                               "apiVersion": "client.authentication.k8s.io/v1",
                               "command": str(tmp_path / "bin/plugin")}}},
                           contexts={"main": ("c", "ops")})
    with pytest.raises(KubeConfigError, match="user ops: exec plugin exited with status 3"):
        _load({"KUBECONFIG": str(with_plugin({"token": "t"}, 3))}, tmp_path)
    with pytest.raises(KubeConfigError, match="neither a token nor a client certificate"):
        _load({"KUBECONFIG": str(with_plugin({}))}, tmp_path)


def test_kubeconfig_basic_auth_and_refused_auth_provider(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "kc", current="basic",
                     clusters={"c": {"server": "https://h"}},
                     users={"b": {"username": "admin", "password": "pw"},
                            "g": {"auth-provider": {"name": "gcp", "config": {}}}},
                     contexts={"basic": ("c", "b"), "gke": ("c", "g")})
    cfg = _load({"KUBECONFIG": str(kc)}, tmp_path)
    assert cfg.authorization == "Basic " + base64.b64encode(b"admin:pw").decode()
    with pytest.raises(KubeConfigError, match="user g: auth-provider 'gcp' is not supported"):
        _load({"KUBECONFIG": str(kc), "K8S_CURRENT_CONTEXT": "gke"}, tmp_path)


def test_kubeconfig_first_file_defines_a_name(tmp_path: Path) -> None:
    """client-go's merge: a cluster named in two files is the first file's."""
    first = _kubeconfig(tmp_path / "a", current="main",
                        clusters={"c": {"server": "http://first:1"}},
                        users={"u": {"token": "t1"}}, contexts={"main": ("c", "u")})
    second = _kubeconfig(tmp_path / "b", current=None,
                         clusters={"c": {"server": "http://second:2"}},
                         users={"u": {"token": "t2"}}, contexts={})
    assert _load({"KUBECONFIG": f"{second}:{first}"}, tmp_path).server == "http://second:2"
    assert _load({"KUBECONFIG": f"{first}:{second}"}, tmp_path).authorization == "Bearer t1"


@pytest.mark.parametrize("user", [{"token": "s3cret"}, {"username": "u", "password": "p"}])
def test_kubeconfig_reads_as_the_official_client_does(tmp_path: Path, pki: dict[str, Path],
                                                      user: dict[str, Any]) -> None:
    """The same kubeconfig through the official ``kubernetes`` client's loader (a test
    dependency): the same server, CA, client certificate, verification and header."""
    kubernetes = pytest.importorskip("kubernetes")
    kc = _kubeconfig(tmp_path / "kc", current="main",
                     clusters={"c": {"server": "https://api.example:6443",
                                     "certificate-authority": "ca.pem",
                                     "tls-server-name": "api.internal"}},
                     users={"u": {**user, "client-certificate": "client.pem",
                                  "client-key": "client-key.pem"}},
                     contexts={"main": ("c", "u")})
    ours = _load({"KUBECONFIG": str(kc)}, tmp_path)
    theirs = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kc), client_configuration=theirs)
    header = theirs.api_key.get("BearerToken") or theirs.get_basic_auth_token()
    assert ours.server == theirs.host
    assert (ours.ca_file, ours.cert_file, ours.key_file) == (
        theirs.ssl_ca_cert, theirs.cert_file, theirs.key_file)
    assert ours.insecure_skip_tls_verify is not theirs.verify_ssl
    assert ours.tls_server_name == theirs.tls_server_name
    assert ours.authorization == header
