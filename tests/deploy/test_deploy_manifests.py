"""deploy/: every kustomization renders with kustomize (``kubectl kustomize``), every
rendered object loads into the ``kubernetes`` client's models without losing a field, and
the objects are shaped as Calico's calico-typha deployment is."""

from __future__ import annotations

import json
import math
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from tests.deploy.deploy_render import (
    DEPLOY,
    ROOT,
    by_kind,
    container,
    env,
    image_ref,
    render,
    round_trip_losses,
    with_certs,
)
from tests.e2e.cluster_tls import MissingClientTLS, calico_node_tls, secret_files
from tests.e2e.harness import HANG, daemon_config, running_daemon
from trio_typha.client.typha import TyphaClient
from trio_typha.config_sources import load_config
from trio_typha.host import server_processes
from trio_typha.model.kv import SyncStatus

# A stand-in for Calico's published calico-typha.yaml, which `just kind-up` downloads and
# which is never committed: just the objects the kind overlay touches or must leave alone,
# in the shape the manifest has them (written for this test).
CALICO_STAND_IN = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: calico-node, namespace: kube-system}
---
apiVersion: v1
kind: Service
metadata: {name: calico-typha, namespace: kube-system, labels: {k8s-app: calico-typha}}
spec:
  ports: [{name: calico-typha, port: 5473, protocol: TCP, targetPort: calico-typha}]
  selector: {k8s-app: calico-typha}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: calico-node, namespace: kube-system, labels: {k8s-app: calico-node}}
spec:
  selector: {matchLabels: {k8s-app: calico-node}}
  template:
    metadata: {labels: {k8s-app: calico-node}}
    spec:
      hostNetwork: true
      serviceAccountName: calico-node
      containers:
        - name: calico-node
          image: quay.io/calico/node:v3.32.1
          env:
            - name: FELIX_TYPHAK8SSERVICENAME
              value: calico-typha
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: calico-typha, namespace: kube-system, labels: {k8s-app: calico-typha}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: calico-typha}}
  template:
    metadata: {labels: {k8s-app: calico-typha}}
    spec:
      hostNetwork: true
      serviceAccountName: calico-node
      terminationGracePeriodSeconds: 300
      containers:
        - name: calico-typha
          image: quay.io/calico/calico:v3.32.1
          args: [component, typha]
          ports: [{containerPort: 5473, name: calico-typha, protocol: TCP}]
          env:
            - {name: TYPHA_DATASTORETYPE, value: kubernetes}
            - {name: TYPHA_HEALTHENABLED, value: "true"}
            - {name: TYPHA_SHUTDOWNTIMEOUTSECS, value: "300"}
          livenessProbe:
            httpGet: {path: /liveness, port: 9098, host: localhost}
          readinessProbe:
            httpGet: {path: /readiness, port: 9098, host: localhost}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: calico-typha, namespace: kube-system, labels: {k8s-app: calico-typha}}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {k8s-app: calico-typha}}
"""
#: What the kind overlay drops from Calico's manifest: trio-typha's own take their place.
CALICOS_TYPHA = {("Deployment", "calico-typha"), ("Service", "calico-typha"),
                 ("PodDisruptionBudget", "calico-typha")}


def kustomizations() -> list[Path]:
    return sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))


def prepared(tmp_path: Path) -> Path:
    """deploy/ copied, with the mTLS certificates and the kind overlay's Calico stand-in."""
    copy = with_certs(tmp_path)
    (copy / "overlays/kind-calico/calico/calico-typha.yaml").write_text(CALICO_STAND_IN)
    return copy


RENDERED = ["base", "rbac", "overlays/mtls", "overlays/kind-calico", "overlays/kind-calico-mtls",
            "overlays/kind-calico/calico"]
#: Rendered only as part of the overlays that use them.
COMPONENTS = ["components/mtls", "components/calico-node-mtls"]


