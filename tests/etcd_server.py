"""A real etcd for tests: started on free loopback ports with a temporary data dir.

``async with run_etcd(tmp_path) as etcd:`` starts ``/usr/bin/etcd`` (or ``$ETCD_BIN``), waits
until it answers, and stops it afterwards.  The server can be killed (SIGKILL), frozen
(SIGSTOP/SIGCONT) and started again on the same ports and data dir.  ``etcd.client()`` is a
small gRPC client for writing test data, including :meth:`EtcdClient.put_resource`,
which stores a Calico v3 object dict at its proper key, as calicoctl/libcalico would.

With ``tls=True`` etcd serves https and requires client certificates (from a trustme CA);
``etcd.config`` then carries the CA and client key/cert files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trustme

from trio_typha.datastore.etcd_client import EtcdClient as GrpcClient
from trio_typha.datastore.etcd_config import EtcdConfig
from trio_typha.datastore.etcd_errors import EtcdError
from trio_typha.datastore.etcd_layout import (
    KeyParser,
    decode_resource,
    kind_prefix,
    object_key,
    resource_key,
)
from trio_typha.datastore.etcd_rpc import prefix_end
from trio_typha.model.kinds import ResourceKind

ETCD_BIN = os.environ.get("ETCD_BIN") or shutil.which("etcd") or "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdClient:
    """The product's gRPC client plus the writes and reads tests seed and check with.

    Each call runs on a connection of its own, so the client outlives the etcd restarts the
    tests make under it (as the connection pool of an HTTP/1.1 client would)."""

    def __init__(self, config: EtcdConfig, endpoint: str | None = None) -> None:
        self.config = config
        self.endpoint = endpoint or config.endpoints[0]

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    @asynccontextmanager
    async def client(self) -> AsyncIterator[GrpcClient]:
        async with GrpcClient(self.config, self.endpoint, request_timeout=5.0) as grpc:
            yield grpc

    async def put(self, key: str, value: bytes | str) -> int:
        """Store ``value`` at ``key``; returns the new revision."""
        data = value.encode() if isinstance(value, str) else value
        async with self.client() as grpc:
            return (await grpc.put(key.encode(), data)).revision

    async def delete(self, key: str) -> int:
        """Delete ``key``; returns the revision after the call."""
        async with self.client() as grpc:
            return (await grpc.delete(key.encode())).revision

    async def revision(self) -> int:
        async with self.client() as grpc:
            return (await grpc.status()).header.revision

    async def compact(self, revision: int) -> None:
        """Compact history up to ``revision`` (physically, so it is gone when this returns)."""
        async with self.client() as grpc:
            await grpc.compact(revision)

    async def get_prefix(self, prefix: str) -> dict[str, bytes]:
        """Every key under ``prefix`` with its raw value."""
        async with self.client() as grpc:
            page = await grpc.range(prefix.encode(), prefix_end(prefix.encode()))
        return {kv.key.decode(): kv.value for kv in page.kvs}

    async def put_resource(self, obj: Mapping[str, Any]) -> int:
        """Store a ``projectcalico.org/v3`` object at its key; returns the revision.

        Like libcalico's etcd backend, ``resourceVersion`` is not stored (etcd's
        mod_revision is the version).
        """
        stored = json.loads(json.dumps(obj))
        stored.get("metadata", {}).pop("resourceVersion", None)
        return await self.put(object_key(stored), json.dumps(stored, separators=(",", ":")))

    async def delete_resource(self, kind: ResourceKind, namespace: str, name: str) -> int:
        return await self.delete(resource_key(kind, namespace, name))

    async def resources(self, kinds: list[ResourceKind]
                        ) -> dict[tuple[ResourceKind, str, str], dict[str, Any]]:
        """Every decodable object of ``kinds`` as the watcher would report it."""
        parser = KeyParser(kinds)
        out = {}
        for kind in kinds:
            for key, value in (await self.get_prefix(kind_prefix(kind))).items():
                parsed = parser.parse(key.encode())
                try:
                    obj = decode_resource(kind, value)
                except ValueError:
                    continue
                if parsed is not None:
                    out[parsed] = obj
        return out


class EtcdServer:
    """One etcd process and its data dir: a single-member cluster (see :func:`run_etcd`), or
    ``name`` in the cluster ``initial_cluster`` describes (see :func:`run_etcd_cluster`)."""

    def __init__(self, workdir: Path, *, tls: bool = False, name: str = "default",
                 peer_port: int | None = None, initial_cluster: str = "",
                 token: str = "") -> None:
        self.workdir = workdir
        self.name = name
        self.initial_cluster = initial_cluster
        self.token = token
        self.data_dir = workdir / "data"
        self.log_path = workdir / "etcd.log"
        self.client_port = free_port()
        self.peer_port = peer_port or free_port()
        self.tls = tls
        self.process: trio.Process | None = None
        # etcd logs to log_path; this catches what it prints before its logger is set up.
        self._output = open(workdir / "etcd.stdout", "ab")  # noqa: SIM115 - closed by close()
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.client_port}"
        self.config = EtcdConfig(endpoints=(self.url + "/",))
        if tls:
            self._make_certs()

    def _make_certs(self) -> None:
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("typha-client")
        certs = self.workdir / "certs"
        certs.mkdir()
        ca.cert_pem.write_to_path(str(certs / "ca.pem"))
        server.private_key_pem.write_to_path(str(certs / "server.key"))
        server.cert_chain_pems[0].write_to_path(str(certs / "server.pem"))
        client.private_key_pem.write_to_path(str(certs / "client.key"))
        client.cert_chain_pems[0].write_to_path(str(certs / "client.pem"))
        self.certs = certs
        self.config = EtcdConfig(endpoints=(self.url + "/",), ca_file=str(certs / "ca.pem"),
                                 cert_file=str(certs / "client.pem"),
                                 key_file=str(certs / "client.key"))

    def _args(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        # The token only matters when a data dir is created; a fresh one per data dir gives
        # every (re)created cluster its own cluster id, as distinct real clusters have.
        token = self.token or f"test-{uuid.uuid4()}"
        args = [
            ETCD_BIN, "--name", self.name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", self.initial_cluster or f"{self.name}={peer}",
            "--initial-cluster-token", token,
            # Short timeouts make (re)election after a restart quick.
            "--heartbeat-interval", "20", "--election-timeout", "200",
            "--logger", "zap", "--log-outputs", str(self.log_path), "--log-level", "warn",
        ]
        if self.tls:
            args += ["--cert-file", str(self.certs / "server.pem"),
                     "--key-file", str(self.certs / "server.key"),
                     "--trusted-ca-file", str(self.certs / "ca.pem"), "--client-cert-auth"]
        return args

    def client(self) -> EtcdClient:
        return EtcdClient(self.config)

    async def start(self) -> None:
        """Start etcd (again, on the same ports and data) and wait until it answers."""
        await self.launch()
        await self.wait_ready()

    async def launch(self) -> None:
        """Start the process only (a cluster member answers once a quorum is up)."""
        assert self.process is None, "etcd already running"
        self.process = await trio.lowlevel.open_process(
            self._args(), stdout=self._output, stderr=subprocess.STDOUT)

    async def wait_ready(self) -> None:
        assert self.process is not None
        with trio.fail_after(30):
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"etcd exited with {self.process.returncode}: "
                                       f"{self._log_tail()}")
                try:
                    async with self.client() as c:
                        await c.revision()
                    return
                except EtcdError:
                    await trio.sleep(0.05)

    def _log_tail(self) -> str:
        text = ""
        for p in (self.log_path, self.workdir / "etcd.stdout"):
            if p.exists():
                text += p.read_text()[-2000:]
        return text

    async def _signal_and_wait(self, sig: int) -> None:
        proc = self.process
        if proc is None:
            return
        self.process = None
        if proc.poll() is None:
            proc.send_signal(sig)
        with trio.move_on_after(15):
            await proc.wait()
            return
        proc.kill()  # a clean stop that hangs is not the test's concern
        await proc.wait()

    async def kill(self) -> None:
        """SIGKILL: no clean shutdown, connections reset, data as fsynced."""
        await self._signal_and_wait(signal.SIGKILL)

    async def stop(self) -> None:
        await self._signal_and_wait(signal.SIGTERM)

    def close(self) -> None:
        self._output.close()

    def freeze(self) -> None:
        """SIGSTOP: sockets stay open but nothing answers (a hung or partitioned etcd)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


