"""Agent discovery against real servers: EndpointSlices from the test bed API server, SRV
records from the loopback DNS responder, and reconnect spreading after a replica restart."""

from __future__ import annotations

import copy
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from testbed.apiserver import ApiServer, open_apiserver
from testbed.cluster import Replica, typha_endpoint_slice, typha_service
from testbed.dns_responder import DnsResponder
from testbed.fleet import AgentGroup, DiscoverySpec, agent_specs
from trio_typha.client.discovery import (
    DiscoveryError,
    EndpointSliceDiscovery,
    ReconnectPolicy,
    SrvDiscovery,
    TyphaAddress,
)
from trio_typha.config import Config
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.k8s_api import KubeApi
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.model import kinds as K

HANG = 90  # hang protection only (a loaded 2-core machine is slow to sync 200 agents)


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with open_apiserver() as srv:
        yield srv


async def test_endpoint_slices_local_first(apiserver: ApiServer, tmp_path: Path) -> None:
    replicas = [Replica(f"typha-{i}", f"127.0.0.{11 + i}", 5473, f"node-000{i}")
                for i in range(3)]
    store = apiserver.store
    store.create(K.SERVICE, typha_service())
    store.create(K.ENDPOINT_SLICE, typha_endpoint_slice(
        [*replicas, Replica("typha-x", "127.0.0.19", 5473, "node-0001", ready=False)]))
    # A slice of another Service in the same namespace must not be picked up.
    other = typha_endpoint_slice([Replica("o", "127.0.0.99", 5473, "node-0001")],
                                 name="other-1")
    other["metadata"]["labels"]["kubernetes.io/service-name"] = "other"
    store.create(K.ENDPOINT_SLICE, other)
    kube = load_kube_client_config(Config(kubeconfig=str(apiserver.kubeconfig_path(tmp_path))))
    async with KubeApi(kube) as api:
        orders = set()
        for seed in range(30):
            d = EndpointSliceDiscovery(api, node_name="node-0001", rng=random.Random(seed))
            found = await d.discover()
            assert found[0] == TyphaAddress("127.0.0.12", 5473, "node-0001")
            assert {a.host for a in found} == {"127.0.0.11", "127.0.0.12", "127.0.0.13"}
            orders.add(tuple(a.host for a in found[1:]))
        assert len(orders) == 2  # the remote ones are shuffled
        # Every call lists again: a replica going unready disappears from the next answer.
        slice_ = copy.deepcopy(store.get(K.ENDPOINT_SLICE, "kube-system", "calico-typha-demo"))
        slice_["endpoints"][1]["conditions"]["ready"] = False
        store.update(K.ENDPOINT_SLICE, slice_)
        found = await EndpointSliceDiscovery(api, node_name="node-0001").discover()
        assert {a.host for a in found} == {"127.0.0.11", "127.0.0.13"}
        with pytest.raises(DiscoveryError, match="no ready Typha"):
            await EndpointSliceDiscovery(api, service="absent").discover()


async def test_srv_from_loopback_dns(nursery: trio.Nursery) -> None:
    dns_srv = await nursery.start(DnsResponder().serve)
    name = dns_srv.set_typha_service([TyphaAddress("127.0.0.11", 5473),
                                      TyphaAddress("127.0.0.12", 5474)],
                                     service="calico-typha", namespace="kube-system")
    assert name == "_calico-typha._tcp.calico-typha.kube-system.svc.cluster.local"
    firsts = set()
    for seed in range(20):
        found = await SrvDiscovery(name, server=dns_srv.server,
                                   rng=random.Random(seed)).discover()
        assert sorted(a.addr for a in found) == ["127.0.0.11:5473", "127.0.0.12:5474"]
        firsts.add(found[0].addr)
    assert len(firsts) == 2  # equal weights: both get to be first
    # Without additional records the targets are resolved with A queries.
    dns_srv.additional_records = False
    found = await SrvDiscovery(name, server=dns_srv.server).discover()
    assert sorted(a.addr for a in found) == ["127.0.0.11:5473", "127.0.0.12:5474"]
    for record in dns_srv.zone[name]:
        del dns_srv.zone[record.data.target]
    with pytest.raises(DiscoveryError, match="no addresses"):
        await SrvDiscovery(name, server=dns_srv.server).discover()  # NXDOMAIN for targets
    with pytest.raises(DiscoveryError, match="no SRV records"):
        await SrvDiscovery("_x._tcp.nothing.here", server=dns_srv.server).discover()


async def test_srv_silent_server_times_out() -> None:
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as silent:
        await silent.bind(("127.0.0.1", 0))
        d = SrvDiscovery("_a._tcp.b", server=silent.getsockname(), timeout=0.1)
        with pytest.raises(DiscoveryError, match="did not answer"):
            await d.discover()