def test_every_kustomization_is_covered() -> None:
    names = {str(p.relative_to(DEPLOY)) for p in kustomizations()}
    assert names == {*RENDERED, *COMPONENTS}
    for where in COMPONENTS:
        assert yaml.safe_load((DEPLOY / where / "kustomization.yaml").read_text())[
            "kind"] == "Component"


@pytest.mark.parametrize("where", RENDERED)
def test_renders_and_every_object_loads_into_client_models(tmp_path: Path, where: str) -> None:
    objs = render(prepared(tmp_path) / where)
    assert objs
    for obj in objs:
        assert round_trip_losses(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"


def test_base_is_shaped_like_calicos_calico_typha(tmp_path: Path) -> None:
    objs = render(DEPLOY / "base")
    assert {o["kind"] for o in objs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                         "Service", "Deployment", "PodDisruptionBudget"}
    assert all(o["metadata"].get("namespace") == "kube-system" for o in objs
               if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"))

    svc = by_kind(objs, "Service", "calico-typha")
    [port] = svc["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == ("calico-typha", 5473,
                                                                "calico-typha")
    dep = by_kind(objs, "Deployment", "calico-typha")
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    spec = pod["spec"]
    assert dep["spec"]["replicas"] == 3 and spec["hostNetwork"] is True
    [term] = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    c = container(dep)
    assert c["image"] == image_ref()
    assert {p["containerPort"]: p["name"] for p in c["ports"]}[5473] == "calico-typha"
    assert c["livenessProbe"]["httpGet"] == {"path": "/liveness", "port": 9098,
                                             "host": "localhost"}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readiness"
    assert c["readinessProbe"]["httpGet"]["port"] == 9098
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()
    # A read-only root filesystem still leaves trio-typha a writable /tmp (ServerWorkers'
    # socket directory).
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    [tmp] = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in {v["name"]: v for v in spec["volumes"]}[tmp["name"]]

    # Typha's own variables, as trio-typha reads them: every value valid, and the grace
    # period covers the graceful shutdown.
    variables = env(c)
    assert variables["TYPHA_DATASTORETYPE"] == "kubernetes"
    # ServerWorkers follows the CPU request (the kubelet rounds it up to whole CPUs), not
    # the node's CPU count.
    [workers] = [e for e in c["env"] if e["name"] == "TYPHA_SERVERWORKERS"]
    assert workers["valueFrom"]["resourceFieldRef"] == {"resource": "requests.cpu",
                                                        "divisor": "1"}
    variables["TYPHA_SERVERWORKERS"] = str(math.ceil(_cpu(c["resources"]["requests"]["cpu"])))
    cfg = load_config({k: v for k, v in variables.items() if k.startswith("TYPHA_")})
    assert server_processes(cfg) >= 1
    assert cfg.health_enabled and cfg.health_port == 9098
    # The pod is on the node's network: plaintext metrics stay on its loopback (Calico's
    # manifest leaves them off for this reason), and no port is declared for them.
    assert cfg.prometheus_metrics_enabled and cfg.prometheus_metrics_host == "127.0.0.1"
    assert not cfg.prometheus_metrics_cert_file
    assert [p["containerPort"] for p in c["ports"]] == [5473]
    assert spec["terminationGracePeriodSeconds"] >= cfg.shutdown_timeout_secs > 0

    pdb = by_kind(objs, "PodDisruptionBudget", "calico-typha")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # The pod runs as the service account the role is bound to.
    binding = by_kind(objs, "ClusterRoleBinding")
    [subject] = binding["subjects"]
    assert (subject["name"], subject["namespace"]) == (spec["serviceAccountName"], "kube-system")
    assert binding["roleRef"]["name"] == by_kind(objs, "ClusterRole")["metadata"]["name"]
    by_kind(objs, "ServiceAccount", spec["serviceAccountName"])


def mounted_files(pod: dict[str, Any], container_name: str, objs: list[dict[str, Any]],
                  root: Path) -> dict[str, Path]:
    """Every file the container sees from a Secret volume, from the rendered Secrets
    (tests/e2e/cluster_tls.py writes them out as the kubelet would)."""
    return secret_files(pod, container_name, _secrets(objs), root)


def _secrets(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}


def calico_node_with_mtls(copy: Path) -> dict[str, Any]:
    """The stand-in calico-node DaemonSet with calico-node-tls.yaml applied by kubectl's own
    strategic merge (``kubectl patch --local``, what ``just mtls-calico-node`` sends)."""
    [ds] = [d for d in yaml.safe_load_all(CALICO_STAND_IN) if d and d["kind"] == "DaemonSet"]
    (copy / "calico-node.yaml").write_text(yaml.safe_dump(ds))
    out = subprocess.run(["kubectl", "patch", "--local", "-f", str(copy / "calico-node.yaml"),
                          "--type", "strategic", "--patch-file",
                          str(copy / "components/calico-node-mtls/calico-node-tls.yaml"),
                          "-o", "json"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    patched: dict[str, Any] = json.loads(out.stdout)
    return patched


def test_mtls_overlay_mounts_secrets_made_by_certs_sh(tmp_path: Path) -> None:
    copy = prepared(tmp_path)
    objs = render(copy / "overlays/mtls")
    secrets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}
    assert set(secrets) == {"typha-certs", "node-certs", "typha-ca"}
    assert secrets["typha-certs"]["type"] == secrets["node-certs"]["type"] == "kubernetes.io/tls"
    assert set(secrets["typha-certs"]["data"]) == {"tls.crt", "tls.key"}
    dep = by_kind(objs, "Deployment", "calico-typha")
    assert env(container(dep))["TYPHA_CLIENTCN"] == "typha-client"
    files = mounted_files(dep["spec"]["template"], "calico-typha", objs, tmp_path / "typha")
    for name in ("TYPHA_CAFILE", "TYPHA_SERVERCERTFILE", "TYPHA_SERVERKEYFILE"):
        assert env(container(dep))[name] in files
    subjects = {}
    for who in ("typha-server", "typha-client"):
        crt = copy / f"components/mtls/certs/{who}.crt"
        verify = subprocess.run(["openssl", "verify", "-CAfile",
                                 str(copy / "components/mtls/certs/ca.crt"), str(crt)],
                                capture_output=True, text=True, check=False)
        assert verify.returncode == 0, verify.stderr
        subjects[who] = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                                        str(crt)], capture_output=True, text=True,
                                       check=True).stdout
    assert "CN=typha-server" in subjects["typha-server"].replace(" ", "")
    assert "CN=typha-client" in subjects["typha-client"].replace(" ", "")


def test_mtls_calico_node_patch_sets_felix_from_the_same_secrets(tmp_path: Path) -> None:
    """calico-node keeps Calico's settings (env merged by name) and gains Felix's four TLS
    parameters (felix/config/config_params.go: TyphaCAFile, TyphaCertFile, TyphaKeyFile,
    TyphaCN), every file mounted from a Secret the overlay makes."""
    copy = prepared(tmp_path)
    objs = render(copy / "overlays/mtls")
    ds = calico_node_with_mtls(copy)
    pod = ds["spec"]["template"]
    felix = env(container({"spec": {"template": pod}}, "calico-node"))
    assert felix["FELIX_TYPHAK8SSERVICENAME"] == "calico-typha"
    files = mounted_files(pod, "calico-node", objs, tmp_path / "node")
    # Felix's rule: CA, certificate and key together, with a CN or a URI SAN.
    for name in ("FELIX_TYPHACAFILE", "FELIX_TYPHACERTFILE", "FELIX_TYPHAKEYFILE"):
        assert felix[name] in files, name
    assert felix["FELIX_TYPHACN"] == "typha-server"
    # The same CA as the server's, and calico-node presents the CN the server asks for.
    dep = by_kind(objs, "Deployment", "calico-typha")
    typha = mounted_files(dep["spec"]["template"], "calico-typha", objs, tmp_path / "typha")
    assert files[felix["FELIX_TYPHACAFILE"]].read_bytes() == \
        typha[env(container(dep))["TYPHA_CAFILE"]].read_bytes()
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                              str(files[felix["FELIX_TYPHACERTFILE"]])],
                             capture_output=True, text=True, check=True).stdout
    assert f"CN={env(container(dep))['TYPHA_CLIENTCN']}" in subject.replace(" ", "")


