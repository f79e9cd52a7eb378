"""Typha's mutual TLS: require a client certificate chained to the CA, then check CN / URI SAN.

If both ClientCN and ClientURISAN are configured, either matching is enough; if only one is,
it must match (typha-wire-protocol §1).
"""

from __future__ import annotations

import os
import ssl
from typing import Any


def server_ssl_context(cert_file: str, key_file: str, ca_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = (ssl.TLSVersion.TLSv1_3 if os.environ.get("TLS_MIN_VERSION") == "1.3"
                           else ssl.TLSVersion.TLSv1_2)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(ca_file)
    ctx.verify_mode = ssl.CERT_REQUIRED
    # gRPC clients negotiate h2 by ALPN; Typha's Go client sends no ALPN.
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def check_peer_identity(cert: dict[str, Any] | None, client_cn: str, client_uri_san: str) -> str:
    """Empty string if the verified peer certificate is acceptable, else the reason."""
    if not client_cn and not client_uri_san:
        return ""
    if not cert:
        return "no client certificate"
    cns = [v for rdn in cert.get("subject", ()) for (k, v) in rdn if k == "commonName"]
    uris = [v for (k, v) in cert.get("subjectAltName", ()) if k == "URI"]
    if client_cn and client_cn in cns:
        return ""
    if client_uri_san and client_uri_san in uris:
        return ""
    wanted = " or ".join(filter(None, [client_cn and f"CN {client_cn!r}",
                                       client_uri_san and f"URI SAN {client_uri_san!r}"]))
    return f"certificate has CN {cns} and URI SANs {uris}, wanted {wanted}"


def peer_identity(cert: dict[str, Any] | None) -> str:
    """A verified client certificate's identity for humans: its CN and URI SANs."""
    if not cert:
        return ""
    cns = [v for rdn in cert.get("subject", ()) for (k, v) in rdn if k == "commonName"]
    uris = [v for (k, v) in cert.get("subjectAltName", ()) if k == "URI"]
    return ", ".join([f"CN={cn}" for cn in cns] + [f"URI={u}" for u in uris])
