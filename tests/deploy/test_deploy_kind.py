"""The kind test bed as a user runs it: kind-config.yaml, and the Justfile's recipes as
``just`` itself prints them (``--dry-run``: nothing is executed, Docker and kind are not
needed).  The cluster itself cannot run here; docs/deploy.md says what was run where."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.deploy_render import ROOT

JUST = Path(sys.executable).with_name("just")  # rust-just, from the test extras


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


def test_kind_up_prints_its_commands_in_order() -> None:
    lines = dry_run("kind-up")
    expected = [
        "kind create cluster --config kind-config.yaml",
        " build -t trio-typha:dev -f Containerfile .",
        " save -o .kind/trio-typha.tar trio-typha:dev",
        "kind load image-archive .kind/trio-typha.tar --name trio-typha",
        "curl ",
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
    # The image is built by docker or podman, whichever is present.
    build = lines[positions[1]]
    assert build.startswith(("docker ", "podman ", "`command -v docker"))
    # Calico's manifest is fetched at run time, for v3.32.1, into the overlay (ignored by git).
    curl = shlex.split(lines[positions[4]])
    url = curl[-1]
    assert url == ("https://raw.githubusercontent.com/projectcalico/calico/v3.32.1/"
                   "manifests/calico-typha.yaml")
    assert curl[curl.index("-o") + 1] == "deploy/overlays/kind-calico/calico-typha.yaml"
    kustomization = yaml.safe_load(
        (ROOT / "deploy/overlays/kind-calico/kustomization.yaml").read_text())
    assert "calico-typha.yaml" in kustomization["resources"]
    # Every line is a plain shell command.
    for line in lines:
        shlex.split(line)


def test_the_other_recipes_are_plain_commands() -> None:
    assert dry_run("kind-down") == ["kind delete cluster --name trio-typha"]
    [churn] = dry_run("churn", "20", "30")
    assert shlex.split(churn)[:4] == [".venv/bin/python", "-m", "testbed.churn", "--rate"]
    assert "--seconds 30" in churn
    [e2e] = dry_run("e2e")
    assert "TRIO_TYPHA_E2E_KUBECONFIG=" in e2e and "pytest tests/e2e" in e2e
    [image] = dry_run("image")
    assert image.endswith("build -t trio-typha:dev -f Containerfile .")
    assert dry_run("certs") == ["bash deploy/certs.sh deploy/overlays/mtls/certs"]


def test_certs_recipe_makes_the_overlays_certificates(tmp_path: Path) -> None:
    out = subprocess.run([str(JUST), "certs", str(tmp_path / "certs")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    made = sorted(p.name for p in (tmp_path / "certs").iterdir())
    assert made == ["ca.crt", "ca.key", "typha-client.crt", "typha-client.key",
                    "typha-server.crt", "typha-server.key"]
    assert (tmp_path / "certs/typha-server.key").stat().st_mode & 0o077 == 0