@asynccontextmanager
async def run_etcd(workdir: Path | None = None, *, tls: bool = False
                   ) -> AsyncIterator[EtcdServer]:
    """Run a fresh etcd for the duration of the block (in ``workdir`` or a temp dir)."""
    with tempfile.TemporaryDirectory(prefix="etcd-", dir=workdir) as tmp:
        server = EtcdServer(Path(tmp), tls=tls)
        try:
            await server.start()
            yield server
        finally:
            if server.process is not None:
                server.process.send_signal(signal.SIGCONT)  # in case a test froze it
            with trio.CancelScope(shield=True):
                await server.stop()
            server.close()


@asynccontextmanager
async def run_etcd_cluster(workdir: Path, members: int = 3) -> AsyncIterator[list[EtcdServer]]:
    """Run a fresh ``members``-member etcd cluster (plain HTTP) for the block."""
    peers = {f"m{i}": free_port() for i in range(members)}
    cluster = ",".join(f"{name}=http://127.0.0.1:{port}" for name, port in peers.items())
    token = f"test-{uuid.uuid4()}"
    with tempfile.TemporaryDirectory(prefix="etcd-cluster-", dir=workdir) as tmp:
        servers = []
        for name, port in peers.items():
            (Path(tmp) / name).mkdir()
            servers.append(EtcdServer(Path(tmp) / name, name=name, peer_port=port,
                                      initial_cluster=cluster, token=token))
        try:
            for server in servers:
                await server.launch()
            for server in servers:
                await server.wait_ready()
            yield servers
        finally:
            with trio.CancelScope(shield=True):
                for server in servers:
                    if server.process is not None:
                        server.process.send_signal(signal.SIGCONT)
                    await server.stop()
                    server.close()