async def test_mtls_overlay_certificates_work_with_the_daemon(tmp_path: Path) -> None:
    """Both ends as the pods would see them (files from the rendered Secrets, paths from the
    Deployment and the patched calico-node): Felix's settings complete the handshake and the
    sync; the server's own certificate, without CN typha-client, is refused."""
    copy = await trio.to_thread.run_sync(prepared, tmp_path)
    objs = await trio.to_thread.run_sync(render, copy / "overlays/mtls")
    ds = await trio.to_thread.run_sync(calico_node_with_mtls, copy)
    dep = by_kind(objs, "Deployment", "calico-typha")
    typha = mounted_files(dep["spec"]["template"], "calico-typha", objs, tmp_path / "typha")
    node = mounted_files(ds["spec"]["template"], "calico-node", objs, tmp_path / "node")
    tenv = env(container(dep))
    felix = env(container({"spec": ds["spec"]}, "calico-node"))
    cfg = daemon_config({name: str(typha[tenv[name]]) for name in
                         ("TYPHA_CAFILE", "TYPHA_SERVERCERTFILE", "TYPHA_SERVERKEYFILE")}
                        | {"TYPHA_CLIENTCN": tenv["TYPHA_CLIENTCN"]},
                        DatastoreType="memory", MemoryDemoCluster="tiny")

    def felix_context(cert: Path, key: Path) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(node[felix["FELIX_TYPHACAFILE"]]))
        ctx.check_hostname = False  # Felix checks the CN (FELIX_TYPHACN), not a host name
        ctx.load_cert_chain(str(cert), str(key))
        return ctx

    async with running_daemon(cfg) as daemon:
        port = daemon.ports["server"]
        as_felix = felix_context(node[felix["FELIX_TYPHACERTFILE"]],
                                 node[felix["FELIX_TYPHAKEYFILE"]])
        async with TyphaClient(("127.0.0.1", port), syncer_type="felix",
                               ssl_context=as_felix, server_cn=felix["FELIX_TYPHACN"]) as client:
            with trio.fail_after(HANG):
                await client.wait_for_status(SyncStatus.IN_SYNC)
            assert client.kvs
        # The server's own certificate is from the same CA but has the wrong CN.
        wrong = felix_context(typha[tenv["TYPHA_SERVERCERTFILE"]],
                              typha[tenv["TYPHA_SERVERKEYFILE"]])
        async with TyphaClient(("127.0.0.1", port), syncer_type="felix",
                               ssl_context=wrong, server_cn=felix["FELIX_TYPHACN"]) as client:
            with trio.fail_after(HANG):
                async for _event in client:
                    pass
            assert not client.kvs and client.status is not SyncStatus.IN_SYNC


