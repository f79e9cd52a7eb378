"""KDD datastore initialisation as Typha: ClusterInformation default and the built-in Tiers
are created (or completed) when permitted; skipped with one log line when RBAC forbids it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from testbed.apiserver import ApiServer, open_apiserver
from tests.e2e.harness import HANG, daemon_config, running_daemon
from trio_typha.config import Config
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model.kinds import CALICO_CRD_GROUP, CALICO_V3_GROUP, calico_kind

INIT_LOGGER = "trio_typha.daemon"


async def run_once(srv: ApiServer, tmp_path: Path, group: str) -> None:
    config = load_kube_client_config(Config(kubeconfig=str(srv.kubeconfig_path(tmp_path))))
    async with open_kubernetes_datastore(config) as ds, \
            running_daemon(daemon_config(DatastoreType="kubernetes"), datastore=ds) as d:
        assert ds.calico_group == group
        with trio.fail_after(HANG):
            await d.wait_in_sync()


@pytest.mark.parametrize("group", [CALICO_CRD_GROUP, CALICO_V3_GROUP])
async def test_creates_cluster_information_and_built_in_tiers(
        tmp_path: Path, group: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with open_apiserver(calico_groups=(group,)) as srv:
        await run_once(srv, tmp_path, group)
        info = srv.store.get(calico_kind("ClusterInformation", group), "", "default")
        assert info is not None
        assert info["spec"]["clusterType"] == "typha,kdd"
        assert info["spec"]["datastoreReady"] is True
        assert len(info["spec"]["clusterGUID"]) == 32
        tiers = {t["metadata"]["name"]: t["spec"]
                 for t in srv.store.objects(calico_kind("Tier", group))}
        assert tiers == {"kube-admin": {"order": 1000, "defaultAction": "Pass"},
                         "default": {"order": 1000000, "defaultAction": "Deny"},
                         "kube-baseline": {"order": 10000000, "defaultAction": "Pass"}}
        assert "Datastore initialized. (created ClusterInformation default; created Tier " \
               "kube-admin; created Tier default; created Tier kube-baseline)" in caplog.text
        # A second replica finds everything in place and writes nothing.
        caplog.clear()
        await run_once(srv, tmp_path, group)
        assert "Datastore initialized.\n" in caplog.text or any(
            r.getMessage() == "Datastore initialized." for r in caplog.records)


async def test_completes_an_existing_cluster_information(tmp_path: Path) -> None:
    kind = calico_kind("ClusterInformation", CALICO_CRD_GROUP)
    async with open_apiserver(calico_groups=(CALICO_CRD_GROUP,)) as srv:
        srv.store.create(kind, {"apiVersion": kind.api_version, "kind": kind.kind,
                                "metadata": {"name": "default"},
                                "spec": {"clusterGUID": "abc123", "clusterType": "k8s,bgp",
                                         "calicoVersion": "v3.32.1",
                                         "datastoreReady": True}})
        await run_once(srv, tmp_path, CALICO_CRD_GROUP)
        spec = srv.store.get(kind, "", "default")["spec"]  # type: ignore[index]
        assert spec == {"clusterGUID": "abc123", "clusterType": "k8s,bgp,typha,kdd",
                        "calicoVersion": "v3.32.1", "datastoreReady": True}


async def test_skipped_with_one_line_when_rbac_forbids(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with open_apiserver(calico_groups=(CALICO_CRD_GROUP,)) as srv:
        for plural in ("clusterinformations", "tiers"):
            srv.forbid(f"{plural}.{CALICO_CRD_GROUP}", {"create", "update"})
        await run_once(srv, tmp_path, CALICO_CRD_GROUP)  # still serves and gets in sync
        skipped = [r for r in caplog.records if "Skipping datastore initialisation" in
                   r.getMessage()]
        assert len(skipped) == 1 and skipped[0].levelno == logging.INFO
        assert "403" in skipped[0].getMessage()
        assert srv.store.get(calico_kind("ClusterInformation", CALICO_CRD_GROUP), "",
                             "default") is None
