"""Typha's mutual TLS on port 5473 with real certificates (trustme), for both protocols."""

from __future__ import annotations

import ssl

import pytest
import trio
import trustme

from testbed.fleet import ClientTLS
from tests.grpcio_sync import grpcio_sync
from trio_typha.client import grpc as g
from trio_typha.client.typha import TyphaClient, TyphaDisconnected
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.model.kv import SyncStatus
from trio_typha.protocols.grpc import typha_pb2 as pb


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    other_ca = trustme.CA()
    server = ca.issue_cert("typha-server")
    felix = ca.issue_cert("typha-client", common_name="typha-client")
    intruder = ca.issue_cert("someone-else", common_name="someone-else")
    stranger = other_ca.issue_cert("typha-client", common_name="typha-client")
    paths = {}
    for name, blob in [("ca", ca.cert_pem), ("server_cert", server.cert_chain_pems[0]),
                       ("server_key", server.private_key_pem),
                       ("felix_cert", felix.cert_chain_pems[0]),
                       ("felix_key", felix.private_key_pem)]:
        paths[name] = d / f"{name}.pem"
        blob.write_to_path(str(paths[name]))
    return {"paths": paths, "ca": ca, "felix": felix, "intruder": intruder,
            "stranger": stranger, "other_ca": other_ca}


@pytest.fixture
async def daemon(nursery, pki):
    p = pki["paths"]
    cfg = load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1",
        "ServerCertFile": str(p["server_cert"]), "ServerKeyFile": str(p["server_key"]),
        "CAFile": str(p["ca"]), "ClientCN": "typha-client",
        "ServerHandshakeTimeoutSecs": "5"})
    store = MemoryStore()
    store.put_all(generate("tiny"))
    d = Daemon(cfg, store=store, listen_port=0)
    await nursery.start(d.run)
    with trio.fail_after(10):
        await d.wait_in_sync()
    yield d
    d.shutdown()


def client_ctx(pki, who: str = "felix") -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    pki["ca"].configure_trust(ctx)
    ctx.check_hostname = False  # Typha's clients check CN / URI SAN, not host names
    pki[who].configure_cert(ctx)
    return ctx


async def test_gob_client_with_valid_certificate(daemon, pki) -> None:
    async with TyphaClient("127.0.0.1", daemon.ports["server"], syncer_type="felix",
                           ssl_context=client_ctx(pki)) as client:
        with trio.fail_after(10):
            await client.wait_for_status(SyncStatus.IN_SYNC)
        expected = daemon.pipelines["felix"].feed.cache.values_by_key()
        assert {k: u.value for k, u in client.kvs.items()} == expected


async def test_grpc_h2_client_negotiates_alpn(daemon, pki) -> None:
    stream = await g.open_stream("127.0.0.1", daemon.ports["server"],
                                 ssl_context=client_ctx(pki), server_hostname="typha-server")
    async with stream:
        assert stream.selected_alpn_protocol() == "h2"
        with trio.fail_after(10):
            async for ev in g.sync(stream, "bgp"):
                if isinstance(ev, g.Finished):
                    assert ev.status is SyncStatus.IN_SYNC
                    break


async def test_real_grpcio_client_over_mtls(daemon, pki) -> None:
    p = pki["paths"]
    tls = ClientTLS(str(p["ca"]), str(p["felix_cert"]), str(p["felix_key"]), "typha-server")
    async with grpcio_sync(daemon.ports["server"], "felix", tls=tls) as client:
        with trio.fail_after(20):
            await client.wait_until(lambda: client.in_sync)
    assert len(client.kvs) == len(daemon.pipelines["felix"].feed.cache)
    assert client.status == pb.SYNC_STATUS_IN_SYNC


@pytest.mark.parametrize("who", ["intruder", "stranger"])  # wrong CN; cert from another CA
async def test_wrong_identity_or_untrusted_certificate_rejected(daemon, pki, who) -> None:
    client = TyphaClient("127.0.0.1", daemon.ports["server"], syncer_type="felix",
                         ssl_context=client_ctx(pki, who))
    with trio.fail_after(15), pytest.raises(TyphaDisconnected):
        async for _ in client.batches():
            pass
    await client.aclose()
    assert not daemon.ctx.sessions


async def test_plain_tcp_is_rejected_when_tls_is_on(daemon) -> None:
    client = TyphaClient("127.0.0.1", daemon.ports["server"], syncer_type="felix")
    with trio.fail_after(15), pytest.raises(TyphaDisconnected):
        async for _ in client.batches():
            pass
    await client.aclose()


async def test_client_without_certificate_rejected(daemon, pki) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    pki["ca"].configure_trust(ctx)
    ctx.check_hostname = False
    client = TyphaClient("127.0.0.1", daemon.ports["server"], syncer_type="felix",
                         ssl_context=ctx)
    with trio.fail_after(15), pytest.raises(TyphaDisconnected):
        async for _ in client.batches():
            pass
    await client.aclose()