def test_kind_overlay_is_calico_with_the_base_as_its_typha(tmp_path: Path) -> None:
    """Calico's manifest without its Typha, plus deploy/base as it is deployed anywhere
    (same image reference, RBAC, Service, PDB), with only the pull policy and the size
    changed for a laptop."""
    copy = prepared(tmp_path)
    objs = render(copy / "overlays/kind-calico")
    base = render(copy / "base")
    original = [d for d in yaml.safe_load_all(CALICO_STAND_IN) if d]
    dep = by_kind(objs, "Deployment", "calico-typha")
    spec = dep["spec"]["template"]["spec"]
    c = container(dep)
    assert (c["image"], c["imagePullPolicy"]) == (image_ref(), "Never")
    assert "command" not in c and "args" not in c  # the image's entrypoint: trio-typha serve
    assert dep["spec"]["replicas"] == 3
    assert spec["serviceAccountName"] == "trio-typha"
    assert spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    # One process per replica: each would hold its own copy of the cache.
    [workers] = [e for e in c["env"] if e["name"] == "TYPHA_SERVERWORKERS"]
    assert workers == {"name": "TYPHA_SERVERWORKERS", "value": "1"}
    variables = env(c)
    cfg = load_config({k: v for k, v in variables.items() if k.startswith("TYPHA_")})
    assert server_processes(cfg) == 1
    assert spec["terminationGracePeriodSeconds"] >= cfg.shutdown_timeout_secs == 300
    # Apart from those fields, the base's Deployment as it is.
    base_dep = by_kind(base, "Deployment", "calico-typha")
    base_c = container(base_dep)
    for key in ("env", "resources", "imagePullPolicy"):
        c.pop(key)
        base_c.pop(key)
    assert dep == base_dep
    # Calico's own Typha objects are gone, the base's stand in their place, and everything
    # else is Calico's object as published.
    for obj in original:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in CALICOS_TYPHA:
            assert by_kind(objs, *key) == by_kind(base, *key)
        else:
            assert by_kind(objs, *key) == obj
    binding = by_kind(objs, "ClusterRoleBinding", "trio-typha")
    assert binding["subjects"][0]["name"] == "trio-typha"


