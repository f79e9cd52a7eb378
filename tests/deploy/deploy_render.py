"""Rendering deploy/ with kustomize (through ``kubectl kustomize``) and loading what comes out
into the official ``kubernetes`` client's models."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import yaml

# Shared with the e2e suite, which reads the same objects from a live cluster.
from tests.e2e.cluster_tls import container as container
from tests.e2e.cluster_tls import env as env

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
JUST = Path(sys.executable).with_name("just")  # rust-just, from the test extras


def image_ref() -> str:
    """The image reference as the Justfile reads it from deploy/base/kustomization.yaml."""
    out = subprocess.run([str(JUST), "--evaluate", "image_ref"], cwd=ROOT, capture_output=True,
                         text=True, timeout=30, check=True)
    return out.stdout


def kubectl() -> str:
    """The kubectl binary (tools/bootstrap.sh installs Debian's kubernetes-client)."""
    found = shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl is not installed: tests/run.sh installs it "
                           "(Debian package kubernetes-client)")
    return found


def render(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize directory``: every object it renders."""
    out = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True,
                         text=True, timeout=60, check=False)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{out.stderr}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def with_certs(tmp_path: Path) -> Path:
    """A copy of deploy/ whose mTLS component has certificates, made by deploy/certs.sh."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("certs", "calico-typha.yaml*"))
    subprocess.run(["bash", str(copy / "certs.sh"), str(copy / "components/mtls/certs")],
                   check=True, capture_output=True, timeout=60)
    return copy


def model_name(obj: dict[str, Any]) -> str:
    """``apps/v1`` ``Deployment`` -> ``V1Deployment`` (the client's model class name)."""
    version = obj["apiVersion"].rpartition("/")[2]
    return version[0].upper() + version[1:] + obj["kind"]


def load_model(obj: dict[str, Any]) -> Any:
    """Deserialize ``obj`` into its ``kubernetes.client`` model (works across client
    generations: the newer deserializer takes text, the older a response object)."""
    client = kubernetes.client.ApiClient()
    name = model_name(obj)
    if not hasattr(kubernetes.client, name):
        raise AssertionError(f"{obj['apiVersion']} {obj['kind']}: no model {name}")
    text = json.dumps(obj)
    try:
        return client.deserialize(text, name, "application/json")
    except TypeError:  # kubernetes < 30: deserialize(response, response_type)
        class Response:
            data = text
        return client.deserialize(Response(), name)


def dropped_fields(obj: Any, model_dict: Any, path: str = "") -> list[str]:
    """Fields of ``obj`` its model did not keep (misspelt or misplaced ones)."""
    if isinstance(obj, dict):
        if not isinstance(model_dict, dict):
            return [path or "."]
        out = []
        for k, v in obj.items():
            if k not in model_dict:
                out.append(f"{path}.{k}")
            else:
                out += dropped_fields(v, model_dict[k], f"{path}.{k}")
        return out
    if isinstance(obj, list):
        if not isinstance(model_dict, list) or len(obj) != len(model_dict):
            return [path]
        return [d for i, (a, b) in enumerate(zip(obj, model_dict, strict=True))
                for d in dropped_fields(a, b, f"{path}[{i}]")]
    return []


def round_trip_losses(obj: dict[str, Any]) -> list[str]:
    model = load_model(obj)
    back = kubernetes.client.ApiClient().sanitize_for_serialization(model)
    return dropped_fields(obj, back)


def by_kind(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind
             and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


