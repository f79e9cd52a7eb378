"""Where the Kubernetes API is and how to authenticate to it, from Calico's client settings.

Typha's KDD client reads the generic Calico client environment (not ``TYPHA_*``), each
variable under the ``CALICO_`` prefix first and then bare, like ``envconfig.Process("calico")``
(:mod:`trio_typha.config` declares and reads them; this module gets them parsed):

* ``KUBECONFIG`` (a ``:``-separated list is allowed), parsed with the ``kubernetes`` package's
  kubeconfig loader (contexts, tokens, token files, exec plugins, inline certificate data);
* otherwise ``K8S_API_ENDPOINT``;
* otherwise ``$HOME/.kube/config`` when it exists;
* otherwise the in-cluster config: ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``
  and the service-account token and CA.

``K8S_API_ENDPOINT``, ``K8S_CERT_FILE``, ``K8S_KEY_FILE``, ``K8S_CA_FILE``,
``K8S_INSECURE_SKIP_TLS_VERIFY`` and ``K8S_CURRENT_CONTEXT`` override what a kubeconfig says,
as client-go's ``ConfigOverrides`` do.  Only the parsing is borrowed from the ``kubernetes``
package: every request goes through httpx (``datastore.k8s_api``).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..config import Config, setting_names

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(ValueError):
    """The Kubernetes client configuration is unusable; the message names the variable or file."""


@dataclass(frozen=True, slots=True)
class KubeClientConfig:
    """Everything needed to talk to one API server (immutable; load once at startup).

    ``authorization`` is a whole ``Authorization`` header value (``Bearer …`` or ``Basic …``).
    When ``token_file`` is set the client re-reads it periodically (service-account tokens
    are rotated by the kubelet); ``refresh_authorization`` is a blocking callable that returns
    a fresh header value (kubeconfig exec plugins and expiring auth-provider tokens).
    """

    server: str
    source: str  # where this came from, for log lines and errors
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None
    authorization: str | None = None
    token_file: str | None = None
    refresh_authorization: Callable[[], str | None] | None = field(default=None, compare=False)
    calico_api_group: str | None = None  # CALICO_API_GROUP as given; None: discover

    @property
    def uses_tls(self) -> bool:
        return self.server.startswith("https://")


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
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise KubeConfigError(f"token file {path}: {exc.strerror or exc}") from exc
    if not token:
        raise KubeConfigError(f"token file {path} is empty")
    return f"Bearer {token}"


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
    # Imported here: the kubernetes package takes most of a second to import.
    import yaml
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    listed = [p for p in paths.split(os.pathsep) if p]
    if not any(Path(os.path.expanduser(p)).is_file() for p in listed):
        raise KubeConfigError(f"{var}={paths}: no such kubeconfig file")
    conf = Configuration()
    try:
        if context is None:
            context = _first_current_context(listed, yaml.safe_load)
        merged = KubeConfigMerger(paths).config
        if merged is None:
            raise ConfigException("no configuration found")
        loader = KubeConfigLoader(config_dict=merged, active_context=context,
                                  config_base_path=None)
        loader.load_and_set(conf)
        token_file = _user_token_file(merged, context)
    except (ConfigException, OSError, yaml.YAMLError, KeyError, TypeError,
            ValueError) as exc:
        raise KubeConfigError(f"{var}={paths}: invalid kubeconfig: {exc}") from exc

    refresh: Callable[[], str | None] | None = None
    hook = conf.refresh_api_key_hook
    if hook is not None and token_file is None:
        def refresh() -> str | None:
            hook(conf)
            return _strip(conf.api_key.get("BearerToken"))

    return KubeClientConfig(
        server=conf.host.rstrip("/"),
        source=f"kubeconfig {paths}" + (f" context {context}" if context else ""),
        ca_file=conf.ssl_ca_cert or None,
        cert_file=conf.cert_file or None,
        key_file=conf.key_file or None,
        insecure_skip_tls_verify=not conf.verify_ssl,
        tls_server_name=conf.tls_server_name or None,
        proxy=conf.proxy or None,
        authorization=_strip(conf.api_key.get("BearerToken")),
        token_file=token_file,
        refresh_authorization=refresh,
    )


def _first_current_context(paths: list[str], load: Callable[[Any], Any]) -> str | None:
    """client-go's merge rule: the first file that sets ``current-context`` decides (the
    ``kubernetes`` package's merger lets the last one win)."""
    for path in paths:
        full = Path(os.path.expanduser(path))
        if full.is_file():
            with full.open() as f:
                doc = load(f)
            if isinstance(doc, dict) and doc.get("current-context"):
                return str(doc["current-context"])
    return None


def _user_token_file(merged: Any, context: str | None) -> str | None:
    """The active user's ``tokenFile`` (when no inline ``token``), to re-read like client-go."""
    ctx = merged["contexts"].get_with_name(context or merged["current-context"])
    user_name = ctx["context"].safe_get("user")
    user = merged["users"].get_with_name(user_name, safe=True) if user_name else None
    if user is None:
        return None
    fields = user["user"]
    if fields.safe_get("token") or not fields.safe_get("tokenFile"):
        return None
    base = os.path.dirname(os.path.abspath(fields.path)) if fields.path else ""
    return os.path.normpath(os.path.join(base, fields["tokenFile"]))


def _strip(authorization: str | None) -> str | None:
    # Token files often end in a newline, which is no part of the token.
    return authorization.strip() if authorization else None


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
