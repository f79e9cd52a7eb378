"""``GET /connections`` on the health port and ``trio-typha connections`` over two replicas.

A known mixed fleet (gob with and without snappy, gRPC, four syncer types) on two in-process
daemons; the JSON must list exactly those clients with their details, and the command must
print them all plus the spread, flagging the replica that carries most of the load.  Under
mutual TLS each row names the client certificate's identity (CN and URI SANs).
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.e2e.harness import HANG, daemon_config, running_daemon
from tests.integration.test_tls_diagnosis import leaf
from trio_typha.cli import main
from trio_typha.client import grpc as g
from trio_typha.client.typha import TyphaClient
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryDatastore, MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.model.kv import SyncStatus


@contextlib.asynccontextmanager
async def replica(**tls: str) -> AsyncIterator[Daemon]:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    async with running_daemon(daemon_config(DatastoreType="memory", **tls),
                              datastore=MemoryDatastore(store)) as daemon:
        with trio.fail_after(HANG):
            await daemon.wait_in_sync()
        yield daemon


async def gob(port: int, host: str, syncer: str, *, compression: bool = True,
              ssl_context: ssl.SSLContext | None = None,
              task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async with TyphaClient("127.0.0.1", port, syncer_type=syncer, hostname=host,
                           compression=compression, ssl_context=ssl_context) as client:
        await client.wait_for_status(SyncStatus.IN_SYNC)
        task_status.started()
        async for _ in client.batches():
            pass


async def grpc(port: int, host: str, syncer: str, ssl_context: ssl.SSLContext | None = None,
               task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    stream = await g.open_stream("127.0.0.1", port, ssl_context=ssl_context)
    async with stream:
        async for ev in g.sync(stream, syncer, hostname=host, version="v-test"):
            if isinstance(ev, g.Finished):
                task_status.started()


# replica index, protocol, hostname, syncer, compression
FLEET = [
    (0, "gob", "node-a", "felix", True),
    (0, "gob", "node-a", "bgp", False),
    (0, "grpc", "node-b", "felix", None),
    (0, "grpc", "node-b", "tunnel-ip-allocation", None),
    (0, "gob", "node-c", "node-status", True),
    (1, "gob", "node-d", "felix", True),
]


async def fetch(daemon: Daemon) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        resp = await http.get(f"http://127.0.0.1:{daemon.ports['health']}/connections")
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    return resp.json()


async def all_streaming(daemons: list[Daemon]) -> bool:
    rows = [r for d in daemons for r in (await fetch(d))["connections"]]
    return all(r["state"] == "streaming" and r["seq"] is not None for r in rows)


async def test_connections_json_and_table_for_two_replicas(
        capsys: pytest.CaptureFixture[str]) -> None:
    async with replica() as a, replica() as b, trio.open_nursery() as fleet:
        daemons = [a, b]
        with trio.fail_after(HANG):
            for index, proto, host, syncer, compression in FLEET:
                port = daemons[index].ports["server"]
                if proto == "gob":
                    await fleet.start(lambda task_status, p=port, h=host, s=syncer,
                                      c=compression: gob(p, h, s, compression=bool(c),
                                                         task_status=task_status))
                else:
                    await fleet.start(grpc, port, host, syncer)
            # The last breadcrumb write is recorded after in-sync reaches the client.
            while not await all_streaming(daemons):  # noqa: ASYNC110 - polls the endpoint
                await trio.sleep(0.02)

        doc = await fetch(a)
        assert doc["replica"].endswith(f":{a.ports['server']}")
        assert doc["connection_limit"] == 10000
        rows = {(r["hostname"], r["syncer_type"]): r for r in doc["connections"]}
        assert set(rows) == {(h, s) for i, _, h, s, _ in FLEET if i == 0}
        for index, proto, host, syncer, compression in FLEET:
            if index != 0:
                continue
            row = rows[host, syncer]
            assert row["protocol"] == ("typha-gob" if proto == "gob" else "grpc")
            assert row["compression"] == ("snappy" if compression else "")
            assert row["peer"].startswith("127.0.0.1:")
            assert row["state"] == "streaming"
            feed = a.pipelines[syncer].feed
            assert row["seq"] == feed.latest.seq and row["lag_seq"] == 0
            assert row["lag_secs"] == 0.0
            assert row["bytes_sent"] > 0 and row["messages_sent"] > 0
            assert row["tls_identity"] == ""
            assert row["connected_secs"] >= 0
        assert rows["node-b", "felix"]["client_version"] == "v-test"
        # Both gRPC streams are their own connections here (one channel each).
        assert len({r["connection_id"] for r in doc["connections"]}) == 5

        addrs = [f"127.0.0.1:{d.ports['health']}" for d in daemons]
        argv = ["connections", *[x for addr in addrs for x in ("--addr", addr)]]
        assert await trio.to_thread.run_sync(main, argv) == 0
        out = capsys.readouterr().out
        for _, _, host, syncer, _ in FLEET:
            assert any(host in line and syncer in line for line in out.splitlines())
        spread = {line.split()[0]: line for line in out.splitlines()
                  if line.startswith(tuple(addrs))
                  and line.split()[1].isdigit() and len(line.split()) >= 7}
        a_line, b_line = spread[addrs[0]].split(), spread[addrs[1]].split()
        # TOTAL felix bgp tunnel-ip-allocation node-status SHARE
        assert a_line[1:7] == ["5", "2", "1", "1", "1", "83%"]
        assert b_line[1:7] == ["1", "1", "0", "0", "0", "17%"]
        assert "SKEW: +2.0 vs mean 3.0" in spread[addrs[0]]
        assert "SKEW: -2.0 vs mean 3.0" in spread[addrs[1]]

        assert await trio.to_thread.run_sync(main, [*argv, "--json"]) == 0
        both = json.loads(capsys.readouterr().out)
        assert [len(both[x]["connections"]) for x in addrs] == [5, 1]

        # An unreachable replica is reported, and the exit status says so.
        with trio.socket.socket() as s:
            await s.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{s.getsockname()[1]}"
        assert await trio.to_thread.run_sync(main, [*argv, "--addr", dead]) == 1
        assert f"{dead}" in (out := capsys.readouterr().out) and "UNREACHABLE" in out
        fleet.cancel_scope.cancel()


NODE_URI = "spiffe://cluster.local/ns/calico-system/sa/calico-node"


async def test_connections_show_tls_identity_under_mutual_tls(tmp_path: Path) -> None:
    """One gob and one gRPC client, each with its own client certificate (one accepted by
    ClientCN, the other by ClientURISAN): each row carries that certificate's identity."""
    ca = trustme.CA()
    files = {"ServerCertFile": tmp_path / "server.crt", "ServerKeyFile": tmp_path / "server.key",
             "CAFile": tmp_path / "ca.crt"}
    server = ca.issue_cert("typha-server", common_name="typha-server")
    server.cert_chain_pems[0].write_to_path(str(files["ServerCertFile"]))
    server.private_key_pem.write_to_path(str(files["ServerKeyFile"]))
    ca.cert_pem.write_to_path(str(files["CAFile"]))
    certs = {"gob": ca.issue_cert("typha-client", common_name="typha-client"),
             "grpc": leaf(ca, "calico-node-b", ExtendedKeyUsageOID.CLIENT_AUTH, uri=NODE_URI)}

    def context(proto: str) -> ssl.SSLContext:  # one each: open_stream sets ALPN on it
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        ca.configure_trust(ctx)
        ctx.check_hostname = False
        certs[proto].configure_cert(ctx)
        return ctx

    async with replica(ClientCN="typha-client", ClientURISAN=NODE_URI,
                       **{k: str(v) for k, v in files.items()}) as d, \
            trio.open_nursery() as fleet:
        port = d.ports["server"]
        with trio.fail_after(HANG):
            await fleet.start(lambda task_status: gob(port, "node-a", "felix",
                                                      ssl_context=context("gob"),
                                                      task_status=task_status))
            await fleet.start(grpc, port, "node-b", "bgp", context("grpc"))
            while not await all_streaming([d]):  # noqa: ASYNC110 - polls the endpoint
                await trio.sleep(0.02)
        rows = {r["hostname"]: r for r in (await fetch(d))["connections"]}
        fleet.cancel_scope.cancel()
    assert set(rows) == {"node-a", "node-b"}
    assert (rows["node-a"]["protocol"], rows["node-a"]["syncer_type"],
            rows["node-a"]["tls_identity"]) == ("typha-gob", "felix", "CN=typha-client")
    assert (rows["node-b"]["protocol"], rows["node-b"]["syncer_type"],
            rows["node-b"]["tls_identity"]) == ("grpc", "bgp",
                                                f"CN=calico-node-b, URI={NODE_URI}")
    for row in rows.values():
        assert row["state"] == "streaming" and row["peer"].startswith("127.0.0.1:")
        assert row["bytes_sent"] > 0
