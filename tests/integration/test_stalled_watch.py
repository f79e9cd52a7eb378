"""A watch stream that stops delivering is noticed, resumed, and the change it missed reaches
a client: real etcd and the test bed API server, the whole daemon, a real grpcio client.

Between the daemon and the datastore sits :mod:`tests.fault_proxy`.  Once the client is in
sync, the test stalls the connections carrying watches (both TCP connections stay open, the
server's bytes stop at the proxy) while every other connection keeps working, deletes an
object, and waits for the deletion to reach the client.  The deadline is short (real
sockets, real time); the detection time is printed, not asserted (the virtual-time tests in
tests/unit/test_stall_check.py hold the deadline).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from testbed.apiserver import open_apiserver
from tests.e2e.harness import HANG, wait_readiness
from tests.etcd_server import run_etcd
from tests.fault_proxy import open_fault_proxy
from tests.stall_harness import (
    GNP_KEY,
    PROFILE_KEY,
    deletion_arrives,
    felix_daemon,
    gnp,
    is_watch,
    stall_warnings,
    warnings,
    watch_ages,
)
from trio_typha.daemon import Daemon
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.datastore.etcd_config import EtcdConfig
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K

DEADLINE = 3.0  # seconds: probes every second while a stream is silent


@pytest.mark.etcd
async def test_etcd_watch_stalled_by_a_proxy_is_resumed_and_the_deletion_arrives(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "trio_typha.datastore")
    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            open_fault_proxy(etcd.client_port) as proxy:
        for name in ("stays", "doomed"):
            await c.put_resource(gnp(name))
        ds = EtcdDatastore(EtcdConfig(endpoints=(f"http://127.0.0.1:{proxy.port}/",)),
                           stall_deadline=DEADLINE,
                           backoff_initial=0.05, backoff_max=0.5)
        async with felix_daemon(ds) as (daemon, client):
            assert GNP_KEY.format("doomed") in client.kvs
            # One HTTP/2 connection carries the watch, the lists and the status calls.
            assert proxy.blackhole() == 1
            started = time.monotonic()
            await c.delete_resource(K.calico_kind("GlobalNetworkPolicy"), "", "doomed")
            took = await deletion_arrives(client, GNP_KEY.format("doomed"), started)
            # Noticed on that connection: by the unanswered WatchProgressRequests on the
            # stream, or by the unanswered HTTP/2 PING (both end within the deadline).
            noticed = stall_warnings(caplog) + [
                r.getMessage() for r in caplog.records
                if "session failed" in r.getMessage() and "PING" in r.getMessage()]
            print(f"etcd: stalled watch noticed, deletion delivered after {took:.2f}s "
                  f"(deadline {DEADLINE}s): {noticed[0][:90]}")
            assert len(noticed) == 1
            assert noticed[0].startswith("etcd watch felix/etcd stalled: nothing delivered "
                                         "for") or "no HTTP/2 PING ack" in noticed[0]
            assert GNP_KEY.format("stays") in client.kvs
            assert (await watch_ages(daemon))["felix/etcd"] < DEADLINE


@pytest.mark.etcd
async def test_etcd_unanswering_datastore_keeps_serving_but_readiness_names_the_watch(
        tmp_path: Path) -> None:
    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            open_fault_proxy(etcd.client_port) as proxy:
        await c.put_resource(gnp("doomed"))
        ds = EtcdDatastore(EtcdConfig(endpoints=(f"http://127.0.0.1:{proxy.port}/",)),
                           stall_deadline=1.5, request_timeout=1.0,
                           backoff_initial=0.05, backoff_max=0.2)
        async with felix_daemon(ds) as (daemon, client):
            proxy.blackhole_new = True  # every connection, old and new, goes mute
            proxy.blackhole(lambda target: True)
            await c.delete_resource(K.calico_kind("GlobalNetworkPolicy"), "", "doomed")
            body = await readiness_until(daemon, stale=True)
            assert "watch felix/etcd silent for" in body
            # Named as soon as a progress request went unanswered: silent at least the
            # interval before that first request (a third of the 1.5 s deadline).
            assert (await watch_ages(daemon))["felix/etcd"] > 0.5
            assert GNP_KEY.format("doomed") in client.kvs  # still serving the cache
            proxy.blackhole_new = False  # etcd answers again: the watch resumes
            await deletion_arrives(client, GNP_KEY.format("doomed"), time.monotonic())
            await readiness_until(daemon, stale=False)


async def readiness_until(daemon: Daemon, stale: bool) -> str:
    """Poll /readiness until its detail does (or no longer does) name a silent watch.  It
    answers 200 throughout: Typha keeps serving and stays ready through an outage."""
    with trio.fail_after(HANG):
        while True:
            body = await wait_readiness(daemon, 200)
            if ("silent for" in body) == stale:
                return body
            await trio.sleep(0.1)


def is_stream(target: bytes) -> bool:
    """A KDD watch stream's request (its cross-checks ask for no bookmarks)."""
    return is_watch(target) and b"allowWatchBookmarks=true" in target


