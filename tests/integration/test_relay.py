"""Relay mode (DatastoreType=typha) on loopback: a chain of three tiers (a root on the
embedded datastore, a relay following it over its feed, a relay following that one) under
churn, with clients of both protocols on the last tier.  The middle relay is killed, or
goes silent behind a proxy; the last tier fails over to the root, treats the root's
snapshot as a relist, and every cache and client must then hold exactly what the
conversion layer derives from the datastore (the invariant checker), without its clients
reconnecting."""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import pytest
import trio

from testbed import invariant as inv
from tests.fault_proxy import open_fault_proxy
from tests.integration.test_churn_invariant import follow
from trio_typha.client.typha import TyphaClient
from trio_typha.config import Config
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.churn import Churn
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES
from trio_typha.relay_process import Relay

HANG = 60.0


def relay_config(*upstreams: int, **params: str) -> Config:
    return load_config({}, config_file=None, overrides={
        "DatastoreType": "typha", "ServerHost": "127.0.0.1",
        "UpstreamTyphaAddrs": ",".join(f"127.0.0.1:{p}" for p in upstreams),
        "WatchStallTimeoutSecs": "2", **params})


async def start(nursery: trio.Nursery, process: Any) -> Any:
    """Runs ``process`` in its own cancel scope; ``process.kill()`` ends it abruptly (its
    sockets close as a killed process's would).  The nursery's end stops the rest."""
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[Any]) -> None:
        with scope:
            await process.run(task_status=task_status)

    await nursery.start(run)
    process.kill = scope.cancel
    await process.wait_in_sync()
    return process


def subjects(processes: dict[str, Any], holders: dict[str, object]
             ) -> list[tuple[str, str, object]]:
    out: list[tuple[str, str, object]] = [
        (f"{name} {t}", t, p) for name, proc in processes.items()
        for t, p in proc.pipelines.items()]
    out += [(name, name.split()[1], h) for name, h in holders.items()]
    return out


def reshape(store: MemoryStore, round_: int) -> None:
    """Deletions and creations (the churn only rewrites): a relay that misses them and
    does not diff on failover keeps phantom keys, or lacks new ones."""
    for ns, name, _ in store.objects(K.K8S_NETWORK_POLICY)[:2]:
        store.delete(K.K8S_NETWORK_POLICY, ns, name)
    _, _, template = store.objects(K.POD)[0]
    for i in range(3):
        pod = copy.deepcopy(template)
        pod["metadata"]["name"] = f"relay-test-{round_}-{i}"
        pod["metadata"].pop("resourceVersion", None)
        pod["metadata"].pop("uid", None)
        store.put(pod)


async def chain_under_churn(break_middle: str) -> None:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    root_cfg = load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1"})
    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            root = await start(nursery, Daemon(root_cfg, store=store, listen_port=0))
            root_port = root.ports["server"]
            middle = await start(nursery, Relay(relay_config(root_port), listen_port=0))
            async with open_fault_proxy(middle.ports["server"]) as proxy:
                last = await start(nursery, Relay(relay_config(proxy.port, root_port),
                                                  listen_port=0))
                assert all(p.state.address.endswith(f":{proxy.port}")
                           for p in last.pipelines.values())
                async with follow(nursery, last.ports["server"]) as holders:
                    churning = trio.CancelScope()
                    nursery.start_soon(_churn, Churn(store, rate=40), churning)
                    await trio.sleep(0.5)
                    reshape(store, 0)
                    await trio.sleep(0.5)
                    if break_middle == "kill":
                        middle.kill()
                    else:  # still connected, but nothing comes through any more
                        proxy.blackhole()
                    reshape(store, 1)  # while the last tier may still follow it
                    for p in last.pipelines.values():
                        while not (p.state.address.endswith(f":{root_port}")  # noqa: ASYNC110
                                   and p.state.connected):
                            await trio.sleep(0.05)
                    reshape(store, 2)
                    await trio.sleep(0.5)
                    churning.cancel()
                    processes = {"root": root, "last": last}
                    reports = await inv.wait_converged(
                        partial(inv.read_memory, store),
                        lambda: subjects(processes, holders), within=HANG / 2)
                    assert len(reports) == len(SYNCER_TYPES) * 4
                    felix = next(r for r in reports if r.subject == "gob felix")
                    assert felix.expected_keys > 20
                    # The clients of the last tier never had to reconnect.
                    gob_clients = [h for h in holders.values()
                                   if isinstance(h, TyphaClient)]
                    assert [c.connections for c in gob_clients] == [1] * len(SYNCER_TYPES)
                    text = last.metrics.exposition().decode()
                    assert 'typha_upstream_failovers{syncer="felix"} 1.0' in text
                    assert 'typha_upstream_lag_seconds{syncer="felix"}' in text
                    page = last.health.table()
                    assert f"feed upstream 127.0.0.1:{root_port}" in page
                    nursery.cancel_scope.cancel()


async def _churn(churn: Churn, scope: trio.CancelScope) -> None:
    with scope:
        await churn.run()


@pytest.mark.parametrize("break_middle", ["kill", "silent"])
async def test_a_three_tier_chain_converges_when_the_middle_relay_goes(
        break_middle: str) -> None:
    await chain_under_churn(break_middle)
