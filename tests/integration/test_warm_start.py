"""Warm start from a sibling, against the test bed's API server (KDD) and a real etcd.

A replica started with WarmStartPeers takes its sibling's caches, trackers and watch resume
points over the sync port, then watches the datastore from there.  The invariant checker
(reading the datastore afresh) proves its caches equal what a cold start builds, under
churn after the transfer; the API server's request log (and, for etcd, a counting proxy)
shows what the start cost the datastore.  ``fail_after`` only guards against hangs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import kubernetes
import trio

from testbed import churn as ch
from testbed import invariant as inv
from testbed.apiserver import open_apiserver
from tests.e2e.harness import HANG, daemon_config, running_daemon
from tests.integration.request_log import RequestLog
from tests.integration.test_churn_invariant import MIX, place_pods
from trio_typha.config import Config
from trio_typha.daemon import Daemon
from trio_typha.datastore.k8s_api import resource_path
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.model.syncers import DatastoreMode


def list_requests(requests: list[tuple[str, dict[str, str]]]) -> list[str]:
    """The paths of the LISTs of watched kinds among ``requests``."""
    kinds = {resource_path(k) for k in inv.watched_kinds(DatastoreMode.KDD, K.CALICO_CRD_GROUP)}
    return [p for p, q in requests if p in kinds and "watch" not in q]


def caches(*daemons: tuple[str, Daemon]) -> list[tuple[str, str, object]]:
    return [(f"{name} {t}", t, p) for name, d in daemons for t, p in d.pipelines.items()]


@asynccontextmanager
async def kdd_daemon(config: object, **env: str) -> AsyncIterator[Daemon]:
    async with open_kubernetes_datastore(config) as ds, \
            running_daemon(daemon_config(DatastoreType="kubernetes", **env),
                           datastore=ds) as daemon:
        yield daemon


async def test_kdd_warm_start_equals_cold_start_and_lists_nothing(tmp_path: Path) -> None:
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as srv:
        kubeconfig = srv.kubeconfig_path(tmp_path)
        config = load_kube_client_config(Config(kubeconfig=str(kubeconfig)))
        log = RequestLog(srv)
        with ch.api_client(kubeconfig) as client:
            await trio.to_thread.run_sync(place_pods, kubernetes.client.CoreV1Api(client),
                                          "churn-0", 3)
            churn = ch.Churn(client, ch.ChurnConfig(rate=200, mix=MIX, seed=5,
                                                    pods_per_namespace=2))
            await trio.to_thread.run_sync(churn.setup)
            read = partial(inv.read_kubernetes, client)
            async with kdd_daemon(config) as cold:
                with trio.fail_after(HANG):
                    await cold.wait_in_sync()
                assert "cold start" in cold.warm.describe()
                cold_lists = len(list_requests(log.requests))
                await ch.run_in_trio(churn, writes=60)
                before = len(log.requests)
                peer = f"127.0.0.1:{cold.ports['server']}"
                async with kdd_daemon(config, WarmStartPeers=peer) as warm:
                    with trio.fail_after(HANG):
                        await warm.wait_in_sync()
                    assert warm.warm is not None and warm.warm.source == peer
                    lists = list_requests(log.requests[before:])
                    await ch.run_in_trio(churn, writes=60)
                    reports = await inv.wait_converged(
                        read, lambda: caches(("cold", cold), ("warm", warm)), within=HANG)
                    assert all(r.ok for r in reports)
                    felix = next(r for r in reports if r.subject == "warm felix")
                    assert felix.expected_keys > 20
                    # The cold start listed every kind; the warm one only asked again
                    # for the two kinds this API server does not serve (404, no objects).
                    assert cold_lists > 20
                    assert sorted(p.rsplit("/", 1)[1] for p in lists) == [
                        "clusternetworkpolicies", "virtualmachineinstancemigrations"]
                    _, _, body = warm.health.handle("/readiness")
                    assert b"warm start from sibling " + peer.encode() in body
