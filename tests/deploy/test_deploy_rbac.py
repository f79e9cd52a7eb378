"""The ClusterRole grants exactly what the KDD watcher reads, derived from the code's syncer
definitions; and with nothing but those grants a live daemon gets in sync and ready."""

from __future__ import annotations

from pathlib import Path

import kubernetes
import pytest
import trio

from testbed.apiserver import open_apiserver
from tests.deploy.deploy_render import DEPLOY, by_kind, render
from tests.e2e.harness import daemon_config, running_daemon, wait_readiness
from trio_typha.config import Config
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.datastore.k8s_init import WRITES as INIT_WRITES
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES
from trio_typha.model.syncers import DatastoreMode, syncer_definition

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

#: What trio_typha.datastore's KindWatcher does with a kind: list it (pages) and watch it
#: (the stream, and the short cross-check watch of a silent stream).  The rebalancing
#: poller's EndpointSlice list is a list of a kind the felix syncer already watches.
WATCHER_VERBS = ("list", "watch")


def watcher_reads() -> set[Grant]:
    """Every (group, resource, verb) the KDD watcher can use, over both Calico API groups
    and both IPAM modes (USE_POD_CIDR drops IPAM blocks and affinities)."""
    out: set[Grant] = set()
    for group in (K.CALICO_CRD_GROUP, K.CALICO_V3_GROUP):
        for syncer_type in SYNCER_TYPES:
            for use_pod_cidr in (False, True):
                definition = syncer_definition(syncer_type, DatastoreMode.KDD,
                                               calico_group=group, use_pod_cidr=use_pod_cidr)
                out |= {(k.group, k.plural, verb) for k in definition.kinds
                        for verb in WATCHER_VERBS}
    return out


def init_writes() -> set[Grant]:
    """What KDD datastore initialisation (ClusterInformation default, the built-in Tiers)
    reads and writes, over both Calico API groups."""
    return {(k.group, k.plural, verb)
            for group in (K.CALICO_CRD_GROUP, K.CALICO_V3_GROUP)
            for kind, verbs in INIT_WRITES.items()
            for k in [K.calico_kind(kind, group)] for verb in verbs}


def role_grants() -> set[Grant]:
    role = by_kind(render(DEPLOY / "rbac"), "ClusterRole", "trio-typha")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


def test_cluster_role_grants_exactly_what_the_kdd_watcher_reads() -> None:
    reads, grants = watcher_reads() | init_writes(), role_grants()
    missing = sorted(reads - grants)
    assert not missing, f"the watcher reads what the ClusterRole lacks: {missing}"
    extra = sorted(grants - reads)
    assert not extra, f"the ClusterRole grants what the watcher never uses: {extra}"


@pytest.mark.parametrize("optional_apis", [False, True], ids=["without", "with-cnp-kubevirt"])
async def test_a_daemon_with_only_the_roles_grants_gets_ready(tmp_path: Path,
                                                              optional_apis: bool) -> None:
    """The test bed API server refuses (403) every verb on every resource the role does
    not grant; the daemon must still list and watch everything and become ready, with and
    without the optional APIs (ClusterNetworkPolicies, KubeVirt migrations) installed."""
    grants = await trio.to_thread.run_sync(role_grants)
    all_verbs = {"get", "list", "watch", "create", "update", "patch", "delete",
                 "deletecollection"}
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP, K.CALICO_V3_GROUP),
                              cluster_network_policy=optional_apis,
                              kubevirt=optional_apis) as srv:
        kubeconfig = srv.kubeconfig_path(tmp_path)
        for kind in srv.surface.kinds:
            allowed = {v for g, r, v in grants if (g, r) == (kind.group, kind.plural)}
            if allowed != all_verbs:
                srv.forbid(f"{kind.plural}.{kind.group}" if kind.group else kind.plural,
                           all_verbs - allowed)
        # The restrictions are real: a verb outside the role is refused.
        api = kubernetes.client.ApiClient(_configuration(kubeconfig))
        core = kubernetes.client.CoreV1Api(api)
        with pytest.raises(kubernetes.client.ApiException) as refused:
            await trio.to_thread.run_sync(core.read_namespace, "default")
        assert refused.value.status == 403
        listed = await trio.to_thread.run_sync(core.list_namespace)
        assert listed.items  # list is granted
        api.close()

        config = load_kube_client_config(Config(kubeconfig=str(kubeconfig)))
        async with open_kubernetes_datastore(config) as ds:
            cfg = daemon_config(DatastoreType="kubernetes")
            async with running_daemon(cfg, datastore=ds) as daemon:
                body = await wait_readiness(daemon, 200)
                assert "forbidden" not in body
                assert all(not p.failing for p in daemon.pipelines.values())
        # ... and initialise the datastore as Typha does: the role grants what that writes.
        info = srv.store.get(K.calico_kind("ClusterInformation", K.CALICO_CRD_GROUP),
                             "", "default")
        assert info is not None and info["spec"]["datastoreReady"] is True
        tier = srv.store.get(K.calico_kind("Tier", K.CALICO_CRD_GROUP), "", "default")
        assert tier is not None


def _configuration(kubeconfig: Path) -> kubernetes.client.Configuration:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return cfg
