"""ClusterNetworkPolicies and KubeVirt migrations: optional APIs, served or not.

The whole daemon (felix syncer, KDD) on the test bed API server.  Go Typha v3.32.1 asks for
both resources at start-up whether or not their CRDs are installed; its watcher cache
(``libcalico-go/lib/backend/watchersyncer/watchercache.go``) treats a list answered ``404``
as in sync (the syncer, and so readiness, does not wait for it), logs that at INFO once,
lists again every ``MissingAPIRetryTime`` (30 minutes; here shortened) and never watches a
resource it could not list; once the list succeeds it serves what it lists and watches as
for any kind ("Backing API has been installed").  Calico's LiveMigration client lists
VMIMs without client-go's pager (``k8s/resources/livemigration.go``); ClusterNetworkPolicies
are paged like everything else (``k8s/resources/kubeclusternetworkpolicy.go``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from testbed.apiserver import ApiServer, open_apiserver
from tests.e2e.harness import HANG, wait_readiness
from tests.integration.request_log import RequestLog
from tests.integration.test_go_typha_parity import daemon_on
from trio_typha.daemon import Daemon
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.model.kv import SerializedUpdate
from trio_typha.model.syncers import DatastoreMode, syncer_definition

CNP, VMIM = K.K8S_CLUSTER_NETWORK_POLICY, K.KUBEVIRT_MIGRATION
CNP_KEY = "/calico/v1/policy/KubernetesClusterNetworkPolicy//{}"
LM_KEY = "/calico/resources/v3/projectcalico.org/livemigrations/default/{}"
FELIX = syncer_definition("felix", DatastoreMode.KDD)
RECHECK = 0.5  # Calico's MissingAPIRetryTime is 30 minutes


def cnp(name: str, tier: str = "Admin") -> dict[str, Any]:
    return {"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
            "metadata": {"name": name},
            "spec": {"tier": tier, "priority": 3, "subject": {"namespaces": {}},
                     "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}}


def vmim(name: str, phase: str) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"vmiName": "vm1"},
            "status": {"phase": phase, "migrationState": {"sourcePod": "virt-launcher-vm1"}}}


@asynccontextmanager
async def felix_on(server: ApiServer, *, watch_poll: float = 5.0) -> AsyncIterator[Daemon]:
    config = KubeClientConfig(server=server.url, source="test")
    tuning = WatchTuning(min_watch_interval=0.01, backoff_initial=0.02, backoff_max=0.2,
                         missing_kind_recheck=RECHECK, empty_rv_poll=watch_poll)
    async with open_kubernetes_datastore(config, tuning=tuning) as ds, \
            daemon_on(ds) as daemon:
        yield daemon


def published(daemon: Daemon) -> dict[str, SerializedUpdate]:
    return {u.key: u for u in daemon.pipelines["felix"].feed.snapshot_point().snapshot()}


async def until_published(daemon: Daemon, key: str, present: bool = True) -> None:
    with trio.fail_after(HANG):
        while (key in published(daemon)) is not present:  # noqa: ASYNC110
            await trio.sleep(0.02)


def expected(kind: K.ResourceKind, stored: dict[str, Any]) -> dict[str, bytes]:
    """What the model converts the stored object to (the bytes are pinned by
    tests/unit/model/test_k8s_cluster_policy.py and test_kubevirt.py)."""
    return {kv.key: kv.value for kv in FELIX.convert(kind, stored)}


async def test_absent_apis_are_in_sync_rechecked_and_picked_up_once_installed(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "trio_typha.datastore.k8s_watch")
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as server:
        log = RequestLog(server)
        async with felix_on(server) as daemon:
            # In sync and ready although neither API exists.
            await wait_readiness(daemon, 200)
            # (A third list means the second one's answer has been taken in.)
            await log.wait_until(lambda: len(log.lists(CNP)) >= 3 and len(log.lists(VMIM)) >= 3)
            # Listed as Go lists them, never watched.
            assert log.lists(VMIM)[0] == {"resourceVersion": "0",
                                          "resourceVersionMatch": "NotOlderThan"}
            assert log.lists(CNP)[0] == {"resourceVersion": "0",
                                         "resourceVersionMatch": "NotOlderThan", "limit": "500"}
            assert log.watches(CNP) == log.watches(VMIM) == []
            for kind in (CNP, VMIM):
                said = [r for r in caplog.records if r.getMessage().startswith(
                    f"{kind} is not served by the API server (404)")]
                assert [r.levelno for r in said][:2] == [logging.INFO, logging.DEBUG]
                assert all(r.levelno == logging.DEBUG for r in said[1:])

            # The CRDs are installed: the next recheck lists them and the watch follows.
            server.install(CNP)
            server.install(VMIM)
            policy = server.store.create(CNP, cnp("late"))
            migration = server.store.create(VMIM, vmim("late", "Running"))
            await until_published(daemon, CNP_KEY.format("late"))
            await until_published(daemon, LM_KEY.format("late"))
            await log.wait_until(lambda: bool(log.watches(CNP) and log.watches(VMIM)))
            served = published(daemon)
            for kind, stored in ((CNP, policy), (VMIM, migration)):
                for key, value in expected(kind, stored).items():
                    assert served[key].value == value
            assert any(r.getMessage().startswith(f"{CNP} is served again")
                       and r.levelno == logging.INFO for r in caplog.records)

            # ... and changes now arrive by watch.
            server.store.delete(CNP, "", "late")
            await until_published(daemon, CNP_KEY.format("late"), present=False)


async def test_served_apis_are_listed_watched_and_withdrawn_like_go() -> None:
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,), cluster_network_policy=True,
                              kubevirt=True) as server:
        listed_cnp = server.store.create(CNP, cnp("listed"))
        listed_vmim = server.store.create(VMIM, vmim("listed", "Running"))
        server.store.create(VMIM, vmim("pending", "Pending"))  # stands for nothing yet
        async with felix_on(server) as daemon:
            served = published(daemon)
            for kind, stored in ((CNP, listed_cnp), (VMIM, listed_vmim)):
                want = expected(kind, stored)
                assert want and all(served[k].value == v for k, v in want.items())
            assert served[LM_KEY.format("listed")].revision == \
                listed_vmim["metadata"]["resourceVersion"]
            assert LM_KEY.format("pending") not in served

            # A migration reaching an emitting phase appears; finishing withdraws it.
            moved = server.store.update(VMIM, {**vmim("pending", "Scheduling"),
                                               "metadata": server.store.get(
                                                   VMIM, "default", "pending")["metadata"]})
            await until_published(daemon, LM_KEY.format("pending"))
            assert published(daemon)[LM_KEY.format("pending")].value == \
                expected(VMIM, moved)[LM_KEY.format("pending")]
            server.store.update(VMIM, {**vmim("listed", "Succeeded"),
                                       "metadata": server.store.get(
                                           VMIM, "default", "listed")["metadata"]})
            await until_published(daemon, LM_KEY.format("listed"), present=False)
            server.store.delete(VMIM, "default", "pending")  # a deletion withdraws it too
            await until_published(daemon, LM_KEY.format("pending"), present=False)

            # A policy whose tier no longer converts is a tombstone: its key is deleted.
            server.store.update(CNP, {**cnp("listed", tier="Developer"),
                                      "metadata": server.store.get(CNP, "", "listed")
                                      ["metadata"]})
            await until_published(daemon, CNP_KEY.format("listed"), present=False)


async def test_an_api_that_goes_away_keeps_what_it_served_until_listed_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """Go's watcher cache neither deletes nor re-sends on a 404: a refused watch is followed
    by a list a WatchPollInterval later, a refused list leaves the cache as it is, and the
    list that succeeds again sends only the differences (``finishResync``)."""
    caplog.set_level(logging.DEBUG, "trio_typha.datastore.k8s_watch")
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,),
                              cluster_network_policy=True) as server:
        server.store.create(CNP, cnp("kept"))
        server.store.create(CNP, cnp("gone"))
        log = RequestLog(server)
        async with felix_on(server, watch_poll=0.2) as daemon:
            before = published(daemon)
            assert {CNP_KEY.format("kept"), CNP_KEY.format("gone")} <= before.keys()
            await log.wait_until(lambda: bool(log.watches(CNP)))
            lists = len(log.lists(CNP))
            server.uninstall(CNP)
            # The watch is re-established, refused, and a list follows (refused too).
            await log.wait_until(lambda: len(log.lists(CNP)) > lists)
            await log.wait_until(lambda: len(log.lists(CNP)) > lists + 1)  # the recheck
            # Both lists ask for no older state than the watch had reached (Go keeps its
            # watch revision through a 404: it relisted at the last watch's, here too).
            watched_at = log.watches(CNP)[-1]["resourceVersion"]
            assert [q["resourceVersion"] for q in log.lists(CNP)[lists:lists + 2]] == \
                [watched_at, watched_at]
            said = [r.getMessage() for r in caplog.records]
            assert f"Watch of {CNP} is not served (404); listing it again in 0.2s" in said
            assert f"{CNP} is not served by the API server (404); listing it again in " \
                f"{RECHECK:g}s" in said
            assert {k: u.value for k, u in published(daemon).items()} == \
                {k: u.value for k, u in before.items()}
            server.store.delete(CNP, "", "gone")
            server.install(CNP)
            await until_published(daemon, CNP_KEY.format("gone"), present=False)
            assert CNP_KEY.format("kept") in published(daemon)
        assert not any(r.levelno > logging.INFO for r in caplog.records
                       if r.name.startswith("trio_typha.datastore"))
