"""The e2e suite's own clients on a cluster whose Typha requires mutual TLS (``just mtls=1
kind-up``): they present what calico-node presents, from the Secrets calico-node mounts, and
check the server's certificate as Felix does (its CA and ``FELIX_TYPHACN``).

Everything is read from the objects as the API server returns them (JSON, as
``ApiClient.sanitize_for_serialization`` or ``kubectl kustomize`` gives them), so the same
code serves a live cluster and the rendered manifests in tests/deploy.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def container(workload: dict[str, Any], name: str = "calico-typha") -> dict[str, Any]:
    """The container ``name`` of a Deployment or DaemonSet."""
    [c] = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c  # type: ignore[no-any-return]


def env(c: Mapping[str, Any]) -> dict[str, str]:
    """A container's plain environment (``valueFrom`` entries as "")."""
    return {e["name"]: e.get("value", "") for e in c.get("env") or []}


def secret_files(pod: Mapping[str, Any], container: str, secrets: Mapping[str, Any],
                 root: Path) -> dict[str, Path]:
    """Every file ``container`` sees from a Secret volume, written under ``root`` from the
    Secrets' data as the kubelet would: path in the container -> file here."""
    volumes = {v["name"]: v["secret"]["secretName"] for v in pod["spec"].get("volumes") or []
               if "secret" in v}
    [c] = [c for c in pod["spec"]["containers"] if c["name"] == container]
    out = {}
    for mount in c.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            continue
        secret = secrets[volumes[mount["name"]]]
        for key, data in (secret.get("data") or {}).items():
            local = root / volumes[mount["name"]] / key
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(base64.b64decode(data))
            out[f"{mount['mountPath']}/{key}"] = local
    return out


@dataclass(frozen=True)
class ClientTLS:
    ssl_context: ssl.SSLContext
    server_cn: str


class MissingClientTLS(RuntimeError):
    """Typha asks for client certificates but calico-node is not set up to present one."""


def calico_node_tls(typha: dict[str, Any], node: dict[str, Any],
                    secrets: Mapping[str, Any], root: Path) -> ClientTLS | None:
    """None unless the calico-typha Deployment ``typha`` asks for client certificates
    (``TYPHA_CAFILE``); then calico-node's (DaemonSet ``node``) CA, certificate, key and
    expected server CN, its files written under ``root``."""
    if not env(container(typha)).get("TYPHA_CAFILE"):
        return None
    felix = env(container(node, "calico-node"))
    names = ("FELIX_TYPHACAFILE", "FELIX_TYPHACERTFILE", "FELIX_TYPHAKEYFILE", "FELIX_TYPHACN")
    missing = [n for n in names if not felix.get(n)]
    if missing:
        raise MissingClientTLS(
            f"calico-typha requires client certificates but calico-node has no "
            f"{', '.join(missing)}: `just mtls-calico-node` (or `just mtls=1 kind-up`)")
    files = secret_files(node["spec"]["template"], "calico-node", secrets, root)
    ctx = ssl.create_default_context(cafile=str(files[felix["FELIX_TYPHACAFILE"]]))
    ctx.check_hostname = False  # Felix checks the CN (FELIX_TYPHACN), not a host name
    ctx.load_cert_chain(str(files[felix["FELIX_TYPHACERTFILE"]]),
                        str(files[felix["FELIX_TYPHAKEYFILE"]]))
    return ClientTLS(ctx, felix["FELIX_TYPHACN"])
