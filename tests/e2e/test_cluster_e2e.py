"""trio-typha as a cluster runs it, written once for a real cluster (``just e2e`` after
``just kind-up``: real calico-node on every node) and for the embedded test bed (CI: the test
bed API server and trio-typha replica processes); see tests/e2e/cluster.py."""

from __future__ import annotations

from collections import Counter
from functools import partial

import pytest
import trio

from testbed import churn as ch
from testbed import invariant as inv
from tests.e2e.cluster import PATIENCE, Cluster, real_kubeconfig

MIX = ch.Mix(create=2, update=2, delete=1, pod_label=0, namespace=1)


async def wait_connections(cluster: Cluster, condition: str) -> dict[str, set[str]]:
    """Poll the replicas' /connections until every agent has exactly one felix connection,
    on a replica still serving; returns replica -> agents."""
    last: dict[str, set[str]] = {}
    with trio.move_on_after(PATIENCE):
        while True:
            last = await cluster.connections()
            counts = Counter(name for names in last.values() for name in names)
            if all(counts[a] == 1 for a in cluster.agent_names):
                return last
            await trio.sleep(0.2)
    raise AssertionError(f"agents not connected ({condition}): {last}")


async def test_every_agent_is_connected_and_connections_spread(cluster: Cluster) -> None:
    by_replica = await wait_connections(cluster, "at start")
    assert len(cluster.replicas) >= 2
    assert set().union(*by_replica.values()) >= cluster.agent_names
    if len(cluster.agent_names) >= len(cluster.replicas):
        empty = [r for r, names in by_replica.items() if not names & cluster.agent_names]
        assert not empty, f"replicas without agents: {empty} ({by_replica})"


async def test_every_replica_converges_under_churn(cluster: Cluster) -> None:
    churn = cluster.churn(rate=50, mix=MIX, seed=11, prefix="e2e-churn")
    await trio.to_thread.run_sync(churn.setup)
    try:
        async with cluster.followers() as followers:
            await ch.run_in_trio(churn, writes=100)
            reports = await inv.wait_converged(
                cluster.read, lambda: followers() + cluster.agent_holders(), within=PATIENCE)
            assert len(reports) >= 4 * len(cluster.replicas)
            felix = [r for r in reports if r.syncer_type == "felix"]
            assert all(r.expected_keys > 0 for r in felix)
            contents = await trio.to_thread.run_sync(cluster.read)
            assert any("/KubernetesNetworkPolicy/e2e-churn-" in k
                       for k in inv.expected_state(contents, "felix"))
    finally:
        await trio.to_thread.run_sync(churn.cleanup)


async def test_deleting_a_replica_moves_its_clients_with_nothing_lost(cluster: Cluster) -> None:
    by_replica = await wait_connections(cluster, "before the deletion")
    victim_name = max(by_replica, key=lambda r: len(by_replica[r] & cluster.agent_names))
    [victim] = [r for r in cluster.replicas if r.name == victim_name]
    moved = by_replica[victim_name] & cluster.agent_names
    assert moved
    churn = cluster.churn(rate=20, mix=MIX, seed=5, prefix="e2e-move")
    await trio.to_thread.run_sync(churn.setup)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(ch.run_in_trio, churn, writes=60))  # while clients move
            await cluster.delete_replica(victim)
        after = await wait_connections(cluster, "after the deletion")
        assert victim_name not in after
        assert moved <= set().union(*after.values())
        async with cluster.followers() as followers:
            await inv.wait_converged(cluster.read,
                                     lambda: followers() + cluster.agent_holders(),
                                     within=PATIENCE)
    finally:
        await trio.to_thread.run_sync(churn.cleanup)


@pytest.mark.skipif(real_kubeconfig() is None,
                    reason="needs Felix enforcing policy on real pods: runs on a cluster "
                           "(`just e2e` after `just kind-up`); the embedded test bed has no "
                           "dataplane")
async def test_deny_all_policy_stops_pod_traffic_and_deleting_it_restores_it(
        cluster: Cluster) -> None:
    assert cluster.real
    from tests.e2e.cluster_traffic import deny_all_round_trip

    await deny_all_round_trip(cluster)

