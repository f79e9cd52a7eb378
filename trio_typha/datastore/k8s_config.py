"""Where the Kubernetes API is and how to authenticate to it, from Calico's client settings.

Typha's KDD client reads the generic Calico client environment (not ``TYPHA_*``), each
variable under the ``CALICO_`` prefix first and then bare, like ``envconfig.Process("calico")``
(:mod:`trio_typha.config` declares and reads them; this module gets them parsed):

* ``KUBECONFIG`` (a ``:``-separated list is allowed), read as client-go reads it
  (:mod:`trio_typha.datastore.kubeconfig`: contexts, tokens, token files, exec plugins,
  inline certificate data);
* otherwise ``K8S_API_ENDPOINT``;
* otherwise ``$HOME/.kube/config`` when it exists;
* otherwise the in-cluster config: ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``
  and the service-account token and CA.

``K8S_API_ENDPOINT``, ``K8S_CERT_FILE``, ``K8S_KEY_FILE``, ``K8S_CA_FILE``,
``K8S_INSECURE_SKIP_TLS_VERIFY`` and ``K8S_CURRENT_CONTEXT`` override what a kubeconfig says,
as client-go's ``ConfigOverrides`` do.  Every request goes through ``datastore.k8s_api``
(HTTP/2, else httpx).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from ..config import Config, setting_names
from .kube_client_config import KubeClientConfig as KubeClientConfig
from .kubeconfig import InvalidKubeconfig, read_kubeconfig, read_token

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(ValueError):
    """The Kubernetes client configuration is unusable; the message names the variable or file."""


def load_kube_client_config(cfg: Config, *,
                            service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> KubeClientConfig:
    """Build the client config from Calico's client settings in ``cfg``, as Calico's
    ``CreateKubernetesClientset`` (``service_account_dir`` is injectable for tests)."""
    kubeconfig = _setting(cfg.kubeconfig, "kubeconfig")
    endpoint = _setting(cfg.k8s_api_endpoint, "k8s_api_endpoint")
    if kubeconfig is None and endpoint is None and cfg.home:
        default = Path(cfg.home) / ".kube" / "config"
        if default.exists():
            kubeconfig = ("$HOME/.kube/config", str(default))

    if kubeconfig is not None:
        kube = _from_kubeconfig(kubeconfig[0], kubeconfig[1], cfg.k8s_current_context or None)
    elif endpoint is not None:
        kube = KubeClientConfig(server=endpoint[1], source=endpoint[0])
    else:
        kube = _in_cluster(cfg, service_account_dir)

    for name in ("k8s_cert_file", "k8s_key_file", "k8s_ca_file"):
        if path := getattr(cfg, name):
            _require_file(setting_names(name), path)
    kube = replace(
        kube, server=cfg.k8s_api_endpoint or kube.server,
        cert_file=cfg.k8s_cert_file or kube.cert_file,
        key_file=cfg.k8s_key_file or kube.key_file, ca_file=cfg.k8s_ca_file or kube.ca_file,
        insecure_skip_tls_verify=cfg.k8s_insecure_skip_tls_verify
        or kube.insecure_skip_tls_verify,
        calico_api_group=cfg.calico_api_group or kube.calico_api_group)
    _validate(kube)
    return kube


def build_ssl_context(cfg: KubeClientConfig) -> ssl.SSLContext:
    """The TLS context for ``cfg`` (CA, client certificate, verification switch)."""
    if cfg.insecure_skip_tls_verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            ctx = ssl.create_default_context(cafile=cfg.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise KubeConfigError(f"CA file {cfg.ca_file} ({cfg.source}): {exc}") from exc
    if cfg.cert_file:
        try:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise KubeConfigError(f"client certificate {cfg.cert_file} / key {cfg.key_file} "
                                  f"({cfg.source}): {exc}") from exc
    return ctx


def read_token_file(path: str) -> str:
    """A bearer token file's content as an ``Authorization`` header value."""
    try:
        return read_token(path)
    except InvalidKubeconfig as exc:
        raise KubeConfigError(str(exc)) from exc


def _setting(value: str, field: str) -> tuple[str, str] | None:
    """``(variable names, value)`` of a set client setting (the names, for messages)."""
    return (setting_names(field), value) if value else None


def _require_file(what: str, path: str) -> None:
    if not Path(path).is_file():
        raise KubeConfigError(f"{what}: file {path} does not exist")


def _in_cluster(cfg: Config, sa_dir: Path) -> KubeClientConfig:
    host, port = cfg.kubernetes_service_host, cfg.kubernetes_service_port
    if not host or not port:
        raise KubeConfigError(
            "no Kubernetes API configured: set KUBECONFIG or K8S_API_ENDPOINT, or run in a pod "
            "(KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)")
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a DNS name
    token_file = str(sa_dir / "token")
    ca_file = sa_dir / "ca.crt"
    return KubeClientConfig(
        server=f"https://{host}:{port}",
        source=f"in-cluster config ({sa_dir})",
        # Like client-go: a missing CA file falls back to the system roots.
        ca_file=str(ca_file) if ca_file.is_file() else None,
        authorization=read_token_file(token_file),
        token_file=token_file,
    )


def _from_kubeconfig(var: str, paths: str, context: str | None) -> KubeClientConfig:
    listed = [p for p in paths.split(os.pathsep) if p]
    if not any(Path(os.path.expanduser(p)).is_file() for p in listed):
        raise KubeConfigError(f"{var}={paths}: no such kubeconfig file")
    try:
        return read_kubeconfig(listed, context, source=f"kubeconfig {paths}")
    except InvalidKubeconfig as exc:
        raise KubeConfigError(f"{var}={paths}: invalid kubeconfig: {exc}") from exc


def _validate(cfg: KubeClientConfig) -> None:
    url = urlsplit(cfg.server)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise KubeConfigError(f"API server URL {cfg.server!r} from {cfg.source} is not an "
                              "http:// or https:// URL")
    if bool(cfg.cert_file) != bool(cfg.key_file):
        raise KubeConfigError(f"{cfg.source}: a client certificate needs both a certificate "
                              f"file and a key file (cert={cfg.cert_file}, key={cfg.key_file})")
    for path in (cfg.ca_file, cfg.cert_file, cfg.key_file):
        if path:
            _require_file(cfg.source, path)
