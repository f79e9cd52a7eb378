"""The kind test bed as a user runs it: kind-config.yaml, and the Justfile's recipes as
``just`` itself prints them (``--dry-run``: nothing is executed, Docker and kind are not
needed).  The cluster itself cannot run here; docs/deploy.md says what was run where."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.deploy_render import JUST, ROOT


def dry_run(*recipe: str) -> list[str]:
    out = subprocess.run([str(JUST), "--dry-run", *recipe], cwd=ROOT, capture_output=True,
                         text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stderr.splitlines() if line.strip()]


def test_kind_config_disables_the_default_cni_for_calico() -> None:
    cfg = yaml.safe_load((ROOT / "kind-config.yaml").read_text())
    assert (cfg["kind"], cfg["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    assert cfg["networking"]["disableDefaultCNI"] is True
    # Calico's default IPv4 pool (the manifest's CALICO_IPV4POOL_CIDR default).
    assert cfg["networking"]["podSubnet"] == "192.168.0.0/16"
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles == ["control-plane", "worker", "worker", "worker"]
    assert cfg["name"] == "trio-typha"  # kind names the context kind-trio-typha


def evaluate(variable: str, **env: str) -> str:
    out = subprocess.run([str(JUST), "--evaluate", variable], cwd=ROOT, capture_output=True,
                         text=True, timeout=30, check=False, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout


ENGINE = "`bash tools/engine.sh`"  # how --dry-run prints the engine (evaluated only when run)


def test_kind_up_prints_its_commands_in_order() -> None:
    ref = evaluate("image_ref")
    lines = dry_run("kind-up")
    expected = [
        "kind get clusters | grep -qxF trio-typha || ",
        f"DOCKER_BUILDKIT=1 BUILDAH_FORMAT=docker {ENGINE} build -t {ref} -f Containerfile .",
        f"bash tools/kind-load.sh {ENGINE} trio-typha {ref} .kind/trio-typha.tar",
        "curl ",
        'test -z "" || ',
        "kubectl --context kind-trio-typha apply --server-side --force-conflicts "
        "-k deploy/overlays/kind-calico",
        "rollout status deployment/calico-typha",
        "rollout status daemonset/calico-node",
        "wait --for=condition=Ready pod -l k8s-app=calico-node",
        "wait --for=condition=Ready pod -l k8s-app=calico-typha",
        "get pods -o wide",
        'echo "kind-up:',
    ]
    positions = []
    for fragment in expected:
        hits = [i for i, line in enumerate(lines) if fragment in line]
        assert hits, f"no command with {fragment!r} in:\n" + "\n".join(lines)
        positions.append(hits[0])
    assert positions == sorted(positions), "\n".join(lines)
    # Re-runnable: the cluster is created only when kind does not list it, the image loaded
    # only into nodes without it (tools/kind-load.sh), the manifest downloaded only when it
    # is not there; the build, the server-side apply and the waits are safe to repeat.
    create = lines[positions[0]]
    assert create.endswith(
        f"KIND_EXPERIMENTAL_PROVIDER={ENGINE} kind create cluster --config kind-config.yaml")
    # kind is told which engine answered: its own detection picks docker for a bare CLI.
    for line in lines:
        if line.startswith(("kind ", "KIND_")) or " kind " in line:
            assert line.count("kind ") == line.count(f"KIND_EXPERIMENTAL_PROVIDER={ENGINE} kind ")
    # Calico's manifest is fetched at run time, for v3.32.1, into the overlay (ignored by
    # git), and takes its place only once complete (a failed download leaves the .part).
    manifest = "deploy/overlays/kind-calico/calico/calico-typha.yaml"
    download = lines[positions[3]]
    assert download.startswith(f"test -s {manifest} || {{ curl ")
    assert download.endswith(f" && mv {manifest}.part {manifest}; }}")
    curl = shlex.split(download.split("{ ", 1)[1].split(" && ")[0])
    url = curl[-1]
    assert url == ("https://raw.githubusercontent.com/projectcalico/calico/v3.32.1/"
                   "manifests/calico-typha.yaml")
    assert curl[curl.index("-o") + 1] == "deploy/overlays/kind-calico/calico/calico-typha.yaml.part"
    kustomization = yaml.safe_load(
        (ROOT / "deploy/overlays/kind-calico/calico/kustomization.yaml").read_text())
    assert "calico-typha.yaml" in kustomization["resources"]
    # Every line is a plain shell command.
    for line in lines:
        shlex.split(line)


def test_one_image_reference_for_the_justfile_and_every_manifest() -> None:
    """The reference is set once (deploy/base's ``images:``); the Justfile builds, saves,
    pushes and loads it.  It is fully qualified (``localhost/`` or a registry host), so
    docker, podman and the kind nodes' containerd all name the image the same way (podman
    stores an unqualified ``trio-typha:dev`` as ``localhost/trio-typha:dev``)."""
    ref = evaluate("image_ref")
    host = ref.split("/")[0]
    assert "/" in ref and (host == "localhost" or "." in host or ":" in host), ref
    assert dry_run("image") == [
        f"DOCKER_BUILDKIT=1 BUILDAH_FORMAT=docker {ENGINE} build -t {ref} -f Containerfile ."]
    [_, push] = dry_run("push")  # the registry check, then the push
    assert push == f"{ENGINE} push {ref}"
    # Nowhere else does a deploy file or the Justfile spell an image tag of ours.
    for path in [ROOT / "Justfile", *(ROOT / "deploy").rglob("*.yaml")]:
        if path.name == "calico-typha.yaml":
            continue
        text = path.read_text()
        assert not re.search(r"trio-typha:[\w.-]+", text.replace("trio-typha:\n", "")), path


def test_push_refuses_a_reference_without_a_registry() -> None:
    """``push`` runs this guard first (``just`` evaluates the engine before any line, so
    the guard is run here on its own: no engine answers on this machine)."""
    assert dry_run("push")[0].startswith('case "localhost/')
    out = subprocess.run([str(JUST), "_require-registry"], cwd=ROOT, capture_output=True, text=True,
                         timeout=30, check=False)
    assert out.returncode == 2
    assert "names no registry: set newName in deploy/base/kustomization.yaml" in out.stderr


def fake_engine(bin_dir: Path, name: str, answers: bool) -> None:
    """A stand-in docker/podman CLI (no container engine runs here): only ``info``,
    succeeding when its daemon is meant to answer, as the real CLIs exit."""
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n[ \"$1\" = info ] && exit {0 if answers else 1}\nexit 3\n")
    path.chmod(0o755)


@pytest.mark.parametrize(("docker", "podman", "chosen"), [
    (True, True, "docker"), (False, True, "podman"), (True, None, "docker"),
    (None, True, "podman"), (False, False, None), (None, None, None)])
def test_the_engine_is_the_one_whose_daemon_answers(tmp_path: Path, docker: bool | None,
                                                    podman: bool | None,
                                                    chosen: str | None) -> None:
    """tools/engine.sh, as the Justfile evaluates it: a docker CLI whose daemon does not
    answer is passed over for podman; with neither answering, the recipe stops."""
    for name, answers in (("docker", docker), ("podman", podman)):
        if answers is not None:
            fake_engine(tmp_path, name, answers)
    for tool in ("bash", "sh"):  # only these and the fakes on PATH
        (tmp_path / tool).symlink_to(shutil.which(tool) or tool)
    run = subprocess.run([str(JUST), "--evaluate", "engine"], cwd=ROOT, capture_output=True,
                         text=True, timeout=30, check=False, env={"PATH": str(tmp_path)})
    if chosen is None:
        assert run.returncode != 0
        assert "no container engine answers" in run.stderr
    else:
        assert (run.returncode, run.stdout) == (0, chosen), run.stderr


def test_the_other_recipes_are_plain_commands() -> None:
    assert dry_run("kind-down") == [
        f"KIND_EXPERIMENTAL_PROVIDER={ENGINE} kind delete cluster --name trio-typha",
        "rm -rf .kind deploy/overlays/kind-calico/calico/calico-typha.yaml "
        "deploy/overlays/kind-calico/calico/calico-typha.yaml.part"]
    guard, venv, churn = dry_run("churn", "20", "30")
    assert "kubectl config get-contexts -o name | grep -qxF kind-trio-typha" in guard
    assert venv == "bash -c 'source tools/bootstrap.sh && bootstrap_env'"
    words = shlex.split(churn)
    assert words[:3] == [".venv/bin/python", "-m", "testbed.churn"]
    assert words[words.index("--context") + 1] == "kind-trio-typha"
    assert "--cleanup" in words and "--seconds 30" in churn
    guard, venv, e2e = dry_run("e2e")
    assert "grep -qxF kind-trio-typha" in guard
    assert venv == "bash -c 'source tools/bootstrap.sh && bootstrap_env e2e'"
    assert e2e.startswith("TRIO_TYPHA_E2E_CONTEXT=kind-trio-typha .venv/bin/pytest tests/e2e")
    assert "TRIO_TYPHA_E2E_KUBECONFIG" not in e2e
    assert dry_run("certs") == ["bash deploy/certs.sh deploy/components/mtls/certs"]
    guard, patch = dry_run("mtls-calico-node")
    assert "grep -qxF kind-trio-typha" in guard
    assert shlex.split(patch) == [
        "kubectl", "--context", "kind-trio-typha", "-n", "kube-system", "patch", "daemonset",
        "calico-node", "--type", "strategic", "--patch-file",
        "deploy/components/calico-node-mtls/calico-node-tls.yaml"]


def test_kind_up_with_mtls_is_one_command() -> None:
    """``just mtls=1 kind-up``: the same steps, certificates made if there are none, and the
    mTLS kind overlay applied (both halves in one apply: test_deploy_manifests); any other
    value of ``mtls`` is refused before anything runs."""
    plain, mtls = dry_run("kind-up"), dry_run("mtls=1", "kind-up")
    certs = ("test -z \"1\" || test -s deploy/components/mtls/certs/ca.crt || "
             "bash deploy/certs.sh deploy/components/mtls/certs")
    apply = ("kubectl --context kind-trio-typha apply --server-side --force-conflicts "
             "-k deploy/overlays/kind-calico")
    assert [line for line in mtls if line not in plain] == [
        certs, apply + "-mtls", plain[-1].replace("RBAC trio-typha;",
                                                  "RBAC trio-typha, mutual TLS with calico-node;")]
    assert mtls.index(certs) < mtls.index(apply + "-mtls")
    bad = subprocess.run([str(JUST), "--dry-run", "mtls=yes", "kind-up"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode != 0 and "mtls is 1 or unset, not yes" in bad.stderr


def test_a_named_context_replaces_the_kind_one() -> None:
    _, _, churn = dry_run("context=staging", "churn")
    assert "--context staging" in churn
    guard, _, e2e = dry_run("context=staging", "e2e")
    assert "grep -qxF staging" in guard and "TRIO_TYPHA_E2E_CONTEXT=staging" in e2e


def kubeconfig(path: Path, current: str, contexts: list[str]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}} for n in contexts]}))
    return path


@pytest.mark.parametrize("recipe", ["e2e", "churn"])
def test_e2e_and_churn_refuse_a_current_context_that_is_not_kinds(tmp_path: Path,
                                                                  recipe: str) -> None:
    """Run for real, with a kubeconfig whose current context is someone's production
    cluster: the recipe stops at its guard (kubectl reads the kubeconfig; nothing is
    contacted, the venv is not touched, no test and no churn runs)."""
    kc = kubeconfig(tmp_path / "kc", "prod", ["prod"])
    out = subprocess.run([str(JUST), recipe], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=False, env={**os.environ, "KUBECONFIG": str(kc)})
    assert out.returncode == 2, out.stderr
    assert ("no kube-context kind-trio-typha: run just kind-up, or name the cluster to use: "
            "just context=NAME ...") in out.stderr
    assert "bootstrap" not in out.stderr and out.stdout == ""
    # The guard passes once the context is there (named or kind's).
    kubeconfig(kc, "prod", ["prod", "kind-trio-typha"])
    for args in (["_require-context"], ["context=prod", "_require-context"]):
        ok = subprocess.run([str(JUST), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=False, env={**os.environ, "KUBECONFIG": str(kc)})
        assert ok.returncode == 0, ok.stderr


def test_certs_recipe_makes_the_overlays_certificates(tmp_path: Path) -> None:
    out = subprocess.run([str(JUST), "certs", str(tmp_path / "certs")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    made = sorted(p.name for p in (tmp_path / "certs").iterdir())
    assert made == ["ca.crt", "ca.key", "typha-client.crt", "typha-client.key",
                    "typha-server.crt", "typha-server.key"]
    assert (tmp_path / "certs/typha-server.key").stat().st_mode & 0o077 == 0


ID = "4f3c2b1a" * 8  # an image ID (config digest), as podman prints it: no sha256: prefix
FAKE_DOCKER = r"""#!/bin/sh
echo "docker $*" >> "$STATE/log"
case "$1 $2" in
  "image inspect") cat "$STATE/engine-id" ;;
  "exec "*)  # exec NODE crictl inspecti -o json IMAGE: crictl's indented JSON, or not found
    [ -f "$STATE/node-$2" ] || { echo "no such image" >&2; exit 1; }
    printf '{\n  "status": {\n    "id": "%s",\n    "repoTags": [\n      "%s"\n    ]\n  },\n  "info": {}\n}\n' "$(cat "$STATE/node-$2")" "$7" ;;
  "save -o") [ -f "$STATE/save-fails" ] && { printf partial > "$3"; exit 1; }
    echo archive > "$3" ;;
  *) exit 3 ;;
