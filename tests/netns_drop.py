"""Inside a fresh network namespace: drop the inbound packets of the daemon's open datastore
connections, delete an object, and report whether (and when) the deletion reached a client.

Run as ``unshare --net -- python -m tests.netns_drop {etcd,kdd} {change,quiet} WORKDIR``
(root); prints one JSON line.  ``change`` deletes the object right after the drop (whatever
checks the watch notices first); ``quiet`` first waits, with nothing changing, until the
dropped watch is broken - by HTTP/2 PINGs on an HTTP/2 connection, by TCP keepalive on an
HTTP/1.1 one (``quiet_for``: how long that took) - then deletes.  The namespace has only
its own loopback, so the nftables rule touches nothing outside it.  The rule matches the
connections open at that moment, from the datastore's port to this process's client ports
(etcd's own gateway connections are left alone): they stay open and silent, as when a host
firewall starts dropping an established connection's packets.  Connections opened
afterwards get through.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import trio

from testbed.apiserver import open_apiserver
from tests.etcd_server import run_etcd
from tests.stall_harness import GNP_KEY, PROFILE_KEY, deletion_arrives, felix_daemon, gnp, warnings
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K

DEADLINE = 6.0  # keepalive after 2 s idle, probes every 1 s, TCP_USER_TIMEOUT 5 s


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def own_client_ports(server_port: int) -> list[int]:
    """Local ports of this process's established TCP connections to ``server_port``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        if state == "01" and int(remote.split(":")[1], 16) == server_port and inode in inodes:
            ports.append(int(local.split(":")[1], 16))
    return ports


def drop_inbound(server_port: int, client_ports: list[int]) -> None:
    ports = ", ".join(map(str, client_ports))
    for rule in ("add table inet stall",
                 "add chain inet stall input { type filter hook input priority 0 ; }",
                 f"add rule inet stall input tcp sport {server_port} tcp dport {{ {ports} }} "
                 "drop"):
        subprocess.run(["nft", *rule.split()], check=True)


async def broken_by_keepalive(records: list[logging.LogRecord]) -> float:
    """Wait for the WARNING of a watch given up on (PING deadline, or the kernel's
    keepalive); seconds waited."""
    started = time.monotonic()
    with trio.fail_after(30):
        while True:
            if warnings(records, "session failed") or warnings(records, "broke after") \
                    or warnings(records, "PING deadline"):
                return time.monotonic() - started
            await trio.sleep(0.05)


async def scenario(which: str, quiet: bool, workdir: Path,
                   records: list[logging.LogRecord]) -> dict[str, object]:
    result: dict[str, object] = {}
    if which == "etcd":
        async with run_etcd(workdir) as etcd, etcd.client() as c:
            await c.put_resource(gnp("doomed"))
            # Only the connection's PINGs or the watch's progress requests can notice: no
            # request timeout within the test's time.
            ds = EtcdDatastore(etcd.config, stall_deadline=DEADLINE,
                               request_timeout=120, backoff_initial=0.05, backoff_max=0.2)
            async with felix_daemon(ds) as (_, client):
                ports = own_client_ports(etcd.client_port)
                drop_inbound(etcd.client_port, ports)
                if quiet:
                    result["quiet_for"] = await broken_by_keepalive(records)
                started = time.monotonic()
                async with etcd.client() as writer:  # a new connection: not dropped
                    await writer.delete_resource(K.calico_kind("GlobalNetworkPolicy"), "",
                                                 "doomed")
                took = await deletion_arrives(client, GNP_KEY.format("doomed"), started)
        return {**result, "dropped": len(ports), "took": took}
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,),
                              bookmark_interval=3600) as server:
        server.store.create(K.NAMESPACE, {"metadata": {"name": "doomed"}})
        config = KubeClientConfig(server=server.url, source="test")
        tuning = WatchTuning(stall_deadline=DEADLINE, min_watch_interval=0.01,
                             backoff_initial=0.02, backoff_max=0.2)
        async with open_kubernetes_datastore(config, tuning=tuning) as ds, \
                felix_daemon(ds) as (_, client):
            ports = own_client_ports(server.port)
            drop_inbound(server.port, ports)
            if quiet:
                result["quiet_for"] = await broken_by_keepalive(records)
            started = time.monotonic()
            server.store.delete(K.NAMESPACE, "", "doomed")
            took = await deletion_arrives(client, PROFILE_KEY.format("doomed"), started)
    return {**result, "dropped": len(ports), "took": took}


def main() -> None:
    which, mode, workdir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    handler = _Records()
    logging.getLogger("trio_typha.datastore").addHandler(handler)
    logging.getLogger("trio_typha.datastore").setLevel(logging.INFO)
    result = trio.run(scenario, which, mode == "quiet", workdir, handler.records)
    result["warnings"] = warnings(handler.records, "")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