async def _replica(nursery: trio.Nursery, port: int = 0) -> tuple[Daemon, trio.CancelScope]:
    cfg = load_config({}, overrides={"DatastoreType": "memory", "MemoryDemoCluster": "tiny",
                                     "ServerHost": "127.0.0.1", "ServerWorkers": "1"})
    daemon = Daemon(cfg, listen_port=port)
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await daemon.run(task_status=task_status)

    await nursery.start(run)
    return daemon, scope


def _max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@pytest.mark.parametrize("spread", [0.0, 3.0])
async def test_replica_restart_no_reconnect_burst(nursery: trio.Nursery, spread: float) -> None:
    """200 agents on two replicas; one is killed and restarted.  With reconnect_delay_max=3 s
    each of its agents waits uniform(0, 3 s) after noticing the loss, so they come back at
    about n/3 per second, never in one burst; with 0 (Felix's behaviour) every one dials at
    once.  The delay is measured per agent from the moment it noticed the loss to its dial,
    so a loaded machine (noticing 100 closed sockets takes a while) cannot blur it; every
    agent must be back in sync afterwards."""
    a, a_scope = await _replica(nursery)
    b, _ = await _replica(nursery)
    port_a = a.ports["server"]
    group = AgentGroup(agent_specs(200), DiscoverySpec(static=(
        f"127.0.0.1:{port_a}", f"127.0.0.1:{b.ports['server']}")),
        ReconnectPolicy(reconnect_delay_max=spread, backoff_initial=0.2), seed=3)
    await nursery.start(group.run)
    with trio.fail_after(HANG):
        await group.wait_until(lambda g: g.stats()["in_sync"] == 200)
    on_a = [ag for ag in group.agents if ag.address is not None and ag.address.port == port_a]
    assert 40 < len(on_a) < 160  # static addresses are shuffled per agent
    a_scope.cancel()  # abrupt: every connection of replica A drops at once
    await _replica(nursery, port_a)  # ... and it comes straight back
    with trio.fail_after(HANG):
        await group.wait_until(lambda _: all(ag.in_sync and len(ag.connects) == 2
                                             for ag in on_a))
    delays = []
    for ag in on_a:
        (lost,) = ag.drops
        delays.append(min(t for t in ag.connector.attempt_times if t >= lost) - lost)
    if spread:
        rate = len(on_a) / spread  # the configured rate: the dropped agents over the spread
        assert _max_in_window(delays, 1.0) <= 1.5 * rate
        assert max(delays) > spread * 0.8 and min(delays) < spread * 0.2
    else:
        assert max(delays) < 1.0  # all at once: the burst the spread prevents
    assert group.stats()["in_sync"] == 200


async def test_client_cli_discovers(nursery: trio.Nursery, apiserver: ApiServer, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``trio-typha client`` uses the same discovery: EndpointSlices (a dead replica listed
    first on our node is skipped for the live one), SRV, and static lists."""
    from trio_typha.cli import _parser
    from trio_typha.client.cli import run_client

    daemon, _ = await _replica(nursery)
    port = daemon.ports["server"]
    with trio.socket.socket() as s:  # a port nobody listens on
        await s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    apiserver.store.create(K.ENDPOINT_SLICE, {
        **typha_endpoint_slice([Replica("live", "127.0.0.1", port, "node-0002")]),
        "metadata": {"name": "a", "namespace": "kube-system",
                     "labels": {"kubernetes.io/service-name": "calico-typha"}}})
    apiserver.store.create(K.ENDPOINT_SLICE, {
        **typha_endpoint_slice([Replica("dead", "127.0.0.1", dead, "node-0001")]),
        "metadata": {"name": "b", "namespace": "kube-system",
                     "labels": {"kubernetes.io/service-name": "calico-typha"}}})
    monkeypatch.setenv("KUBECONFIG", str(apiserver.kubeconfig_path(tmp_path)))
    dns_srv = await nursery.start(DnsResponder().serve)
    srv = dns_srv.set_typha_service([TyphaAddress("127.0.0.1", port)], service="calico-typha",
                                    namespace="kube-system")
    for argv in (["--k8s-service", "calico-typha", "--node-name", "node-0001"],
                 ["--srv", srv, "--dns-server", f"127.0.0.1:{dns_srv.port}"],
                 ["--addr", f"127.0.0.1:{dead},127.0.0.1:{port}", "--protocol", "grpc"]):
        args = _parser().parse_args(["client", "--once", *argv])
        with trio.fail_after(HANG):
            assert await run_client(args) == 0
        assert "in sync: syncer=felix" in capsys.readouterr().out
    args = _parser().parse_args(["client", "--once", "--k8s-service", "nothing"])
    assert await run_client(args) == 1
    assert "discovery failed: no ready Typha" in capsys.readouterr().err
