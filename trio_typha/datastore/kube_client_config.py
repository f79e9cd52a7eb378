"""Where one Kubernetes API server is and how to authenticate to it: what
:mod:`trio_typha.datastore.k8s_config` builds from Calico's client settings (and
:mod:`trio_typha.datastore.kubeconfig` from a kubeconfig), and the API client uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class KubeClientConfig:
    """Everything needed to talk to one API server (immutable; load once at startup).

    ``authorization`` is a whole ``Authorization`` header value (``Bearer …`` or ``Basic …``).
    When ``token_file`` is set the client re-reads it periodically (service-account tokens
    are rotated by the kubelet); ``refresh_authorization`` is a blocking callable that returns
    a fresh header value (kubeconfig exec credential plugins).
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