@pytest.mark.parametrize("http2", [True, False], ids=["http2", "http1"])
async def test_kdd_watch_stalled_by_a_proxy_is_resumed_and_the_deletion_arrives(
        caplog: pytest.LogCaptureFixture, http2: bool) -> None:
    """Over HTTP/2 every watch is a stream of one connection: the proxy stops forwarding
    it, its PINGs go unanswered, and every watch resumes on a new connection within the
    deadline.  Over HTTP/1.1 (a server without HTTP/2) each watch has a connection of its
    own: the proxy stops forwarding the watch connections only, and the cross-check on
    another connection notices."""
    caplog.set_level(logging.INFO, "trio_typha.datastore")
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,),
                              bookmark_interval=3600, http2=http2) as server, \
            open_fault_proxy(server.port) as proxy:
        for name in ("stays", "doomed"):
            server.store.create(K.NAMESPACE, {"metadata": {"name": name}})
        config = KubeClientConfig(server=f"http://127.0.0.1:{proxy.port}", source="test")
        tuning = WatchTuning(stall_deadline=DEADLINE, min_watch_interval=0.01,
                             backoff_initial=0.02, backoff_max=0.2)
        async with open_kubernetes_datastore(config, tuning=tuning) as ds, \
                felix_daemon(ds) as (daemon, client):
            assert PROFILE_KEY.format("doomed") in client.kvs
            # Every kind the test bed serves is watched (the optional APIs it lacks are not).
            kinds = sum(1 for k in daemon.pipelines["felix"].definition.kinds
                        if server.surface.by_key(k.group, k.plural) is not None)
            with trio.fail_after(HANG):  # in sync comes with the lists; watches follow
                await server.wait_for_watches(lambda n: n >= kinds)
            if http2:
                assert server.traffic.h2_connections == proxy.connections == 1
                assert proxy.blackhole(lambda target: True) == 1
            else:
                with trio.fail_after(HANG):
                    await proxy.wait_for(is_stream, kinds)
                # The streams only: a cross-check of an early stream may already be open,
                # and it must get through.
                assert proxy.blackhole(is_stream) == kinds
            started = time.monotonic()
            server.store.delete(K.NAMESPACE, "", "doomed")
            took = await deletion_arrives(client, PROFILE_KEY.format("doomed"), started)
            print(f"kdd ({'HTTP/2' if http2 else 'HTTP/1.1'}): stalled watch noticed, "
                  f"deletion delivered after {took:.2f}s (deadline {DEADLINE}s)")
            if http2:
                (warning,) = warnings(caplog.records, "PING deadline")
                assert warning.startswith(f"HTTP/2 connection to 127.0.0.1:{proxy.port} "
                                          "broke, silent past its PING deadline")
                assert server.traffic.h2_connections == 2  # every watch on the new one
            else:
                assert any(w.startswith("Watch of namespaces.core/v1 (felix/namespaces) "
                                        "stalled") for w in stall_warnings(caplog))
            assert PROFILE_KEY.format("stays") in client.kvs
            ages = await watch_ages(daemon)
            assert "felix/namespaces" in ages and "felix/pods" in ages


def _cannot_make_netns() -> str | None:
    """Why this machine cannot run the network-namespace tests (None: it can)."""
    for tool in ("unshare", "nft", "ip"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (tools/bootstrap.sh installs nftables, iproute2)"
    probe = subprocess.run(["unshare", "--net", "--", "nft", "list", "ruleset"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace with nftables: {probe.stderr.strip()}"
    return None


@pytest.mark.parametrize("mode", ["change", "quiet"])
@pytest.mark.parametrize("datastore", [pytest.param("etcd", marks=pytest.mark.etcd), "kdd"])
async def test_drop_rule_on_the_watch_connections_in_a_network_namespace(
        tmp_path: Path, datastore: str, mode: str) -> None:
    """tests/netns_drop.py in a fresh network namespace: an nftables rule drops the inbound
    packets of the daemon's open datastore connections.  With a deletion made at once
    (``change``) the watch's checks notice; with nothing changing (``quiet``) HTTP/2 PINGs
    (TCP keepalive over HTTP/1.1) break the watch within the deadline, and the deletion made
    after that arrives through the new connection.  Either way it reaches the client."""
    reason = _cannot_make_netns()
    if reason is not None:
        pytest.skip(reason)
    with trio.fail_after(60):
        done = await trio.run_process(
            ["unshare", "--net", "--", sys.executable, "-m", "tests.netns_drop", datastore,
             mode, str(tmp_path)], capture_stdout=True, capture_stderr=True, check=False,
            cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(done.stdout.decode().splitlines()[-1])
    print(f"{datastore}/{mode}: {result['dropped']} connections dropped; "
          f"quiet until broken {result.get('quiet_for', '-')}; deletion after {result['took']:.2f}s")
    assert result["dropped"] >= 1 and result["warnings"]
    if mode == "quiet":
        # Given up on within the deadline: DEADLINE of tests/netns_drop.py is 6 s.
        assert all("silent" in w for w in result["warnings"])
