"""Typha's mutual TLS: require a client certificate chained to the CA, then check CN / URI SAN.

If both ClientCN and ClientURISAN are configured, either matching is enough; if only one is,
it must match (docs/typha-protocol.md §1).  The lowest TLS version and the TLS 1.2 cipher
suites are Calico's ``TLS_MIN_VERSION`` / ``TLS_CIPHER_SUITES`` (crypto/pkg/tls/tls.go), read
and checked by :mod:`trio_typha.config` and given here as a :class:`TLSPolicy`.

:class:`ServerTLS` re-reads the certificate, key and CA files when they change on disk (it
looks on every accepted connection: three ``stat`` calls), so a rotated certificate takes
effect without a restart.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from typing import Any

from ..config import CIPHER_SUITES, Config, ConfigError
from .client_ca_list import ClientCAList
from .diagnosis import enable_capture

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class TLSPolicy:
    """The lowest TLS version and the OpenSSL cipher string for TLS 1.2 (build it with
    :meth:`from_config`: the defaults are the configuration's)."""

    minimum: ssl.TLSVersion
    ciphers: str

    @classmethod
    def from_config(cls, cfg: Config) -> TLSPolicy:
        versions = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
        names = (CIPHER_SUITES[n] for n in cfg.tls_cipher_suites)
        return cls(versions[cfg.tls_min_version],
                   ":".join(dict.fromkeys(n for n in names if n is not None)))

    def apply(self, ctx: ssl.SSLContext) -> None:
        ctx.minimum_version = self.minimum
        if self.ciphers:
            ctx.set_ciphers(self.ciphers)


def server_ssl_context(cert_file: str, key_file: str, ca_file: str, policy: TLSPolicy, *,
                       capture: bool = True, ca_names: ClientCAList | None = None
                       ) -> ssl.SSLContext:
    """The server context; :class:`ConfigError` naming the setting if a file is bad.

    ``capture``: record the peer's certificate during handshakes (for diagnosis; it costs
    a Python call per TLS record, so connections move to a context without it once the
    handshake is done: :attr:`ServerTLS.serving`).  ``ca_names``: what names the CAs in
    the CertificateRequest (a :class:`ServerTLS` passes its own; else a new one)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    policy.apply(ctx)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    # No TLS 1.2 renegotiation: a write must never need a read (stream.TLSStream).
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    _load(ctx, "TYPHA_SERVER", cert_file, key_file, "TYPHA_CAFILE", ca_file)
    ctx.verify_mode = ssl.CERT_REQUIRED
    # gRPC clients negotiate h2 by ALPN; Typha's Go client sends no ALPN.
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    if capture:
        enable_capture(ctx)
    (ca_names or ClientCAList()).send(ctx, ca_file)
    return ctx


class TLSFilesError(ConfigError):
    """A certificate, key or CA file cannot be used (unreadable, not PEM, not a pair)."""


def _load(ctx: ssl.SSLContext, prefix: str, cert_file: str, key_file: str, ca_var: str,
          ca_file: str) -> None:
    """Load the pair and the CA bundle; :class:`ConfigError` naming the variables if not."""
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TLSFilesError(f"{prefix}CERTFILE={cert_file} / {prefix}KEYFILE={key_file}: "
                          f"cannot load the certificate and key: {_why(exc)}") from None
    if ca_file:
        try:
            ctx.load_verify_locations(ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TLSFilesError(f"{ca_var}={ca_file}: cannot load the CA bundle: "
                              f"{_why(exc)}") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return {"KEY_VALUES_MISMATCH": "the key does not belong to the certificate",
                "NO_START_LINE": "not a PEM file"}.get(exc.reason, exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class ServerTLS:
    """The current server context, rebuilt when the cert, key or CA file changes."""

    def __init__(self, cert_file: str, key_file: str, ca_file: str,
                 policy: TLSPolicy) -> None:
        self.files = (cert_file, key_file, ca_file)
        self.policy = policy
        self._ca_names = ClientCAList()
        self._stamp = self._stat()
        self.context, self.serving = self._build()
        self.reloads = 0

    def _build(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        """(handshake context, the same without certificate capture for after it)."""
        return (server_ssl_context(*self.files, self.policy, ca_names=self._ca_names),
                server_ssl_context(*self.files, self.policy, capture=False,
                                   ca_names=self._ca_names))

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in self.files:
            try:
                st = os.stat(path)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((0, 0, 0))
        return tuple(out)

    def current(self) -> ssl.SSLContext:
        """The context for a new connection (re-read first if a file changed)."""
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                context, serving = self._build()
            except ConfigError as exc:
                log.error("TLS files changed but cannot be loaded; keeping the previous "
                          "certificate: %s", exc)
            else:
                self.context, self.serving = context, serving
                self.reloads += 1
                log.warning("TLS certificate, key or CA changed on disk; now serving %s",
                            describe_chain(self.files[0]))
        return self.context


def describe_chain(cert_file: str) -> str:
    from cryptography import x509

    from .diagnosis import describe
    try:
        with open(cert_file, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
    except (OSError, ValueError) as exc:
        return f"{cert_file} ({exc})"
    from cryptography.hazmat.primitives.serialization import Encoding
    info = describe(cert.public_bytes(Encoding.DER))
    if info is None:
        return cert_file
    return f"{cert_file}: subject {info.subject!r}, issuer {info.issuer!r}, {info.validity()}"


def peer_names(cert: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """(CNs, URI SANs) of a verified peer certificate as ``getpeercert()`` gives it."""
    if not cert:
        return [], []
    cns = [v for rdn in cert.get("subject", ()) for (k, v) in rdn if k == "commonName"]
    uris = [v for (k, v) in cert.get("subjectAltName", ()) if k == "URI"]
    return cns, uris


def check_peer_identity(cert: dict[str, Any] | None, client_cn: str, client_uri_san: str) -> str:
    """Empty string if the verified peer certificate is acceptable, else the reason."""
    if not client_cn and not client_uri_san:
        return ""
    if not cert:
        return "no client certificate"
    cns, uris = peer_names(cert)
    if client_cn and client_cn in cns:
        return ""
    if client_uri_san and client_uri_san in uris:
        return ""
    wanted = " or ".join(filter(None, [client_cn and f"CN {client_cn!r}",
                                       client_uri_san and f"URI SAN {client_uri_san!r}"]))
    return f"certificate has CN {cns} and URI SANs {uris}, wanted {wanted}"



def peer_identity(cert: dict[str, Any] | None) -> str:
    """A verified client certificate's identity for humans: its CN and URI SANs."""
    cns, uris = peer_names(cert)
    return ", ".join([f"CN={cn}" for cn in cns] + [f"URI={u}" for u in uris])



_CLIENT_AUTH = {"RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
                # Python's ssl cannot demand a certificate without verifying it: this one
                # verifies against PrometheusMetricsCAFile too.
                "RequireAnyClientCert": ssl.CERT_REQUIRED,
                "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "NoClientCert": ssl.CERT_NONE}


def metrics_ssl_context(cert_file: str, key_file: str, ca_file: str, client_auth: str,
                        policy: TLSPolicy) -> ssl.SSLContext:
    """The /metrics HTTPS context (Typha's PrometheusMetrics{Cert,Key,CA}File, ClientAuth).

    Built per connection, so rotated files apply to the next scrape, as in Typha."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    policy.apply(ctx)
    _load(ctx, "TYPHA_PROMETHEUSMETRICS", cert_file, key_file,
          "TYPHA_PROMETHEUSMETRICSCAFILE", ca_file)
    if not ca_file and _CLIENT_AUTH[client_auth] is not ssl.CERT_NONE:
        raise ConfigError(f"TYPHA_PROMETHEUSMETRICSCLIENTAUTH={client_auth} needs "
                          "TYPHA_PROMETHEUSMETRICSCAFILE")
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    return ctx