esac
"""
FAKE_KIND = r"""#!/bin/sh
echo "kind $* (provider $KIND_EXPERIMENTAL_PROVIDER)" >> "$STATE/log"
case "$1 $2" in
  "get nodes") cat "$STATE/nodes" ;;
  "load image-archive") ;;
  *) exit 3 ;;
esac
"""
NODES = ["trio-typha-control-plane", "trio-typha-worker", "trio-typha-worker2"]


def run_kind_load(tmp_path: Path, on_nodes: dict[str, str], *,
                  save_fails: bool = False) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """tools/kind-load.sh against stand-ins for the docker CLI (no engine runs here) and kind,
    which answer as the real ones do for the calls it makes; ``on_nodes``: the image ID each
    node's containerd reports for the image (crictl's form, sha256:...)."""
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_dir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("kind", FAKE_KIND)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (state / "engine-id").write_text(ID + "\n")
    (state / "nodes").write_text("\n".join(NODES) + "\n")
    for node, image_id in on_nodes.items():
        (state / f"node-{node}").write_text(image_id)
    if save_fails:
        (state / "save-fails").touch()
    (state / "log").touch()
    out = subprocess.run(
        ["bash", str(ROOT / "tools/kind-load.sh"), "docker", "trio-typha",
         "localhost/trio-typha:dev", str(tmp_path / "kind/trio-typha.tar")],
        capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(state)})
    return out, (state / "log").read_text().splitlines()


def test_kind_load_loads_a_new_cluster_everywhere(tmp_path: Path) -> None:
    out, log = run_kind_load(tmp_path, {})
    assert out.returncode == 0, out.stderr
    archive = tmp_path / "kind/trio-typha.tar"
    assert log[-2:] == [
        f"docker save -o {archive}.part localhost/trio-typha:dev",
        f"kind load image-archive {archive} --name trio-typha --nodes {','.join(NODES)} "
        "(provider docker)"]
    assert archive.read_text() == "archive\n" and not Path(f"{archive}.part").exists()


def test_kind_load_skips_an_unchanged_image(tmp_path: Path) -> None:
    """Every node's containerd has the image ID the engine has: nothing saved or loaded."""
    out, log = run_kind_load(tmp_path, dict.fromkeys(NODES, f"sha256:{ID}"))
    assert out.returncode == 0, out.stderr
    assert not [line for line in log if " save " in line or " load " in line], log
    assert f"every node of trio-typha has localhost/trio-typha:dev (image ID {ID})" in out.stdout
    assert not (tmp_path / "kind").exists()


def test_kind_load_loads_only_the_nodes_with_another_image(tmp_path: Path) -> None:
    """A rebuilt image (another ID on two nodes), or a node that lost it, is loaded there."""
    nodes = {NODES[0]: f"sha256:{ID}", NODES[1]: "sha256:" + "0" * 64}
    out, log = run_kind_load(tmp_path, nodes)
    assert out.returncode == 0, out.stderr
    assert log[-1].startswith("kind load image-archive ")
    assert f"--nodes {NODES[1]},{NODES[2]} " in log[-1]


def test_kind_load_stops_on_a_failed_save_and_leaves_no_archive(tmp_path: Path) -> None:
    out, log = run_kind_load(tmp_path, {}, save_fails=True)
    assert out.returncode != 0
    assert not (tmp_path / "kind/trio-typha.tar").exists()  # only the .part: re-run saves again
    assert not [line for line in log if " load " in line]