def test_calicos_manifest_and_certificates_are_never_committed() -> None:
    for path in ("deploy/overlays/kind-calico/calico/calico-typha.yaml",
                 "deploy/overlays/kind-calico/calico/calico-typha.yaml.part",
                 "deploy/components/mtls/certs/ca.key"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert ignored.returncode == 0, f"{path} is not ignored by git"
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT,
                                 capture_output=True, check=False)
        assert tracked.returncode != 0, f"{path} is committed"


def test_kind_mtls_overlay_sets_up_both_ends_in_one_apply(tmp_path: Path) -> None:
    """overlays/kind-calico-mtls (`just mtls=1 kind-up`) is the kind overlay with both halves
    of mutual TLS: its calico-node is the one ``just mtls-calico-node`` would make of Calico's
    (kubectl's own strategic merge of the same patch), its calico-typha the mtls overlay's with
    the kind overlay's changes, and the Secrets are the ones both mount."""
    copy = prepared(tmp_path)
    objs = render(copy / "overlays/kind-calico-mtls")
    kind = render(copy / "overlays/kind-calico")
    mtls = render(copy / "overlays/mtls")
    assert by_kind(objs, "DaemonSet", "calico-node") == calico_node_with_mtls(copy)
    dep = by_kind(objs, "Deployment", "calico-typha")
    c = container(dep)
    assert (c["image"], c["imagePullPolicy"]) == (image_ref(), "Never")
    mtls_dep = by_kind(mtls, "Deployment", "calico-typha")
    # The mtls overlay's TLS settings over the kind overlay's (one process per replica).
    assert env(c) == env(container(mtls_dep)) | env(
        container(by_kind(kind, "Deployment", "calico-typha")))
    assert dep["spec"]["template"]["spec"]["volumes"] == \
        mtls_dep["spec"]["template"]["spec"]["volumes"]
    assert c["volumeMounts"] == container(mtls_dep)["volumeMounts"]
    secrets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}
    assert secrets == {o["metadata"]["name"]: o for o in mtls if o["kind"] == "Secret"}
    # Nothing else differs from the kind overlay: the same objects, plus the Secrets.
    def key(o: dict[str, Any]) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]
    assert sorted(map(key, objs)) == sorted([*map(key, kind), *map(key, secrets.values())])
    changed = {("DaemonSet", "calico-node"), ("Deployment", "calico-typha")}
    for obj in kind:
        if key(obj) not in changed:
            assert by_kind(objs, *key(obj)) == obj
    # Both ends from the rendered Secrets, as the pods would mount them: the same CA, and
    # calico-node presents the CN calico-typha asks for.
    pod = by_kind(objs, "DaemonSet", "calico-node")["spec"]["template"]
    node = mounted_files(pod, "calico-node", objs, tmp_path / "node")
    typha = mounted_files(dep["spec"]["template"], "calico-typha", objs, tmp_path / "typha")
    felix = env(container({"spec": {"template": pod}}, "calico-node"))
    assert node[felix["FELIX_TYPHACAFILE"]].read_bytes() == typha[env(c)["TYPHA_CAFILE"]].read_bytes()
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                              str(node[felix["FELIX_TYPHACERTFILE"]])],
                             capture_output=True, text=True, check=True).stdout
    assert f"CN={env(c)['TYPHA_CLIENTCN']}" in subject.replace(" ", "")


