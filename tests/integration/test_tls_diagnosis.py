"""Every TLS failure reason, produced by a real handshake (trustme certificates) against the
daemon, named in one WARNING line and counted in typha_tls_handshake_failures{reason}; the
acceptable CAs in the CertificateRequest; certificate rotation without a restart; the Python
client's own --server-cn / --server-uri-san checks."""

from __future__ import annotations

import contextlib
import datetime
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trio_typha.client import grpc as g
from trio_typha.client.typha import TyphaClient, TyphaDisconnected
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.model.kv import SyncStatus
from trio_typha.tls.client import tls_handshake
from trio_typha.tls.diagnosis import TLSFailure, enable_capture

UTC = datetime.UTC


@pytest.fixture(scope="module")
def pki() -> dict[str, Any]:
    ca, other = trustme.CA(organization_name="Typha CA"), trustme.CA(
        organization_name="Rogue CA")
    return {"ca": ca, "other": other, "server": ca.issue_cert("typha-server", common_name="typha-server"),
            "felix": ca.issue_cert("typha-client", common_name="typha-client")}


class _Leaf:
    """What the tests use of trustme's LeafCert, for a certificate trustme would not make."""

    def __init__(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.cert_chain_pems = [trustme.Blob(cert_pem)]
        self.private_key_pem = trustme.Blob(key_pem)

    def configure_cert(self, ctx: ssl.SSLContext) -> None:
        with trustme.Blob(self.cert_chain_pems[0].bytes() + self.private_key_pem.bytes()
                          ).tempfile() as path:
            ctx.load_cert_chain(path)


def write_server_files(pki: dict[str, Any], d: Path, server: Any = None,
                       ca: trustme.CA | None = None) -> dict[str, Path]:
    server = server or pki["server"]
    paths = {"cert": d / "server.crt", "key": d / "server.key", "ca": d / "ca.crt"}
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    (ca or pki["ca"]).cert_pem.write_to_path(str(paths["ca"]))
    return paths


@contextlib.asynccontextmanager
async def daemon(paths: dict[str, Path] | None, env: dict[str, str] | None = None,
                 **extra: str) -> AsyncIterator[Daemon]:
    overrides = {"DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1",
                 "ServerHandshakeTimeoutSecs": "5", "ShutdownTimeoutSecs": "2", **extra}
    if paths is not None:
        overrides.update({"ServerCertFile": str(paths["cert"]),
                          "ServerKeyFile": str(paths["key"]), "CAFile": str(paths["ca"]),
                          "ClientCN": "typha-client"})
    store = MemoryStore()
    store.put_all(generate("tiny"))
    d = Daemon(load_config(env or {}, config_file=None, overrides=overrides), store=store,
               listen_port=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        with trio.fail_after(10):
            await d.wait_in_sync()
        yield d
        d.shutdown()


def client_ctx(pki: dict[str, Any], cert: Any = None, **settings: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    pki["ca"].configure_trust(ctx)
    ctx.check_hostname = False
    if cert is not None:
        cert.configure_cert(ctx)
    for name, value in settings.items():
        setattr(ctx, name, value)
    return ctx


def leaf(ca: trustme.CA, cn: str, usage: x509.ObjectIdentifier, uri: str = "") -> _Leaf:
    """A certificate chained to ``ca`` with one extended key usage (and a URI SAN): what
    trustme does not make."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), False))
    if uri:
        cert = cert.add_extension(x509.SubjectAlternativeName(
            [x509.UniformResourceIdentifier(uri)]), False)
    cert = cert.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return _Leaf(cert.public_bytes(serialization.Encoding.PEM),
                 key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))




async def tls_attempt(port: int, ctx: ssl.SSLContext) -> None:
    """One handshake and a read: the server's verdict arrives by then (TLS 1.3 included)."""
    sock = await trio.open_tcp_stream("127.0.0.1", port)
    tls = trio.SSLStream(sock, ctx, server_hostname="typha-server")
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await tls.do_handshake()
        await tls.send_all(b"\x00")
        await tls.receive_some(1)
    await trio.aclose_forcefully(tls)


async def plain_attempt(port: int, data: bytes) -> None:
    sock = await trio.open_tcp_stream("127.0.0.1", port)
    with contextlib.suppress(trio.BrokenResourceError):
        await sock.send_all(data)
        await sock.receive_some(1)
    await sock.aclose()


def failures(d: Daemon, reason: str) -> float:
    return d.metrics.tls_handshake_failures.labels(reason=reason)._value.get()


async def wait_counted(d: Daemon, reason: str, n: float = 1) -> None:
    with trio.fail_after(10):
        while failures(d, reason) < n:  # noqa: ASYNC110 - the metric is what we test
            await trio.sleep(0.01)


def warnings(caplog: pytest.LogCaptureFixture, reason: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and f"failed: {reason}: " in r.getMessage()]


PAST = datetime.datetime(2020, 1, 1, tzinfo=UTC)
FUTURE = datetime.datetime(2090, 1, 1, tzinfo=UTC)


async def test_every_client_side_reason_is_named_logged_once_and_counted(
        pki: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    ca: trustme.CA = pki["ca"]
    cases = [
        ("unknown_ca", client_ctx(pki, pki["other"].issue_cert("typha-client")),
         ["O=Rogue CA", "is not signed by a trusted CA"]),
        ("no_client_cert", client_ctx(pki), ["sent no certificate"]),
        ("expired", client_ctx(pki, ca.issue_cert("typha-client", not_after=PAST)),
         ["has expired", "until 2020-01-01 00:00:00 UTC"]),
        ("not_yet_valid", client_ctx(pki, ca.issue_cert("typha-client", not_before=FUTURE)),
         ["not valid yet", "valid from 2090-01-01 00:00:00 UTC"]),
        ("identity_mismatch", client_ctx(pki, ca.issue_cert("intruder",
                                                            common_name="someone-else")),
         ["CN ['someone-else']", "wanted CN 'typha-client'"]),
        ("wrong_key_usage", client_ctx(pki, leaf(ca, "typha-client", ExtendedKeyUsageOID.SERVER_AUTH)),
         ["may not be used for clientAuth", "extended key usage: serverAuth"]),
    ]
    async with daemon(write_server_files(pki, tmp_path)) as d:
        port = d.ports["server"]
        for reason, ctx, details in cases:
            await tls_attempt(port, ctx)
            await wait_counted(d, reason)
            (line,) = warnings(caplog, reason)
            assert line.startswith("TLS handshake with 127.0.0.1:")
            for detail in details:
                assert detail in line, line
        # Plaintext on the TLS port, recognised from its first bytes.
        await plain_attempt(port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        await wait_counted(d, "plaintext_to_tls_port")
        assert "an HTTP/2 (plaintext gRPC) client on the TLS port" in warnings(
            caplog, "plaintext_to_tls_port")[0]
        # Once per peer: the same failure again is counted, not logged at WARNING again.
        await tls_attempt(port, cases[1][1])
        await wait_counted(d, "no_client_cert", 2)
        assert len(warnings(caplog, "no_client_cert")) == 1
        assert not d.ctx.sessions
        exposition = d.metrics.exposition().decode()
        assert 'typha_tls_handshake_failures{reason="no_client_cert"} 2.0' in exposition
        assert 'typha_tls_handshake_failures{reason="cipher_mismatch"} 0.0' in exposition


async def test_version_and_cipher_mismatch(pki: dict[str, Any], tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    paths = write_server_files(pki, tmp_path)
    async with daemon(paths, env={"TLS_MIN_VERSION": "1.3"}) as d:
        await tls_attempt(d.ports["server"], client_ctx(
            pki, pki["felix"], maximum_version=ssl.TLSVersion.TLSv1_2))
        await wait_counted(d, "protocol_version")
        assert "see TLS_MIN_VERSION" in warnings(caplog, "protocol_version")[0]
    # trustme's server key is ECDSA: an RSA-only suite list leaves nothing to agree on.
    async with daemon(paths, env={"TLS_CIPHER_SUITES": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
                      ) as d:
        await tls_attempt(d.ports["server"], client_ctx(
            pki, pki["felix"], maximum_version=ssl.TLSVersion.TLSv1_2))
        await wait_counted(d, "cipher_mismatch")
        assert "see TLS_CIPHER_SUITES" in warnings(caplog, "cipher_mismatch")[0]


async def test_tls_to_the_plaintext_port(pki: dict[str, Any],
                                         caplog: pytest.LogCaptureFixture) -> None:
    async with daemon(None) as d:
        await tls_attempt(d.ports["server"], client_ctx(pki, pki["felix"]))
        await wait_counted(d, "tls_to_plaintext_port")
        assert "TLS ClientHello on a plaintext connection" in warnings(
            caplog, "tls_to_plaintext_port")[0]


async def test_certificate_request_names_the_acceptable_cas(pki: dict[str, Any],
                                                            tmp_path: Path) -> None:
    requests: list[bytes] = []
    ctx = client_ctx(pki, pki["felix"])

    def on_message(conn: Any, direction: str, version: int, content_type: int,
                   msg_type: int, data: bytes) -> None:
        if direction == "read" and msg_type == 13:  # CertificateRequest
            requests.append(data)
    ctx._msg_callback = on_message  # type: ignore[attr-defined]
    ca_name = x509.load_pem_x509_certificate(pki["ca"].cert_pem.bytes()).subject
    async with daemon(write_server_files(pki, tmp_path)) as d:
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            ctx.maximum_version = ctx.minimum_version = version
            requests.clear()
            await tls_attempt(d.ports["server"], ctx)
            assert requests and ca_name.public_bytes() in requests[0]


async def test_rotated_certificate_and_ca_are_picked_up_without_restart(
        pki: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths = write_server_files(pki, tmp_path)
    async with daemon(paths) as d:
        port = d.ports["server"]

        async def server_cn(ctx: ssl.SSLContext) -> str:
            stream = await g.open_stream("127.0.0.1", port, ssl_context=ctx,
                                         server_cn="typha-server")
            cert = stream.getpeercert()
            await stream.aclose()
            return dict(x[0] for x in cert["subject"])["commonName"]

        assert await server_cn(client_ctx(pki, pki["felix"])) == "typha-server"
        # A new CA and server certificate, written in place (as a Secret update does).
        new_ca = trustme.CA(organization_name="Typha CA 2")
        write_server_files(pki, tmp_path, server=new_ca.issue_cert(
            "typha-server", common_name="typha-server"), ca=new_ca)
        new_client = client_ctx(pki, new_ca.issue_cert("typha-client",
                                                       common_name="typha-client"))
        new_ca.configure_trust(new_client)
        assert await server_cn(new_client) == "typha-server"
        assert d.tls is not None and d.tls.reloads == 1
        assert "TLS certificate, key or CA changed on disk; now serving" in caplog.text
        assert "Typha CA 2" in caplog.text
        # The old client certificate's CA is no longer trusted.
        old_client = client_ctx(pki, pki["felix"])
        new_ca.configure_trust(old_client)
        await tls_attempt(port, old_client)
        await wait_counted(d, "unknown_ca")
        # A half-written rotation (key does not match) keeps the working certificate.
        pki["server"].private_key_pem.write_to_path(str(paths["key"]))
        assert await server_cn(new_client) == "typha-server"
        assert "cannot be loaded; keeping the previous certificate" in caplog.text


async def test_python_client_checks_server_cn_and_uri_san(pki: dict[str, Any],
                                                          tmp_path: Path) -> None:
    uri_server = leaf(pki["ca"], "typha-server", ExtendedKeyUsageOID.SERVER_AUTH,
                      "spiffe://cluster/typha")
    async with daemon(write_server_files(pki, tmp_path, server=uri_server)) as d:
        port = d.ports["server"]
        ctx = client_ctx(pki, pki["felix"])
        with pytest.raises(TLSFailure) as wrong_cn:
            await g.open_stream("127.0.0.1", port, ssl_context=ctx, server_cn="other-server")
        assert wrong_cn.value.reason == "identity_mismatch"
        assert "wanted CN 'other-server'" in str(wrong_cn.value)
        assert "typha-server" in str(wrong_cn.value)
        stream = await g.open_stream("127.0.0.1", port, ssl_context=ctx,
                                     server_uri_san="spiffe://cluster/typha")
        await stream.aclose()
        # Either one matching is enough when both are expected, as in Typha.
        stream = await g.open_stream("127.0.0.1", port, ssl_context=ctx,
                                     server_cn="nope", server_uri_san="spiffe://cluster/typha")
        await stream.aclose()
        with pytest.raises(TLSFailure, match="wanted URI SAN 'spiffe://cluster/other'"):
            sock = await trio.open_tcp_stream("127.0.0.1", port)
            await tls_handshake(sock, ctx, server_uri_san="spiffe://cluster/other")
        # The gob client: the same check and the same named error, then a good connection.
        ctx = client_ctx(pki, pki["felix"])  # without the ALPN h2 open_stream set
        client = TyphaClient("127.0.0.1", port, ssl_context=ctx, server_cn="other-server")
        with trio.fail_after(10), pytest.raises(TyphaDisconnected,
                                                match="TLS identity_mismatch: server"):
            async for _ in client.batches():
                pass
        await client.aclose()
        async with TyphaClient("127.0.0.1", port, ssl_context=ctx,
                               server_cn="typha-server") as good:
            with trio.fail_after(10):
                await good.wait_for_status(SyncStatus.IN_SYNC)
        # A server certificate from an unknown CA, seen from the client.
        rogue = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        pki["other"].configure_trust(rogue)
        rogue.check_hostname = False
        enable_capture(rogue)  # as client_ssl_context does: details of the rejected cert
        with pytest.raises(TLSFailure) as unknown:
            await g.open_stream("127.0.0.1", port, ssl_context=rogue)
        assert unknown.value.reason == "unknown_ca"
        assert "O=Typha CA" in str(unknown.value)
