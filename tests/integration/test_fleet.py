"""The fleet's agents against a real daemon, checked by the invariant checker: in sync they
hold exactly the expected state on both protocols; a lost or altered key is reported."""

from __future__ import annotations

import dataclasses

import trio

from testbed.fleet import AgentGroup, DiscoverySpec, agent_specs
from testbed.invariant import expected_states, read_memory
from trio_typha.client.discovery import ReconnectPolicy
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon

HANG = 30  # hang protection only


async def test_agents_hold_the_expected_state(nursery: trio.Nursery) -> None:
    cfg = load_config({}, overrides={"DatastoreType": "memory", "MemoryDemoCluster": "tiny",
                                     "ServerHost": "127.0.0.1", "ServerWorkers": "1"})
    daemon = Daemon(cfg, listen_port=0)
    await nursery.start(daemon.run)
    specs = agent_specs(8, grpc_share=0.5, syncers=("felix", "bgp"))
    assert [s.protocol for s in specs].count("grpc") == 4
    group = AgentGroup(specs, DiscoverySpec(static=(f"127.0.0.1:{daemon.ports['server']}",)),
                       ReconnectPolicy(startup_delay_max=0.5), seed=1)
    await nursery.start(group.run)
    with trio.fail_after(HANG):
        await group.wait_until(lambda g: g.stats()["in_sync"] == 8)
    assert daemon.store is not None
    expected = expected_states(read_memory(daemon.store), ("felix", "bgp"))
    result = group.compare(expected)
    assert result["mismatched"] == []
    assert result["keys_checked"] == 4 * len(expected["felix"]) + 4 * len(expected["bgp"])
    stats = group.stats()
    assert stats["by_protocol"] == {"typha": 4, "grpc": 4}
    assert len(stats["first_in_sync"]) == 8

    # A lost update and a stale value on two agents are what the verdict must catch.
    lost, stale = group.agents[0], group.agents[3]
    lost.kvs.pop(next(iter(lost.kvs)))
    key, update = next(iter(stale.kvs.items()))
    stale.kvs[key] = dataclasses.replace(update, value=b'{"stale":true}')
    bad = {m["agent"]: m for m in group.compare(expected)["mismatched"]}
    assert set(bad) == {lost.spec.name, stale.spec.name}
    assert (bad[lost.spec.name]["missing"], bad[stale.spec.name]["differing"]) == (1, 1)
    assert bad[stale.spec.name]["first"][0].startswith("differing")


async def test_grpc_agents_resume_after_a_drop(nursery: trio.Nursery) -> None:
    cfg = load_config({}, overrides={"DatastoreType": "memory", "MemoryDemoCluster": "tiny",
                                     "ServerHost": "127.0.0.1", "ServerWorkers": "1"})
    daemon = Daemon(cfg, listen_port=0)
    await nursery.start(daemon.run)
    specs = agent_specs(4, grpc_share=1.0, syncers=("felix",))
    group = AgentGroup(specs, DiscoverySpec(static=(f"127.0.0.1:{daemon.ports['server']}",)),
                       ReconnectPolicy(startup_delay_max=0.2, reconnect_delay_max=0.5), seed=2)
    await nursery.start(group.run)
    with trio.fail_after(HANG):
        await group.wait_until(lambda g: g.stats()["in_sync"] == 4)
    assert daemon.store is not None
    for conn in list(daemon.connections.connections.values()):
        for session in conn.sessions.values():
            assert session.cancel_scope is not None
            session.cancel_scope.cancel()
    for i in range(5):  # while the agents are away
        daemon.store.put({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": f"away-{i}", "labels": {"n": str(i)}}})
    with trio.fail_after(HANG):
        await group.wait_until(lambda g: g.stats()["starts_by_method"].get("position") == 4
                               and g.stats()["in_sync"] == 4)
        expected = expected_states(read_memory(daemon.store), ("felix",))
        await group.wait_until(lambda g: not g.compare(expected)["mismatched"])
    stats = group.stats()
    assert stats["starts_by_method"] == {"snapshot": 4, "position": 4}
    assert stats["start_bytes_by_method"]["position"] < stats["start_bytes_by_method"]["snapshot"]