async def test_the_e2e_suite_syncs_from_an_mtls_kind_cluster_as_calico_node(
        tmp_path: Path) -> None:
    """On a kind-calico-mtls cluster the e2e suite's own clients (tests/e2e/cluster_tls.py)
    find Typha's demand for client certificates in the calico-typha Deployment and present
    calico-node's, from its Secrets: against the daemon set up from the same rendering they
    sync; on the plain kind overlay they use no TLS."""
    copy = await trio.to_thread.run_sync(prepared, tmp_path)
    objs = await trio.to_thread.run_sync(render, copy / "overlays/kind-calico-mtls")
    plain = await trio.to_thread.run_sync(render, copy / "overlays/kind-calico")
    assert calico_node_tls(by_kind(plain, "Deployment", "calico-typha"),
                           by_kind(plain, "DaemonSet", "calico-node"), {}, tmp_path) is None
    dep = by_kind(objs, "Deployment", "calico-typha")
    tls = calico_node_tls(dep, by_kind(objs, "DaemonSet", "calico-node"), _secrets(objs),
                          tmp_path / "e2e")
    assert tls is not None and tls.server_cn == "typha-server"
    typha = mounted_files(dep["spec"]["template"], "calico-typha", objs, tmp_path / "typha")
    tenv = env(container(dep))
    cfg = daemon_config({name: str(typha[tenv[name]]) for name in
                         ("TYPHA_CAFILE", "TYPHA_SERVERCERTFILE", "TYPHA_SERVERKEYFILE")}
                        | {"TYPHA_CLIENTCN": tenv["TYPHA_CLIENTCN"]},
                        DatastoreType="memory", MemoryDemoCluster="tiny")
    async with running_daemon(cfg) as daemon, TyphaClient(
            ("127.0.0.1", daemon.ports["server"]), syncer_type="felix",
            ssl_context=tls.ssl_context, server_cn=tls.server_cn) as client:
        with trio.fail_after(HANG):
            await client.wait_for_status(SyncStatus.IN_SYNC)
        assert client.kvs


def test_the_e2e_suite_names_a_calico_node_without_its_tls_half(tmp_path: Path) -> None:
    """Typha with mTLS but calico-node never patched: one error saying what to run."""
    copy = prepared(tmp_path)
    objs = render(copy / "overlays/kind-calico-mtls")
    plain = render(copy / "overlays/kind-calico")
    with pytest.raises(MissingClientTLS, match="just mtls-calico-node"):
        calico_node_tls(by_kind(objs, "Deployment", "calico-typha"),
                        by_kind(plain, "DaemonSet", "calico-node"), _secrets(objs), tmp_path)


def _cpu(quantity: str) -> float:
    """A Kubernetes CPU quantity ("250m", "2") in CPUs."""
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
